"""The keyed state backend contract: primitives, scoping, snapshots, rescaling, deltas, errors.

Every test that takes ``made`` runs on every backend in the registry
(``registered_keyed_backends()``): a new backend gets this whole suite by registering.
Tests of one backend's own behaviour take ``heap`` or ``rocks`` instead (or live in that
backend's test file).
"""

from __future__ import annotations

import operator
import pickle
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamstate.datastream import state as state_mod
from streamstate.datastream.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from streamstate.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    KeySerializationError,
    StateAccessError,
    StateDescriptorConflictError,
    StateMigrationError,
    StateSerializationError,
)
from streamstate.runtime.checkpoint.handles import (
    ByteStreamStateHandle,
    KeyGroupsStateHandle,
)
from streamstate.runtime.keygroups import (
    KeyGroupRange,
    compute_key_group_for_serialized_key,
)
from streamstate.runtime.state.base import KeyedSnapshot, KeyedStateBackend
from streamstate.runtime.state.registry import (
    create_keyed_backend,
    registration,
    registration_of,
)
from tests.support.backends import (
    ALL,
    KEYS,
    MAX_P,
    A,
    AvgAgg,
    L,
    M,
    Made,
    R,
    SumReduce,
    V,
    at,
    dump,
    fill,
    handle_of,
    kg_of,
)

# ------------------------------------------------------------------------ primitives


def test_value_state(made: Made) -> None:
    b = made.backend()
    s = b.get_partitioned_state(V)
    assert isinstance(s, ValueState)
    at(b, "k1")
    assert s.value() is None
    s.update(5)
    assert s.value() == 5
    at(b, "k2")
    assert s.value() is None
    s.update("x")
    at(b, "k1")
    assert s.value() == 5
    s.update(None)  # None removes
    assert s.value() is None
    assert list(b.get_keys("v")) == ["k2"]
    at(b, "k2")
    s.clear()
    assert s.value() is None and list(b.get_keys("v")) == []


def test_value_state_returns_live_object(heap: Made) -> None:
    # the heap backend hands out the stored object itself (no copy), as Flink's heap backend
    b = heap.backend()
    s = b.get_partitioned_state(V)
    at(b, "k")
    obj = [1]
    s.update(obj)
    assert s.value() is obj  # heap backend: no copies (as Flink's)


def test_list_state(made: Made) -> None:
    b = made.backend()
    s = b.get_partitioned_state(L)
    assert isinstance(s, ListState)
    at(b, "k")
    assert list(s.get()) == [] and list(s) == []
    s.add(1)
    s.add(2)
    s.add_all([3, 4])
    assert list(s.get()) == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="None"):
        s.add(None)
    with pytest.raises(ValueError):
        s.add_all([5, None])
    with pytest.raises(ValueError):
        s.update(None)  # type: ignore[arg-type]
    assert list(s) == [1, 2, 3, 4]
    s.update([9, 8])
    assert list(s.get()) == [9, 8]
    src = [7]
    s.update(src)
    src.append(6)  # the state keeps its own list
    assert list(s.get()) == [7]
    s.add_all([])
    assert list(s.get()) == [7]
    s.update([])
    assert list(s.get()) == [] and list(b.get_keys("l")) == []
    s.add_all([1])
    at(b, "other")
    assert list(s.get()) == []
    at(b, "k")
    s.clear()
    assert list(s.get()) == []


def test_map_state_and_dunders(made: Made) -> None:
    b = made.backend()
    s = b.get_partitioned_state(M)
    assert isinstance(s, MapState)
    at(b, "k")
    assert s.is_empty() and s.get("a") is None and not s.contains("a")
    assert list(s.items()) == [] and list(s.keys()) == [] and list(s.values()) == []
    s.put("a", 1)
    s["b"] = 2
    s.put_all({"c": 3, "d": None})
    assert s.get("a") == 1 and s["b"] == 2 and s["d"] is None
    assert "c" in s and s.contains("d") and "zz" not in s
    assert sorted(s) == ["a", "b", "c", "d"]
    assert sorted(s.keys()) == ["a", "b", "c", "d"]
    assert dict(s.items()) == {"a": 1, "b": 2, "c": 3, "d": None}
    assert sorted(s.values(), key=repr) == sorted([1, 2, 3, None], key=repr)
    del s["a"]
    s.remove("zz")  # absent: no-op
    assert "a" not in s and not s.is_empty()
    for k in s.keys():  # modifying while iterating is safe (copies)
        s.remove(k)
    assert s.is_empty() and list(b.get_keys("m")) == []
    s[("t", 1)] = "tuple key"
    with pytest.raises(KeySerializationError, match="tuple"):
        s.put(["unhashable"], 1)
    at(b, "k2")
    assert s.is_empty() and s.get(("t", 1)) is None
    at(b, "k")
    s.clear()
    assert s.is_empty()


