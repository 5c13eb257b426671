"""The keyed-state contract for namespaces (window state), on every registered backend.

Namespaces scope all five primitives independently of the void namespace;
``merge_namespaces`` merges list/reducing/aggregating state; full snapshots,
deltas, restores and rescales carry every namespace, across backends too (heap
<-> RocksDB), and RocksDB's incremental checkpoints carry them as well.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamstate.datastream.state import ListState, MapState, ValueState
from streamstate.datastream.window import TimeWindow
from streamstate.errors import StateAccessError
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.incremental import IncrementalKeyedStateHandle
from streamstate.runtime.state.format.keyed import DELTA_MAGIC, read_header
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.registry import registered_keyed_backends
from tests.support import backends as H
from tests.support.backends import Made

W1, W2, W3 = TimeWindow(0, 10), TimeWindow(10, 20), TimeWindow(5, 25)
NAMESPACES = (VOID_NAMESPACE, W1, W2, W3)
KEYS = [f"k{i}" for i in range(60)]


def read(s: Any) -> Any:
    if isinstance(s, ValueState):
        return s.value()
    if isinstance(s, ListState):
        return sorted(s.get())
    if isinstance(s, MapState):
        return dict(s.items())
    return s.get()


def dump_ns(b: Any, keys: list[Any] = KEYS) -> dict[tuple[str, Any, Any], Any]:
    """Every non-empty (state, key, namespace) of ``keys`` in ``NAMESPACES``."""
    out: dict[tuple[str, Any, Any], Any] = {}
    for d in H.ALL:
        s = b.get_partitioned_state(d)
        for k in keys:
            if H.kg_of(k) not in b.key_group_range:
                continue
            H.at(b, k)
            for ns in NAMESPACES:
                s.set_current_namespace(ns)
                v = read(s)
                if v not in (None, [], {}):
                    out[(d.name, k, repr(ns))] = v
            s.set_current_namespace(VOID_NAMESPACE)
    return out


def fill_ns(b: Any, keys: list[Any] = KEYS) -> None:
    states = [b.get_partitioned_state(d) for d in H.ALL]
    for i, k in enumerate(keys):
        if H.kg_of(k) not in b.key_group_range:
            continue
        H.at(b, k)
        for j, ns in enumerate(NAMESPACES):
            if (i + j) % 3 == 0:
                continue  # not every key in every namespace
            v, lst, m, r, a = states
            for s in states:
                s.set_current_namespace(ns)
            v.update((k, j))
            lst.add_all([i, j])
            m.put(f"u{j}", i)
            r.add(i + j)
            a.add(i * j)
    for s in states:
        s.set_current_namespace(VOID_NAMESPACE)


def test_namespaces_scope_every_primitive(made: Made) -> None:
    b = made.backend()
    v, lst, m, r, a = (b.get_partitioned_state(d) for d in H.ALL)
    H.at(b, "k")
    v.update("void")
    for s in (v, lst, m, r, a):
        s.set_current_namespace(W1)
    assert v.value() is None and list(lst.get()) == [] and m.is_empty() and r.get() is None
    v.update("w1")
    lst.add(1)
    m.put("x", 1)
    r.add(2)
    a.add(4)
    for s in (v, lst, m, r, a):
        s.set_current_namespace(W2)
    assert v.value() is None and list(lst.get()) == [] and dict(m.items()) == {}
    v.update("w2")
    m.put("x", 2)
    v.set_current_namespace(W1)
    m.set_current_namespace(W1)
    assert v.value() == "w1" and dict(m.items()) == {"x": 1} and m.contains("x")
    m.clear()
    m.set_current_namespace(W2)
    assert dict(m.items()) == {"x": 2}
    v.set_current_namespace(VOID_NAMESPACE)
    assert v.value() == "void"
    # get_keys lists the keys of the void namespace only
    assert list(b.get_keys("v")) == ["k"] and list(b.get_keys("r")) == []
    H.at(b, "other")
    v.set_current_namespace(W1)
    assert v.value() is None


def test_snapshot_restore_and_rescale_carry_namespaces(made: Made) -> None:
    a = made.backend()
    fill_ns(a)
    want = dump_ns(a)
    assert any(ns != repr(VOID_NAMESPACE) for _, _, ns in want)
    b = made.backend()
    b.restore([H.handle_of(a, a.snapshot())])
    assert dump_ns(b) == want
    # p1 -> p3: every key group lands in exactly one new backend
    got: dict[Any, Any] = {}
    handle = H.handle_of(b, b.snapshot())
    for i in range(3):
        c = made.backend(3, i)
        c.restore([handle])
        part = dump_ns(c)
        assert not set(part) & set(got)
        got.update(part)
    assert got == want


def test_get_keys_and_namespaces_lists_every_entry_live_and_restored(made: Made) -> None:
    a = made.backend()
    fill_ns(a)
    want = {d.name: sorted({(k, ns) for (n, k, ns) in dump_ns(a) if n == d.name}) for d in H.ALL}

    def listed(b: Any) -> dict[str, list[tuple[Any, str]]]:
        out = {}
        for d in H.ALL:
            pairs = [(k, repr(ns)) for k, ns in b.get_keys_and_namespaces(d.name)]
            assert len(pairs) == len(set(pairs))  # each (key, namespace) once
            out[d.name] = sorted(pairs)
        return out

    assert listed(a) == want
    b = made.backend()
    b.restore([H.handle_of(a, a.snapshot())])  # before any state is registered again
    assert listed(b) == want
    assert list(b.get_keys_and_namespaces("unknown")) == []


def _change(b: Any, keys: list[Any]) -> None:
    """Namespaced puts and removals (tombstones in the delta)."""
    v, lst, m, r, a = (b.get_partitioned_state(d) for d in H.ALL)
    for i, k in enumerate(keys):
        if H.kg_of(k) not in b.key_group_range:
            continue
        H.at(b, k)
        for s in (v, lst, m, r, a):
            s.set_current_namespace(W1 if i % 2 else W3)
        v.update(None if i % 3 == 0 else "changed")
        lst.update([] if i % 3 == 1 else [7])
        m.remove("u1")
        m.put("new", i)
        r.clear()
        a.add(1000)
    for s in (v, lst, m, r, a):
        s.set_current_namespace(VOID_NAMESPACE)


def test_deltas_carry_namespaced_puts_and_tombstones(made: Made) -> None:
    a = made.backend()
    fill_ns(a)
    base = H.handle_of(a, a.snapshot())
    _change(a, KEYS[:30])
    delta = a.snapshot_delta()
    for p in (1, 2):
        got: dict[Any, Any] = {}
        for i in range(p):
            b = made.backend(p, i)
            b.restore([base])
            b.apply_delta(delta)
            got.update(dump_ns(b))
        assert got == dump_ns(a)


def _delta_blocks(delta: bytes) -> int:
    r = read_header(delta, DELTA_MAGIC, "keyed state delta")
    r.frame()  # the states' meta
    return r.u32()


def test_a_namespace_made_and_emptied_between_deltas_needs_no_tombstone(made: Made) -> None:
    """A window created and purged within one epoch: the heap backend knows the namespace
    held nothing at the last delta and writes no tombstone for it; removals in a namespace
    that held entries (the base's, or restored ones) still travel as tombstones."""
    a = made.backend()
    fill_ns(a)
    base = H.handle_of(a, a.snapshot())
    fresh = TimeWindow(100, 110)
    states = [a.get_partitioned_state(d) for d in H.ALL]
    for k in KEYS:
        if H.kg_of(k) not in a.key_group_range:
            continue
        H.at(a, k)
        for s in states:
            s.set_current_namespace(fresh)
        states[0].update(k)
        states[1].add(1)
        states[2].put("u", 1)
        for s in states:
            s.clear()
    for s in states:
        s.set_current_namespace(VOID_NAMESPACE)
    made_and_emptied = a.snapshot_delta()
    _change(a, KEYS[:30])  # removals from the base's namespaces
    changed = a.snapshot_delta()
    if made.name == "hashmap":
        assert _delta_blocks(made_and_emptied) == 0
    assert _delta_blocks(changed) > 0
    b = made.backend()
    b.restore([base])
    b.apply_delta(made_and_emptied)
    b.apply_delta(changed)
    assert dump_ns(b) == dump_ns(a)
    # restored entries are the base's: a restored backend's removals are tombstones
    c = made.backend()
    c.restore([base])
    _change(c, KEYS[:30])
    d = made.backend()
    d.restore([base])
    d.apply_delta(c.snapshot_delta())
    assert dump_ns(d) == dump_ns(c) == dump_ns(a)


@pytest.mark.parametrize("direction", ["heap->rocksdb", "rocksdb->heap"])
def test_namespaced_checkpoints_cross_backends(direction: str, heap: Made, rocks: Made) -> None:
    src, dst = (heap, rocks) if direction == "heap->rocksdb" else (rocks, heap)
    olds = [src.backend(3, i) for i in range(3)]
    handles, deltas = [], []
    for o in olds:
        fill_ns(o)
        handles.append(H.handle_of(o, o.snapshot()))
        _change(o, KEYS[:25])
        deltas.append(o.snapshot_delta())
    want: dict[Any, Any] = {}
    for o in olds:
        want.update(dump_ns(o))
    got: dict[Any, Any] = {}
    for i in range(2):
        nb = dst.backend(2, i)
        nb.restore(handles)
        for d in deltas:
            nb.apply_delta(d)
        got.update(dump_ns(nb))
        # and back: the destination's own snapshot restores into the source kind
        back = src.backend(2, i)
        back.restore([H.handle_of(nb, nb.snapshot())])
        assert dump_ns(back) == dump_ns(nb)
    assert got == want


def test_merge_namespaces(made: Made) -> None:
    b = made.backend()
    H.at(b, "k")
    states = [b.get_partitioned_state(d) for d in (H.L, H.R, H.A)]
    for i, w in enumerate((W1, W2, W3)):
        for s in states:
            s.set_current_namespace(w)
            s.add(i + 1)
    lst, r, a = states
    base = H.handle_of(b, b.snapshot())
    for s in states:
        s.merge_namespaces(W1, [W2, W3, W1])
        s.set_current_namespace(W1)
    assert sorted(lst.get()) == [1, 2, 3] and r.get() == 6 and a.get() == 2.0
    for s in states:
        s.set_current_namespace(W2)
    assert list(lst.get()) == [] and r.get() is None and a.get() is None
    # merging into an empty namespace moves the values
    for s in states:
        s.merge_namespaces(W2, [W1])
        s.set_current_namespace(W2)
    assert sorted(lst.get()) == [1, 2, 3] and r.get() == 6
    # the merges travel in a delta
    delta = b.snapshot_delta()
    c = made.backend()
    c.restore([base])
    c.apply_delta(delta)
    assert dump_ns(c, ["k"]) == dump_ns(b, ["k"])
    # value and map state cannot merge two values
    for d in (H.V, H.M):
        s = b.get_partitioned_state(d)
        for w in (W1, W2):
            s.set_current_namespace(w)
            s.update("x") if d is H.V else s.put("x", 1)
        with pytest.raises(StateAccessError, match="cannot be merged"):
            s.merge_namespaces(W1, [W2])


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["v", "l", "m", "r", "clear", "snap"]),
        st.sampled_from(KEYS[:6]),
        st.sampled_from(range(len(NAMESPACES))),
        st.integers(0, 5),
    ),
    max_size=40,
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=_OPS)
def test_snapshot_plus_deltas_equals_live_backend_with_namespaces(ops: list[Any]) -> None:
    for kind in registered_keyed_backends():
        make = Made(kind)
        try:
            live = make.backend()
            states = {d.name: live.get_partitioned_state(d) for d in H.ALL}
            base = H.handle_of(live, live.snapshot())
            deltas = []
            for op, k, nsi, x in ops:
                H.at(live, k)
                ns = NAMESPACES[nsi]
                for s in states.values():
                    s.set_current_namespace(ns)
                if op == "v":
                    states["v"].update(None if x == 0 else x)
                elif op == "l":
                    states["l"].add(x)
                elif op == "m":
                    states["m"].put(x % 2, x)
                elif op == "r":
                    states["r"].add(x)
                elif op == "clear":
                    for s in states.values():
                        s.clear()
                else:
                    deltas.append(live.snapshot_delta())
            deltas.append(live.snapshot_delta())
            rebuilt = make.backend()
            rebuilt.restore([base])
            for d in deltas:
                rebuilt.apply_delta(d)
            assert dump_ns(rebuilt, KEYS[:6]) == dump_ns(live, KEYS[:6]), kind
        finally:
            make.close()


