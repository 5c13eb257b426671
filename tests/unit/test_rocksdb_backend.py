"""The RocksDB keyed state backend: the heap semantics suite on both backends, plus
cross-backend checkpoints (heap <-> RocksDB, with rescaling), limits and I/O errors.

The shared tests are the heap suite's own functions (``test_heap_backend``), run
with its ``backend()`` factory swapped for the parametrised one.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import test_heap_backend as H

from streamstate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from streamstate.runtime.errors import StateSerializationError
from streamstate.runtime.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.state.heap.backend import HeapKeyedStateBackend
from streamstate.runtime.state.registry import create_keyed_backend
from streamstate.runtime.state.rocksdb import states as rstates
from streamstate.runtime.state.rocksdb.backend import (
    RocksDBKeyedStateBackend,
    RocksDBStorageError,
)

BACKENDS = {"heap": HeapKeyedStateBackend, "rocksdb": RocksDBKeyedStateBackend}

#: heap-suite tests whose contract holds for every backend
SHARED = [
    "test_value_state",
    "test_list_state",
    "test_map_state_and_dunders",
    "test_reducing_state",
    "test_aggregating_state",
    "test_no_current_key_and_out_of_range",
    "test_unhashable_key",
    "test_conflicts",
    "test_snapshot_restore_round_trip",
    "test_restore_keeps_only_own_key_groups",
    "test_unregistered_restored_state_is_carried_over",
    "test_restore_kind_mismatch_and_incompatible_serializer",
    "test_restore_after_registration_is_refused",
    "test_delta_puts_and_tombstones",
    "test_delta_applied_at_other_parallelism",
    "test_snapshot_plus_deltas_equals_live_backend",
    "test_corrupt_snapshot_bytes",
    "test_corrupt_delta_bytes",
    "test_dispose",
    "test_round_trip_with_default_key_serializer",
    "test_key_serializer_must_stay_the_same",
]


class Made:
    """Creates backends of one kind and disposes them all at teardown."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.made: list[Any] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        b = self.cls(*args, **kwargs)
        self.made.append(b)
        return b

    def backend(self, p: int = 1, idx: int = 0, max_p: int = H.MAX_P, op: str = "op") -> Any:
        r = compute_key_group_range_for_operator_index(max_p, p, idx)
        return self(op, r, max_p, PickleSerializer())

    def close(self) -> None:
        for b in self.made:
            b.dispose()


def _make(cls: type) -> Iterator[Made]:
    m = Made(cls)
    yield m
    m.close()


@pytest.fixture(params=sorted(BACKENDS))
def made(request: pytest.FixtureRequest) -> Iterator[Made]:
    yield from _make(BACKENDS[request.param])


@pytest.fixture
def heap() -> Iterator[Made]:
    yield from _make(HeapKeyedStateBackend)


@pytest.fixture
def rocks() -> Iterator[Made]:
    yield from _make(RocksDBKeyedStateBackend)