def test_reducing_state(made: Made) -> None:
    b = made.backend()
    s = b.get_partitioned_state(R)
    assert isinstance(s, ReducingState)
    at(b, "k")
    assert s.get() is None
    s.add(1)
    s.add(2)
    s.add(3)
    assert s.get() == 6
    at(b, "j")
    assert s.get() is None
    s.add(10)
    at(b, "k")
    s.clear()
    assert s.get() is None
    # a plain callable works as reduce function
    s2 = b.get_partitioned_state(ReducingStateDescriptor("r2", max))
    s2.add(3)
    s2.add(1)
    assert s2.get() == 3


def test_aggregating_state(made: Made) -> None:
    b = made.backend()
    s = b.get_partitioned_state(A)
    assert isinstance(s, AggregatingState)
    at(b, "k")
    assert s.get() is None
    s.add(1)
    s.add(3)
    assert s.get() == 2.0
    at(b, "j")
    assert s.get() is None
    at(b, "k")
    s.clear()
    assert s.get() is None


def test_no_current_key_and_out_of_range(made: Made) -> None:
    b = made.backend(p=2, idx=0)
    s = b.get_partitioned_state(V)
    with pytest.raises(StateAccessError, match="without a current key"):
        s.value()
    with pytest.raises(StateAccessError, match="outside"):
        b.set_current_key("x", MAX_P - 1)  # owned by subtask 1
    b.set_current_key("x", 0)
    assert b.get_current_key() == "x"


def test_unhashable_key(made: Made) -> None:
    b = made.backend()
    with pytest.raises(KeySerializationError, match=r"'list'.*tuple"):
        b.set_current_key(["a", 1], 0)


def test_conflicts(made: Made) -> None:
    b = made.backend()
    s = b.get_partitioned_state(ValueStateDescriptor("x"))
    assert b.get_partitioned_state(ValueStateDescriptor("x")) is s
    with pytest.raises(StateDescriptorConflictError) as e:
        b.get_partitioned_state(ListStateDescriptor("x"))
    assert "ValueStateDescriptor('x'" in str(e.value) and "ListStateDescriptor('x'" in str(e.value)
    typeinfo = pytest.importorskip("streamstate.common.typeinfo")
    Types = typeinfo.Types
    s_int = b.get_partitioned_state(ValueStateDescriptor("y", Types.INT()))
    assert b.get_partitioned_state(ValueStateDescriptor("y", Types.INT())) is s_int
    with pytest.raises(StateDescriptorConflictError, match="y"):
        b.get_partitioned_state(ValueStateDescriptor("y", Types.STRING()))


# ------------------------------------------------------------------------ descriptors


def test_descriptors_are_frozen_picklable_values(made: Made) -> None:
    assert state_mod.__all__ == sorted(state_mod.__all__)
    for d in (*ALL, ReducingStateDescriptor("r3", operator.add, None)):
        assert pickle.loads(pickle.dumps(d)) == d
        assert hash(pickle.loads(pickle.dumps(d))) == hash(d)
        assert d.get_name() == d.name
        with pytest.raises(AttributeError):
            d.name = "other"  # type: ignore[misc]
    assert ReducingStateDescriptor("r3", operator.add).get_reduce_function().reduce(1, 2) == 3
    assert isinstance(R.get_reduce_function(), SumReduce)
    assert isinstance(A.get_agg_function(), AvgAgg)
    with pytest.raises(TypeError):
        ReducingStateDescriptor("bad", 42)
    with pytest.raises(TypeError, match="AggregateFunction"):
        AggregatingStateDescriptor("bad", SumReduce())
    assert ValueStateDescriptor("a") != ListStateDescriptor("a")
    Types = pytest.importorskip("streamstate.common.typeinfo").Types
    d = ListStateDescriptor("l", Types.INT())
    assert d.elem_type_info == Types.INT() and d.type_info == Types.LIST(Types.INT())
    md = MapStateDescriptor("m", Types.STRING(), Types.LONG())
    assert md.type_info == Types.MAP(Types.STRING(), Types.LONG())
    assert ValueStateDescriptor("v", Types.INT()) != ValueStateDescriptor("v", Types.LONG())