# ------------------------------------------------------------------------ RocksDB only


def test_rocksdb_incremental_checkpoints_carry_namespaces(rocks: Made, tmp_path: Any) -> None:
    storage = FileSystemCheckpointStorageAccess(str(tmp_path / "chk"))
    storage.initialize_job("job1")
    a = rocks.backend()
    a.incremental = True
    fill_ns(a)
    h1 = a.snapshot_incremental(storage, 1, "op-0")
    assert isinstance(h1, IncrementalKeyedStateHandle)
    _change(a, KEYS[:20])
    h2 = a.snapshot_incremental(storage, 2, "op-0")
    want = dump_ns(a)
    same = rocks.backend()  # same key groups: the checkpoint becomes the database
    same.restore([h2])
    assert dump_ns(same) == want
    got: dict[Any, Any] = {}
    for i in range(2):  # rescaled: key groups copied over, namespaced column family too
        b = rocks.backend(2, i)
        b.restore([h2])
        got.update(dump_ns(b))
    assert got == want
    old = rocks.backend()
    old.restore([h1])
    assert dump_ns(old) != want


def test_rocksdb_namespaced_keys_do_not_collide_without_a_prefix_free_key_encoding(
    rocks: Made,
) -> None:
    from streamstate.runtime.keygroups import KeyGroupRange
    from streamstate.runtime.serializers.key import default_key_serializer

    key_serializer = default_key_serializer()
    assert key_serializer.serialize("ab").startswith(key_serializer.serialize("a"))
    b = rocks("op", KeyGroupRange(0, H.MAX_P - 1), H.MAX_P, key_serializer)
    m = b.get_partitioned_state(H.M)
    v = b.get_partitioned_state(H.V)
    keys = ["a", "ab", "a\x01", "abc"]
    for i, k in enumerate(keys):
        b.set_current_key(k, 7)
        for s in (m, v):
            s.set_current_namespace(W1)
        m.put("x", i)
        v.update(i)
    for i, k in enumerate(keys):
        b.set_current_key(k, 7)
        assert dict(m.items()) == {"x": i} and v.value() == i


