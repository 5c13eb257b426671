"""The heap keyed state backend: primitives, scoping, snapshots, rescaling, deltas, errors."""

from __future__ import annotations

import json
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
    handle_from_dict,
)
from streamstate.runtime.keygroups import (
    KeyGroupRange,
    compute_key_group_for_serialized_key,
    compute_key_group_range_for_operator_index,
)
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.state.base import KeyedSnapshot, KeyedStateBackend
from streamstate.runtime.state.heap.backend import HeapKeyedStateBackend
from streamstate.runtime.state.registry import create_keyed_backend

MAX_P = 128
KEY_SER = PickleSerializer()


class SumReduce:
    def reduce(self, a: Any, b: Any) -> Any:
        return a + b


class AvgAgg:
    """Average: accumulator (sum, count)."""

    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: int, acc: tuple[int, int]) -> tuple[int, int]:
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc: tuple[int, int]) -> float:
        return acc[0] / acc[1]

    def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return (a[0] + b[0], a[1] + b[1])


V = ValueStateDescriptor("v")
L = ListStateDescriptor("l")
M = MapStateDescriptor("m")
R = ReducingStateDescriptor("r", SumReduce())
A = AggregatingStateDescriptor("a", AvgAgg())
ALL = (V, L, M, R, A)


def kg_of(key: Any, max_p: int = MAX_P) -> int:
    return compute_key_group_for_serialized_key(KEY_SER.serialize(key), max_p)


def backend(p: int = 1, idx: int = 0, max_p: int = MAX_P, op: str = "op") -> HeapKeyedStateBackend:
    r = compute_key_group_range_for_operator_index(max_p, p, idx)
    return HeapKeyedStateBackend(op, r, max_p, PickleSerializer())


def at(b: HeapKeyedStateBackend, key: Any) -> None:
    b.set_current_key(key, kg_of(key, b.max_parallelism))


def handle_of(b: KeyedStateBackend, snap: KeyedSnapshot) -> KeyGroupsStateHandle:
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(snap.data), b.key_group_range, snap.offsets, snap.meta
    )
    # the handle must survive checkpoint metadata (JSON)
    return handle_from_dict(json.loads(json.dumps(h.to_dict())))


def dump(b: HeapKeyedStateBackend, descriptors: tuple[Any, ...] = ALL) -> dict[str, dict[Any, Any]]:
    """Every state's content per key, read through the public handles."""
    out: dict[str, dict[Any, Any]] = {}
    for d in descriptors:
        s = b.get_partitioned_state(d)
        per_key: dict[Any, Any] = {}
        for key in b.get_keys(d.name):
            at(b, key)
            if isinstance(s, ValueState):
                per_key[key] = s.value()
            elif isinstance(s, ListState):
                per_key[key] = list(s.get())
            elif isinstance(s, MapState):
                per_key[key] = dict(s.items())
            else:
                per_key[key] = s.get()
        out[d.name] = per_key
    return out


# ------------------------------------------------------------------------ primitives


def test_value_state() -> None:
    b = backend()
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


def test_value_state_returns_live_object() -> None:
    b = backend()
    s = b.get_partitioned_state(V)
    at(b, "k")
    obj = [1]
    s.update(obj)
    assert s.value() is obj  # heap backend: no copies (as Flink's)


def test_list_state() -> None:
    b = backend()
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


def test_map_state_and_dunders() -> None:
    b = backend()
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


def test_reducing_state() -> None:
    b = backend()
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


def test_aggregating_state() -> None:
    b = backend()
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


def test_no_current_key_and_out_of_range() -> None:
    b = backend(p=2, idx=0)
    s = b.get_partitioned_state(V)
    with pytest.raises(StateAccessError, match="without a current key"):
        s.value()
    with pytest.raises(StateAccessError, match="outside"):
        b.set_current_key("x", MAX_P - 1)  # owned by subtask 1
    b.set_current_key("x", 0)
    assert b.get_current_key() == "x"


def test_unhashable_key() -> None:
    b = backend()
    with pytest.raises(KeySerializationError, match=r"'list'.*tuple"):
        b.set_current_key(["a", 1], 0)


def test_conflicts() -> None:
    b = backend()
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


def test_descriptors_are_frozen_picklable_values() -> None:
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


def fill(b: HeapKeyedStateBackend, keys: list[Any]) -> None:
    states = [b.get_partitioned_state(d) for d in ALL]
    for i, key in enumerate(keys):
        at(b, key)
        v, lst, m, r, a = states
        v.update({"i": i})  # type: ignore[attr-defined]
        lst.add_all([i, i + 1])  # type: ignore[attr-defined]
        m.put(f"u{i}", i)  # type: ignore[attr-defined]
        m.put(("t", i), [i])  # type: ignore[attr-defined]
        r.add(i)  # type: ignore[attr-defined]
        a.add(i)  # type: ignore[attr-defined]


KEYS = [f"key-{i}" for i in range(200)] + [("tuple", 1), 42, None, b"bytes"]