# ------------------------------------------------------------------------ snapshots


def test_snapshot_restore_round_trip(made: Made) -> None:
    b = made.backend()
    fill(b, KEYS)
    snap = b.snapshot()
    assert snap.data[:4] == b"SSKS"
    assert {s["name"] for s in snap.meta["states"]} == {"v", "l", "m", "r", "a"}
    for sm in snap.meta["states"]:
        assert {"key_serializer", "namespace_serializer", "value_serializer"} <= set(sm)
    b2 = made.backend()
    b2.restore([handle_of(b, snap)])
    assert dump(b2) == dump(b)
    assert len(dump(b)["v"]) == len(KEYS)


def test_restore_keeps_only_own_key_groups(made: Made) -> None:
    b = made.backend()
    fill(b, KEYS)
    h = handle_of(b, b.snapshot())
    half = made.backend(p=2, idx=1)
    half.restore([h])
    got = dump(half)
    expected = {k for k in KEYS if kg_of(k) in half.key_group_range}
    assert set(got["v"]) == expected and 0 < len(expected) < len(KEYS)
    # data of other key groups is really absent, not just hidden
    snap = half.snapshot()
    assert all(kg in half.key_group_range for kg in snap.offsets)


@pytest.mark.parametrize("new_p", [1, 2, 4])
def test_rescale_from_p3(made: Made, new_p: int) -> None:
    olds = [made.backend(p=3, idx=i) for i in range(3)]
    for b in olds:
        fill(b, [k for k in KEYS if kg_of(k) in b.key_group_range])
    handles = [handle_of(b, b.snapshot()) for b in olds]
    merged: dict[str, dict[Any, Any]] = {d.name: {} for d in ALL}
    for b in olds:
        for name, per_key in dump(b).items():
            merged[name].update(per_key)
    seen: dict[str, dict[Any, Any]] = {d.name: {} for d in ALL}
    for i in range(new_p):
        nb = made.backend(p=new_p, idx=i)
        nb.restore(handles)
        for name, per_key in dump(nb).items():
            assert not set(per_key) & set(seen[name]), "a key landed twice"
            seen[name].update(per_key)
    assert seen == merged
    assert len(seen["v"]) == len(KEYS)


@pytest.mark.parametrize(("old_p", "new_p"), [(2, 4), (4, 1), (1, 3), (3, 2)])
def test_rescale_in_place_keeps_key_groups_and_reads_the_gained_ones(
    made: Made, old_p: int, new_p: int
) -> None:
    """Subtask ``i`` at ``new_p`` takes the key groups it keeps from its backend at
    ``old_p`` and restores only the others from the old subtasks' snapshots: the same
    state as a restore of all its key groups, counting what it kept and what it read."""
    olds = [made.backend(p=old_p, idx=i) for i in range(old_p)]
    for b in olds:
        fill(b, [k for k in KEYS if kg_of(k) in b.key_group_range])
    handles = [handle_of(b, b.snapshot()) for b in olds]
    for i in range(min(old_p, new_p)):
        full = made.backend(p=new_p, idx=i)
        full.restore(handles)
        kept_in_place = made.backend(p=new_p, idx=i)
        kept = olds[i].key_group_range.intersection(kept_in_place.key_group_range)
        assert kept_in_place.take_key_groups(olds[i], kept) == len(kept)
        for gained in kept_in_place.key_group_range.difference(kept):
            kept_in_place.restore(handles, gained)
        assert dump(kept_in_place) == dump(full)
        assert kept_in_place.key_groups_kept == len(kept)
        assert kept_in_place.key_groups_read == len(kept_in_place.key_group_range) - len(kept)
        assert full.key_groups_read == len(full.key_group_range)
        # what it holds is its own: a snapshot names only its key groups
        assert set(kept_in_place.snapshot().offsets) <= set(kept_in_place.key_group_range)