def test_state_entry_transformer_reaches_every_namespace(made: Made) -> None:
    """What TTL cleanup (full snapshot / compaction filter) uses to drop expired entries."""
    b = made.backend()
    fill_ns(b)
    base = H.handle_of(b, b.snapshot())
    before = dump_ns(b)
    for d in H.ALL:
        t = b.state_entry_transformer(d.name)
        assert t is not None
        changed = t.transform_all(lambda stored: None)
        assert changed == sum(1 for name, _, _ in before if name == d.name)
    assert dump_ns(b) == {}
    c = made.backend()
    c.restore([base])
    c.apply_delta(b.snapshot_delta())  # the removals travel as tombstones
    assert dump_ns(c) == {}


def test_only_merging_kinds_merge(made: Made) -> None:
    """``merging_state`` admits list, reducing and aggregating handles; a value or map
    handle is refused by its kind, even when only one namespace holds a value (which the
    handle's own merge would move without complaint)."""
    from streamstate.runtime.state.kinds import MERGING_KINDS, merging_state

    b = made.backend()
    H.at(b, "k")
    assert MERGING_KINDS == {"list", "reducing", "aggregating"}
    for d in (H.L, H.R, H.A):
        s = b.get_partitioned_state(d)
        s.set_current_namespace(W2)
        s.add(1)
        merging_state(s, d).merge_namespaces(W1, [W2])
        s.set_current_namespace(W1)
        assert read(s) in ([1], 1, 1.0)
    for d in (H.V, H.M):
        s = b.get_partitioned_state(d)
        s.set_current_namespace(W2)
        s.update("x") if d is H.V else s.put("x", 1)
        with pytest.raises(StateAccessError, match="merging windows need list, reducing"):
            merging_state(s, d)