def test_snapshot_restore_round_trip() -> None:
    b = backend()
    fill(b, KEYS)
    snap = b.snapshot()
    assert snap.data[:4] == b"SSKS"
    assert {s["name"] for s in snap.meta["states"]} == {"v", "l", "m", "r", "a"}
    for sm in snap.meta["states"]:
        assert {"key_serializer", "namespace_serializer", "value_serializer"} <= set(sm)
    b2 = backend()
    b2.restore([handle_of(b, snap)])
    assert dump(b2) == dump(b)
    assert len(dump(b)["v"]) == len(KEYS)


def test_restore_keeps_only_own_key_groups() -> None:
    b = backend()
    fill(b, KEYS)
    h = handle_of(b, b.snapshot())
    half = backend(p=2, idx=1)
    half.restore([h])
    got = dump(half)
    expected = {k for k in KEYS if kg_of(k) in half.key_group_range}
    assert set(got["v"]) == expected and 0 < len(expected) < len(KEYS)
    # data of other key groups is really absent, not just hidden
    snap = half.snapshot()
    assert all(kg in half.key_group_range for kg in snap.offsets)


@pytest.mark.parametrize("new_p", [1, 2, 4])
def test_rescale_from_p3(new_p: int) -> None:
    olds = [backend(p=3, idx=i) for i in range(3)]
    for b in olds:
        fill(b, [k for k in KEYS if kg_of(k) in b.key_group_range])
    handles = [handle_of(b, b.snapshot()) for b in olds]
    merged: dict[str, dict[Any, Any]] = {d.name: {} for d in ALL}
    for b in olds:
        for name, per_key in dump(b).items():
            merged[name].update(per_key)
    seen: dict[str, dict[Any, Any]] = {d.name: {} for d in ALL}
    for i in range(new_p):
        nb = backend(p=new_p, idx=i)
        nb.restore(handles)
        for name, per_key in dump(nb).items():
            assert not set(per_key) & set(seen[name]), "a key landed twice"
            seen[name].update(per_key)
    assert seen == merged
    assert len(seen["v"]) == len(KEYS)


def test_unregistered_restored_state_is_carried_over() -> None:
    b = backend()
    fill(b, KEYS[:50])
    expected = dump(b)
    b2 = backend()
    b2.restore([handle_of(b, b.snapshot())])
    b2.get_partitioned_state(V)  # register only one state
    assert set(b2.registered_state_names()) == {"v", "l", "m", "r", "a"}
    snap2 = b2.snapshot()
    b3 = backend()
    b3.restore([handle_of(b2, snap2)])
    assert dump(b3) == expected


def test_restore_kind_mismatch_and_incompatible_serializer() -> None:
    b = backend()
    fill(b, KEYS[:5])
    h = handle_of(b, b.snapshot())
    b2 = backend()
    b2.restore([h])
    with pytest.raises(StateMigrationError, match=r"'l'.*list.*value"):
        b2.get_partitioned_state(ValueStateDescriptor("l"))

    Types = pytest.importorskip("streamstate.common.typeinfo").Types
    pytest.importorskip("streamstate.runtime.serializers.registry")
    typed = backend()
    ts = typed.get_partitioned_state(ValueStateDescriptor("v", Types.STRING()))
    at(typed, "k")
    ts.update("text")
    h2 = handle_of(typed, typed.snapshot())
    b3 = backend()
    b3.restore([h2])
    with pytest.raises(StateMigrationError) as e:
        b3.get_partitioned_state(ValueStateDescriptor("v", Types.INT()))
    msg = str(e.value)
    assert "'v'" in msg and "STRING" in msg.upper() and "INT" in msg.upper()
    # the same type information restores fine; pickle -> typed is a migration, allowed
    b4 = backend()
    b4.restore([h2])
    assert dump(b4, (ValueStateDescriptor("v", Types.STRING()),)) == {"v": {"k": "text"}}
    b5 = backend()
    b5.restore([h])
    assert dump(b5, (ValueStateDescriptor("v", Types.PICKLED_BYTE_ARRAY()),))["v"]


def test_restore_after_registration_is_refused() -> None:
    b = backend()
    b.get_partitioned_state(V)
    with pytest.raises(StateAccessError):
        b.restore([])


# ------------------------------------------------------------------------ deltas


def test_delta_puts_and_tombstones() -> None:
    b = backend()
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
    r = backend()
    r.restore([base])
    r.apply_delta(d1)
    r.apply_delta(d2)
    assert dump(r) == dump(b)


def test_delta_applied_at_other_parallelism() -> None:
    olds = [backend(p=3, idx=i) for i in range(3)]
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
    new = [backend(p=2, idx=i) for i in range(2)]
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
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_snapshot_plus_deltas_equals_live_backend(ops: list[tuple[str, int, Any]]) -> None:
    b = backend()
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
    r = backend()
    r.restore([base])
    for d in deltas:
        r.apply_delta(d)
    assert dump(r) == dump(b)


# ------------------------------------------------------------------------ errors