def test_take_key_groups_refuses_key_groups_outside_either_range(made: Made) -> None:
    old = made.backend(p=2, idx=0)
    new = made.backend(p=4, idx=1)
    with pytest.raises(ValueError, match="not in both ranges"):
        new.take_key_groups(old, KeyGroupRange(0, 63))


def test_unregistered_restored_state_is_carried_over(made: Made) -> None:
    b = made.backend()
    fill(b, KEYS[:50])
    expected = dump(b)
    b2 = made.backend()
    b2.restore([handle_of(b, b.snapshot())])
    b2.get_partitioned_state(V)  # register only one state
    assert set(b2.registered_state_names()) == {"v", "l", "m", "r", "a"}
    snap2 = b2.snapshot()
    b3 = made.backend()
    b3.restore([handle_of(b2, snap2)])
    assert dump(b3) == expected


def test_restore_kind_mismatch_and_incompatible_serializer(made: Made) -> None:
    b = made.backend()
    fill(b, KEYS[:5])
    h = handle_of(b, b.snapshot())
    b2 = made.backend()
    b2.restore([h])
    with pytest.raises(StateMigrationError, match=r"'l'.*list.*value"):
        b2.get_partitioned_state(ValueStateDescriptor("l"))

    Types = pytest.importorskip("streamstate.common.typeinfo").Types
    pytest.importorskip("streamstate.runtime.serializers.registry")
    typed = made.backend()
    ts = typed.get_partitioned_state(ValueStateDescriptor("v", Types.STRING()))
    at(typed, "k")
    ts.update("text")
    h2 = handle_of(typed, typed.snapshot())
    b3 = made.backend()
    b3.restore([h2])
    with pytest.raises(StateMigrationError) as e:
        b3.get_partitioned_state(ValueStateDescriptor("v", Types.INT()))
    msg = str(e.value)
    assert "'v'" in msg and "STRING" in msg.upper() and "INT" in msg.upper()
    # the same type information restores fine; pickle -> typed is a migration, allowed
    b4 = made.backend()
    b4.restore([h2])
    assert dump(b4, (ValueStateDescriptor("v", Types.STRING()),)) == {"v": {"k": "text"}}
    b5 = made.backend()
    b5.restore([h])
    assert dump(b5, (ValueStateDescriptor("v", Types.PICKLED_BYTE_ARRAY()),))["v"]


def test_restore_after_registration_is_refused(made: Made) -> None:
    b = made.backend()
    b.get_partitioned_state(V)
    with pytest.raises(StateAccessError):
        b.restore([])


# ------------------------------------------------------------------------ deltas


def test_delta_puts_and_tombstones(made: Made) -> None:
    b = made.backend()
    fill(b, KEYS[:20])
    base = handle_of(b, b.snapshot())
    v = b.get_partitioned_state(V)
    m = b.get_partitioned_state(M)
    at(b, KEYS[0])
    v.clear()
    m.remove("u0")
    at(b, "new-key")
    v.update(1)
    d1 = b.snapshot_delta()
    assert b.snapshot_delta()[:4] == b"SSKD"  # nothing changed: empty delta
    at(b, KEYS[1])
    b.get_partitioned_state(L).update([])
    d2 = b.snapshot_delta()
    r = made.backend()
    r.restore([base])
    r.apply_delta(d1)
    r.apply_delta(d2)
    assert dump(r) == dump(b)


