"""The keyed-state contract suite, parametrised over every registered keyed backend,
plus cross-backend checkpoints (heap <-> RocksDB, with rescaling).

The contract tests are the heap suite's own functions (``test_heap_backend``), run
with its ``backend()`` factory swapped for the parametrised backend's. RocksDB
databases go to a tmpfs directory when there is one (see ``keyed_backends.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import test_heap_backend as H
from keyed_backends import Made, made_backends

from streamstate.runtime.state.registry import registered_keyed_backends

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


@pytest.fixture(params=registered_keyed_backends())
def made(request: pytest.FixtureRequest) -> Iterator[Made]:
    yield from made_backends(request.param)


@pytest.fixture
def heap() -> Iterator[Made]:
    yield from made_backends("hashmap")


@pytest.fixture
def rocks() -> Iterator[Made]:
    yield from made_backends("rocksdb")


def test_every_builtin_backend_is_covered() -> None:
    assert {"hashmap", "rocksdb"} <= set(registered_keyed_backends())


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