@pytest.mark.parametrize("name", SHARED)
def test_heap_suite(name: str, made: Made, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(H, "backend", made.backend)
    monkeypatch.setattr(H, "HeapKeyedStateBackend", made)
    getattr(H, name)()


@pytest.mark.parametrize("new_p", [1, 2, 4])
def test_heap_suite_rescale(new_p: int, made: Made, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(H, "backend", made.backend)
    H.test_rescale_from_p3(new_p)


# ------------------------------------------------------------------------ cross-backend


Factory = Callable[..., Any]


def _filled(make: Made, p: int = 1, idx: int = 0) -> Any:
    b = make.backend(p, idx)
    H.fill(b, [k for k in H.KEYS if H.kg_of(k) in b.key_group_range])
    return b


@pytest.mark.parametrize("direction", ["heap->rocksdb", "rocksdb->heap"])
def test_snapshot_restores_into_the_other_backend(direction: str, heap: Made, rocks: Made) -> None:
    src, dst = (heap, rocks) if direction == "heap->rocksdb" else (rocks, heap)
    a = _filled(src)
    snap = a.snapshot()
    b = dst.backend()
    b.restore([H.handle_of(a, snap)])
    assert H.dump(b) == H.dump(a)
    # and back again: the second backend's snapshot restores into the first kind
    c = src.backend()
    c.restore([H.handle_of(b, b.snapshot())])
    assert H.dump(c) == H.dump(a)


@pytest.mark.parametrize("direction", ["heap->rocksdb", "rocksdb->heap"])
def test_rescale_p3_to_p2_across_backends(direction: str, heap: Made, rocks: Made) -> None:
    src, dst = (heap, rocks) if direction == "heap->rocksdb" else (rocks, heap)
    olds = [_filled(src, 3, i) for i in range(3)]
    handles = [H.handle_of(b, b.snapshot()) for b in olds]
    deltas = []
    for b in olds:  # a delta on top of the full snapshots, replayed after the rescale
        v = b.get_partitioned_state(H.V)
        m = b.get_partitioned_state(H.M)
        for k in H.KEYS[:40]:
            if H.kg_of(k) in b.key_group_range:
                H.at(b, k)
                v.update("changed")
                m.remove("u1")
                m.put("new", k)
        deltas.append(b.snapshot_delta())
    merged: dict[str, dict[Any, Any]] = {d.name: {} for d in H.ALL}
    for b in olds:
        for name, per_key in H.dump(b).items():
            merged[name].update(per_key)
    got: dict[str, dict[Any, Any]] = {d.name: {} for d in H.ALL}
    for i in range(2):
        nb = dst.backend(2, i)
        nb.restore(handles)
        for d in deltas:
            nb.apply_delta(d)
        for name, per_key in H.dump(nb).items():
            assert not set(per_key) & set(got[name])
            got[name].update(per_key)
    assert got == merged and len(got["v"]) == len(H.KEYS)


def test_rocksdb_delta_replays_on_heap(heap: Made, rocks: Made) -> None:
    r = _filled(rocks)
    base = H.handle_of(r, r.snapshot())
    H.at(r, H.KEYS[3])
    r.get_partitioned_state(H.L).update([])
    r.get_partitioned_state(H.M).clear()
    H.at(r, "fresh")
    r.get_partitioned_state(H.R).add(5)
    delta = r.snapshot_delta()
    h = heap.backend()
    h.restore([base])
    h.apply_delta(delta)
    assert H.dump(h) == H.dump(r)


# ------------------------------------------------------------------------ RocksDB specifics


def test_reads_are_copies_and_writes_serialize_eagerly(rocks: Made) -> None:
    b = rocks.backend(op="my-operator")
    v = b.get_partitioned_state(ValueStateDescriptor("counts"))
    H.at(b, "k")
    obj = [1]
    v.update(obj)
    assert v.value() == [1] and v.value() is not obj
    with pytest.raises(StateSerializationError) as e:
        v.update(lambda: 1)  # pickle cannot serialize a lambda: fails at once
    err = e.value
    assert err.state_name == "counts" and err.operator == "my-operator"
    assert "counts" in str(err) and "my-operator" in str(err)
    assert v.value() == [1]  # the failed write changed nothing


def test_unserializable_key_is_typed(rocks: Made) -> None:
    class Local:  # hashable but not picklable (local class)
        pass

    b = rocks.backend()
    v = b.get_partitioned_state(H.V)
    b.set_current_key(Local(), 0)
    with pytest.raises(StateSerializationError, match="Local"):
        v.update(1)


def test_value_over_the_limit_is_a_typed_error(
    rocks: Made, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rstates, "MAX_VALUE_BYTES", 1000)
    b = rocks.backend(op="big")
    v = b.get_partitioned_state(H.V)
    lst = b.get_partitioned_state(ListStateDescriptor("big-list"))
    m = b.get_partitioned_state(MapStateDescriptor("big-map"))
    H.at(b, "k")
    with pytest.raises(StateSerializationError, match=r"2\^31"):
        v.update(b"x" * 2000)
    lst.add(b"x" * 600)
    with pytest.raises(StateSerializationError, match="big-list"):
        lst.add(b"y" * 600)  # the appended value would pass the limit
    assert [len(x) for x in lst.get()] == [600]
    with pytest.raises(StateSerializationError, match="big-map"):
        m.put("a", "z" * 2000)
    assert v.value() is None and m.is_empty()


def test_map_keys_do_not_collide_when_key_bytes_are_not_prefix_free(rocks: Made) -> None:
    key_mod = pytest.importorskip("streamstate.runtime.serializers.key")
    ks = key_mod.default_key_serializer()
    assert ks.serialize("ab").startswith(ks.serialize("a"))  # not prefix-free
    b = rocks("op", KeyGroupRange(0, 0), 1, ks)
    m = b.get_partitioned_state(MapStateDescriptor("m"))
    uk = PickleSerializer()
    b.set_current_key("ab", 0)
    m.put("X", 2)
    b.set_current_key("a", 0)
    m.put("b" + "X", 1)  # ("a", "bX") vs ("ab", "X")
    assert dict(m.items()) == {"bX": 1}
    b.set_current_key("ab", 0)
    assert dict(m.items()) == {"X": 2}
    assert sorted(b.get_keys("m")) == ["a", "ab"]
    assert uk.serialize("X")  # user keys are pickled


def test_layout_key_group_prefix_and_column_families(rocks: Made) -> None:
    b = rocks.backend()
    for d in H.ALL:
        b.get_partitioned_state(d)
    H.fill(b, H.KEYS[:20])
    assert set(b._db.list_cf(b.path)) >= {"v", "l", "m", "r", "a"}
    col = b._columns["v"]
    for rk, _ in col._scan(b"", None):
        kg = int.from_bytes(rk[:2], "big")
        assert kg in b.key_group_range
        assert PickleSerializer().deserialize(rk[2:]) in H.KEYS
    keys = [rk for rk, _ in col._scan(b"", None)]
    assert keys == sorted(keys)  # a key group range is a contiguous key range


def test_local_dir_and_dispose(tmp_path: Any, rocks: Made) -> None:
    b = rocks("op", KeyGroupRange(0, 127), 128, PickleSerializer(), local_dir=str(tmp_path))
    assert os.path.dirname(b.path) == str(tmp_path) and os.path.isdir(b.path)
    b.dispose()
    assert not os.path.exists(b.path)
    b.dispose()  # idempotent


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_local_dir_names_the_path(tmp_path: Any) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(RocksDBStorageError, match=str(ro)):
            RocksDBKeyedStateBackend("op", KeyGroupRange(0, 1), 2, PickleSerializer(), str(ro))
    finally:
        ro.chmod(stat.S_IRWXU)


def test_local_dir_that_is_a_file_names_the_path(tmp_path: Any) -> None:
    f = tmp_path / "a-file"
    f.write_text("x")
    with pytest.raises(RocksDBStorageError, match="a-file"):
        RocksDBKeyedStateBackend("op", KeyGroupRange(0, 1), 2, PickleSerializer(), str(f))


def test_registered_as_rocksdb(rocks: Made) -> None:
    b = create_keyed_backend(
        "rocksdb",
        operator_name="op",
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
        key_serializer=PickleSerializer(),
    )
    rocks.made.append(b)
    assert isinstance(b, RocksDBKeyedStateBackend)