def test_delta_applied_at_other_parallelism(made: Made) -> None:
    olds = [made.backend(p=3, idx=i) for i in range(3)]
    for b in olds:
        fill(b, [k for k in KEYS if kg_of(k) in b.key_group_range])
    handles = [handle_of(b, b.snapshot()) for b in olds]
    deltas = []
    for b in olds:
        v = b.get_partitioned_state(V)
        for k in KEYS[:30]:
            if kg_of(k) in b.key_group_range:
                at(b, k)
                v.update("changed")
        deltas.append(b.snapshot_delta())
    new = [made.backend(p=2, idx=i) for i in range(2)]
    merged: dict[Any, Any] = {}
    for b in olds:
        merged.update(dump(b)["v"])
    got: dict[Any, Any] = {}
    for nb in new:
        nb.restore(handles)
        for d in deltas:
            nb.apply_delta(d)
        got.update(dump(nb)["v"])
    assert got == merged


_OPS = st.one_of(
    st.tuples(st.just("v.update"), st.integers(0, 9), st.integers(0, 5)),
    st.tuples(st.just("v.clear"), st.integers(0, 9), st.none()),
    st.tuples(st.just("l.add"), st.integers(0, 9), st.integers(0, 5)),
    st.tuples(st.just("l.update"), st.integers(0, 9), st.lists(st.integers(0, 5), max_size=3)),
    st.tuples(st.just("l.clear"), st.integers(0, 9), st.none()),
    st.tuples(st.just("m.put"), st.integers(0, 9), st.tuples(st.integers(0, 3), st.integers())),
    st.tuples(st.just("m.remove"), st.integers(0, 9), st.integers(0, 3)),
    st.tuples(st.just("m.clear"), st.integers(0, 9), st.none()),
    st.tuples(st.just("r.add"), st.integers(0, 9), st.integers(-5, 5)),
    st.tuples(st.just("a.add"), st.integers(0, 9), st.integers(-5, 5)),
    st.tuples(st.just("a.clear"), st.integers(0, 9), st.none()),
    st.tuples(st.just("delta"), st.just(0), st.none()),
    st.tuples(st.just("full"), st.just(0), st.none()),
)


@given(st.lists(_OPS, max_size=60))
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_snapshot_plus_deltas_equals_live_backend(
    made: Made, ops: list[tuple[str, int, Any]]
) -> None:
    b = made.backend()
    states = {d.name: b.get_partitioned_state(d) for d in ALL}
    base = handle_of(b, b.snapshot())
    deltas: list[bytes] = []
    for op, k, arg in ops:
        if op == "delta":
            deltas.append(b.snapshot_delta())
            continue
        if op == "full":
            base, deltas = handle_of(b, b.snapshot()), []
            continue
        at(b, f"k{k}")
        name, method = op.split(".")
        fn = getattr(states[name], method)
        if method == "put":
            fn(*arg)
        elif arg is None:
            fn()
        else:
            fn(arg)
    deltas.append(b.snapshot_delta())
    r = made.backend()
    r.restore([base])
    for d in deltas:
        r.apply_delta(d)
    assert dump(r) == dump(b)


# ------------------------------------------------------------------------ errors


def _serialization_errors(write: Any, *later: Any) -> list[StateSerializationError]:
    """The typed errors of an unserializable value: raised by ``write`` itself (a backend
    that serializes eagerly, RocksDB) or else by each of ``later`` (heap: at snapshot)."""
    try:
        write()
    except StateSerializationError as e:
        return [e]
    errors = []
    for take in later:
        with pytest.raises(StateSerializationError) as e:
            take()
        errors.append(e.value)
    return errors


def test_serialization_error_is_typed(made: Made) -> None:
    b = made.backend(op="my-operator")
    v = b.get_partitioned_state(ValueStateDescriptor("counts"))
    at(b, "k")
    # pickle cannot serialize a lambda
    errors = _serialization_errors(lambda: v.update(lambda: 1), b.snapshot, b.snapshot_delta)
    assert errors
    for err in errors:
        assert err.state_name == "counts" and err.operator == "my-operator"
        assert err.value_type == "<lambda>" or "function" in err.value_type
        assert "counts" in str(err) and "my-operator" in str(err)
    v.update(1)  # fixed: the failed attempts did not lose the change
    r = made.backend()
    r.restore([handle_of(b, b.snapshot())])
    assert dump(r, (ValueStateDescriptor("counts"),)) == {"counts": {"k": 1}}