def test_serialization_error_is_typed() -> None:
    b = backend(op="my-operator")
    v = b.get_partitioned_state(ValueStateDescriptor("counts"))
    at(b, "k")
    v.update(lambda: 1)  # pickle cannot serialize a lambda
    for take in (b.snapshot, b.snapshot_delta):
        with pytest.raises(StateSerializationError) as e:
            take()
        err = e.value
        assert err.state_name == "counts" and err.operator == "my-operator"
        assert err.value_type == "<lambda>" or "function" in err.value_type
        assert "counts" in str(err) and "my-operator" in str(err)
    v.update(1)  # fixed: the failed attempts did not lose the change
    r = backend()
    r.restore([handle_of(b, b.snapshot())])
    assert dump(r, (ValueStateDescriptor("counts"),)) == {"counts": {"k": 1}}


def test_unserializable_key_is_typed() -> None:
    class Local:  # hashable but not picklable (local class)
        pass

    b = backend()
    v = b.get_partitioned_state(V)
    b.set_current_key(Local(), 0)
    v.update(1)
    with pytest.raises(StateSerializationError, match="Local"):
        b.snapshot()


def _snap_handle() -> tuple[HeapKeyedStateBackend, KeyedSnapshot]:
    b = backend()
    fill(b, KEYS[:10])
    return b, b.snapshot()


def test_corrupt_snapshot_bytes() -> None:
    b, snap = _snap_handle()
    kg, (off, ln) = next(iter(snap.offsets.items()))
    data = bytearray(snap.data)
    struct.pack_into(">H", data, off + 2, 99)  # section format version
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(bytes(data)), b.key_group_range, snap.offsets, snap.meta
    )
    with pytest.raises(CorruptCheckpointError, match="version 99"):
        backend().restore([h])
    data = bytearray(snap.data)
    data[off : off + 2] = b"XX"
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(bytes(data)), b.key_group_range, snap.offsets, snap.meta
    )
    with pytest.raises(CorruptCheckpointError):
        backend().restore([h])
    short = {kg: (off, ln - 3)}
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(snap.data), b.key_group_range, short, snap.meta
    )
    with pytest.raises(CorruptCheckpointError):
        backend().restore([h])
    newer = {**snap.meta, "format_version": 2}
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(snap.data), b.key_group_range, snap.offsets, newer
    )
    with pytest.raises(CorruptCheckpointError, match="version 2"):
        backend().restore([h])


def test_corrupt_delta_bytes() -> None:
    b, _ = _snap_handle()
    at(b, "x")
    b.get_partitioned_state(V).update(1)
    delta = b.snapshot_delta()
    with pytest.raises(CorruptCheckpointError):
        backend().apply_delta(b"JUNK" + delta[4:])
    with pytest.raises(CorruptCheckpointError, match="version 7"):
        backend().apply_delta(delta[:4] + struct.pack(">H", 7) + delta[6:])
    with pytest.raises(CorruptCheckpointError):
        backend().apply_delta(delta[:-5])
    with pytest.raises(CorruptCheckpointError):
        backend().apply_delta(b"")


# ------------------------------------------------------------------------ registry, lifecycle


def test_registry() -> None:
    b = create_keyed_backend(
        "hashmap",
        operator_name="op",
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
        key_serializer=PickleSerializer(),
    )
    assert isinstance(b, HeapKeyedStateBackend)
    with pytest.raises(ConfigurationError, match="hashmap"):
        create_keyed_backend("rocksdb-nope")


def test_dispose() -> None:
    b = backend()
    fill(b, KEYS[:3])
    b.dispose()
    with pytest.raises(StateAccessError):
        b.get_partitioned_state(V)


def test_round_trip_with_default_key_serializer() -> None:
    key_mod = pytest.importorskip("streamstate.runtime.serializers.key")
    ks = key_mod.default_key_serializer()
    r = KeyGroupRange(0, MAX_P - 1)
    b = HeapKeyedStateBackend("op", r, MAX_P, ks)
    v = b.get_partitioned_state(V)
    keys = ["a", 1, ("t", 2.5), None, b"x"]
    for k in keys:
        b.set_current_key(k, compute_key_group_for_serialized_key(ks.serialize(k), MAX_P))
        v.update(repr(k))
    snap = b.snapshot()
    b2 = HeapKeyedStateBackend("op", r, MAX_P, ks)
    b2.restore([handle_of(b, snap)])
    b2.get_partitioned_state(V)
    assert sorted(map(repr, b2.get_keys("v"))) == sorted(map(repr, keys))


def test_key_serializer_must_stay_the_same() -> None:
    key_mod = pytest.importorskip("streamstate.runtime.serializers.key")
    b = backend()
    fill(b, KEYS[:5])
    h = handle_of(b, b.snapshot())
    other = HeapKeyedStateBackend(
        "op", KeyGroupRange(0, MAX_P - 1), MAX_P, key_mod.default_key_serializer()
    )
    with pytest.raises(StateMigrationError, match="key group"):
        other.restore([h])