def test_unserializable_key_is_typed(made: Made) -> None:
    class Local:  # hashable but not picklable (local class)
        pass

    b = made.backend()
    v = b.get_partitioned_state(V)

    def write() -> None:
        b.set_current_key(Local(), 0)
        v.update(1)

    errors = _serialization_errors(write, b.snapshot)
    assert errors and all("Local" in str(e) for e in errors)


def _snap_handle(made: Made) -> tuple[KeyedStateBackend, KeyedSnapshot]:
    b = made.backend()
    fill(b, KEYS[:10])
    return b, b.snapshot()


def test_corrupt_snapshot_bytes(made: Made) -> None:
    b, snap = _snap_handle(made)
    kg, (off, ln) = next(iter(snap.offsets.items()))
    data = bytearray(snap.data)
    struct.pack_into(">H", data, off + 2, 99)  # section format version
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(bytes(data)), b.key_group_range, snap.offsets, snap.meta
    )
    with pytest.raises(CorruptCheckpointError, match="version 99"):
        made.backend().restore([h])
    data = bytearray(snap.data)
    data[off : off + 2] = b"XX"
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(bytes(data)), b.key_group_range, snap.offsets, snap.meta
    )
    with pytest.raises(CorruptCheckpointError):
        made.backend().restore([h])
    short = {kg: (off, ln - 3)}
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(snap.data), b.key_group_range, short, snap.meta
    )
    with pytest.raises(CorruptCheckpointError):
        made.backend().restore([h])
    newer = {**snap.meta, "format_version": 2}
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(snap.data), b.key_group_range, snap.offsets, newer
    )
    with pytest.raises(CorruptCheckpointError, match="version 2"):
        made.backend().restore([h])


def test_corrupt_delta_bytes(made: Made) -> None:
    b, _ = _snap_handle(made)
    at(b, "x")
    b.get_partitioned_state(V).update(1)
    delta = b.snapshot_delta()
    with pytest.raises(CorruptCheckpointError):
        made.backend().apply_delta(b"JUNK" + delta[4:])
    with pytest.raises(CorruptCheckpointError, match="version 7"):
        made.backend().apply_delta(delta[:4] + struct.pack(">H", 7) + delta[6:])
    with pytest.raises(CorruptCheckpointError):
        made.backend().apply_delta(delta[:-5])
    with pytest.raises(CorruptCheckpointError):
        made.backend().apply_delta(b"")


# ------------------------------------------------------------------------ registry, lifecycle


def test_registry(made: Made) -> None:
    # the registered name makes the registered class, whatever the case of the name
    b = made.backend()
    assert type(b) is registration(made.name).factory
    assert registration(made.name.upper()) is registration(made.name)
    assert registration_of(b).name == made.name
    with pytest.raises(ConfigurationError, match=made.name):  # the error lists the names
        create_keyed_backend(made.name + "-nope")


def test_dispose(made: Made) -> None:
    b = made.backend()
    fill(b, KEYS[:3])
    b.dispose()
    with pytest.raises(StateAccessError):
        b.get_partitioned_state(V)


def test_round_trip_with_default_key_serializer(made: Made) -> None:
    key_mod = pytest.importorskip("streamstate.runtime.serializers.key")
    ks = key_mod.default_key_serializer()
    r = KeyGroupRange(0, MAX_P - 1)
    b = made("op", r, MAX_P, ks)
    v = b.get_partitioned_state(V)
    keys = ["a", 1, ("t", 2.5), None, b"x"]
    for k in keys:
        b.set_current_key(k, compute_key_group_for_serialized_key(ks.serialize(k), MAX_P))
        v.update(repr(k))
    snap = b.snapshot()
    b2 = made("op", r, MAX_P, ks)
    b2.restore([handle_of(b, snap)])
    b2.get_partitioned_state(V)
    assert sorted(map(repr, b2.get_keys("v"))) == sorted(map(repr, keys))


def test_key_serializer_must_stay_the_same(made: Made) -> None:
    key_mod = pytest.importorskip("streamstate.runtime.serializers.key")
    b = made.backend()
    fill(b, KEYS[:5])
    h = handle_of(b, b.snapshot())
    other = made("op", KeyGroupRange(0, MAX_P - 1), MAX_P, key_mod.default_key_serializer())
    with pytest.raises(StateMigrationError, match="key group"):
        other.restore([h])
