"""Keeping queryable state's serving copies current: a full version (or a checkpoint) of a
queryable state is written with the epoch's delta (its *bridge*), so a copy at the version
before moves onto the new base by applying it, never rebuilt; the answers equal the state
the subtask committed, and the bridge's file is deleted with the base it leads to."""

from __future__ import annotations

import functools
import os
from typing import Any

import pytest

from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.protocol import EpochSpec, Lineage, SubtaskAck, VersionKind
from streamstate.runtime.queryable.feature import QueryableStage, keeps_copies
from streamstate.runtime.queryable.serving import (
    QueryableOperator,
    ServingCache,
    ServingSnapshot,
)
from streamstate.runtime.state.format.keyed import delta_states_meta
from streamstate.runtime.state.format.keyed_index import split_delta
from streamstate.runtime.versions import StateVersions, commit_keyed_state
from tests.support import backends as H
from tests.support.backends import KEY_SER, MAX_P, Made

KEYS = [f"key-{i}" for i in range(400)]
STATE = ("v", "value", None)

#: what a worker of a job with queryable state asks of a full version (features.bridged)
BRIDGED = functools.partial(keeps_copies, QueryableStage())


def queryable() -> ValueStateDescriptor:
    d = ValueStateDescriptor("v")
    d.set_queryable("vs")
    return d


@pytest.fixture
def storage(tmp_path: Any) -> FileSystemCheckpointStorageAccess:
    s = FileSystemCheckpointStorageAccess(str(tmp_path / "chk"))
    s.initialize_job("job1")
    return s


def op() -> QueryableOperator:
    return QueryableOperator("op", "op", 1, MAX_P, KEY_SER, "hashmap")


def epoch_files(storage: Any) -> set[str]:
    fs, root = storage._epoch_fs()
    return {f.rsplit("/", 1)[-1] for f in fs.find(root)} if fs.exists(root) else set()


def run_epochs(
    heap: Made, storage: Any, descriptor: Any, full_at: set[int], checkpoint_at: set[int]
) -> tuple[ServingCache, list[Any]]:
    """Epochs 1..8 of one subtask changing a slice of the keys each; after every epoch, the
    copies of every key group answer every key as the backend holds it."""
    b = heap.backend()
    state = b.get_partitioned_state(descriptor)
    versions = StateVersions()
    versions.reset([("op", 0)], (0, 0))
    cache, o, folded = ServingCache(512), op(), []
    for epoch in range(1, 9):
        for i, k in enumerate(KEYS[(epoch * 70) % 400 :][:120]):
            H.at(b, k)
            if i % 17 == 3 and state.value() is not None:
                state.clear()  # tombstones too
            else:
                state.update((epoch, i))
        cid = epoch if epoch in checkpoint_at else None
        es = EpochSpec(epoch, 0, cid, epoch in full_at, ())
        v = commit_keyed_state(storage, {"op": b}, 0, es, "job1", BRIDGED)[0]["op"]
        folded.append(v)
        storage.discard_epoch_state(
            versions.fold(SubtaskAck(stage=0, subtask=0, token=(0, epoch), versions={"op": v}))
        )
        lin = versions.keyed[("op", 0)]
        want = H.dump(b, (descriptor,))["v"]
        got = {k: cache.read_lineage(lin, o, STATE, k, H.kg_of(k)) for k in KEYS}
        assert {k: x for k, x in got.items() if x is not None} == want, epoch
        # every file a lineage names is there (the bridge until the next full version)
        names = {h.path.rsplit("/", 1)[-1] for h in versions.handles() if hasattr(h, "path")}
        assert {n for n in names if n.startswith("a0-")} <= epoch_files(storage)
    return cache, folded


def test_a_full_version_moves_the_copies_by_its_delta(heap: Made, storage: Any) -> None:
    cache, folded = run_epochs(heap, storage, queryable(), full_at={3, 6}, checkpoint_at=set())
    fulls = [v for v in folded if v.kind is VersionKind.FULL]
    assert len(fulls) == 2 and all(v.bridge is not None for v in fulls)
    # every key group's copy was built once (its first lookup) and bridged twice
    groups = len({H.kg_of(k) for k in KEYS})
    assert cache.builds == groups == len(cache)
    assert cache.bridged == 2 * groups


def test_a_checkpoint_is_bridged_too_and_files_go_with_the_next_base(
    heap: Made, storage: Any
) -> None:
    cache, folded = run_epochs(heap, storage, queryable(), full_at=set(), checkpoint_at={2, 5})
    groups = len({H.kg_of(k) for k in KEYS})
    assert cache.builds == groups and cache.bridged == 2 * groups
    # the epoch-2 bridge went with the epoch-5 base's fold: only the current one is left
    left = {n for n in epoch_files(storage) if n.endswith("-delta")}
    assert "a0-e2-delta" not in left and "a0-e5-delta" in left


def test_no_bridge_without_a_queryable_state(heap: Made, storage: Any) -> None:
    cache, folded = run_epochs(
        heap, storage, ValueStateDescriptor("v"), full_at={3, 6}, checkpoint_at=set()
    )
    assert all(v.bridge is None for v in folded if v.kind is VersionKind.FULL)
    # the job pays nothing; the copies rebuild at each new base instead
    groups = len({H.kg_of(k) for k in KEYS})
    assert cache.bridged == 0 and cache.builds == 3 * groups


def test_a_copy_behind_catches_up_across_one_new_base_not_two(heap: Made, storage: Any) -> None:
    """A copy anywhere in the interval before a full version catches up by the rest of
    that interval's deltas (kept until the next new base) and the bridge; a copy of the
    base before that is rebuilt. Superseded files are deleted as the driver does."""
    b = heap.backend()
    state = b.get_partitioned_state(queryable())
    versions = StateVersions()
    versions.reset([("op", 0)], (0, 0))
    cache, other, o = ServingCache(512), ServingCache(512), op()
    k, kg = KEYS[35], H.kg_of(KEYS[35])
    for epoch in range(1, 8):
        for key in KEYS[epoch * 10 : epoch * 10 + 50]:
            H.at(b, key)
            state.update(epoch)
        es = EpochSpec(epoch, 0, None, epoch in (3, 6), ())
        v = commit_keyed_state(storage, {"op": b}, 0, es, "job1", BRIDGED)[0]["op"]
        ack = SubtaskAck(stage=0, subtask=0, token=(0, epoch), versions={"op": v})
        storage.discard_epoch_state(versions.fold(ack))
        lin = versions.keyed[("op", 0)]
        if epoch == 2:  # a copy at epoch 2, before the epoch-3 base
            assert other.read_lineage(lin, o, STATE, k, kg) == 2
        if epoch == 4:  # a copy at epoch 4 (base: epoch 3)
            assert cache.read_lineage(lin, o, STATE, k, kg) == 3
    # epochs 5 and 6 (the new base by its bridge), then 7
    assert cache.read_lineage(lin, o, STATE, k, kg) == 3
    assert cache.builds == 1 and cache.bridged == 1
    # two new bases later: its deltas are gone, rebuilt
    assert other.read_lineage(lin, o, STATE, k, kg) == 3
    assert other.builds == 2 and other.bridged == 0
    # what was superseded is gone: only the current base, its bridge and the deltas since
    assert epoch_files(storage) == {
        "a0-e4-delta",
        "a0-e5-delta",
        "a0-e6-delta",
        "a0-e6-full",
        "a0-e7-delta",
    }


def test_delta_blocks_apply_as_the_whole_delta(heap: Made) -> None:
    """A serving copy applies a delta a key group's blocks at a time, resolving its states
    once per meta; the result equals applying the whole delta, for every state kind."""
    src = heap.backend()
    H.fill(src, H.KEYS[:150])
    base = H.handle_of(src, src.snapshot())
    H.fill(src, H.KEYS[100:])  # changes and new keys
    for k in H.KEYS[:20]:  # tombstones
        H.at(src, k)
        for d in H.ALL:
            src.get_partitioned_state(d).clear()
    first = src.snapshot_delta()
    H.fill(src, H.KEYS[:5])
    second = src.snapshot_delta()
    whole, blocks = heap.backend(), heap.backend()
    for b in (whole, blocks):
        b.restore([base])
    resolved = None
    for delta in (first, second):
        whole.apply_delta(delta)
        prefix, by_kg = split_delta(delta)
        meta = delta_states_meta(prefix)
        for kg in sorted(by_kg):
            resolved = blocks.apply_delta_blocks(meta, by_kg[kg], resolved)
    assert H.dump(blocks) == H.dump(whole) == H.dump(src)


def test_rocksdb_copies_open_one_database_and_idle_ones_wait(rocks: Made, storage: Any) -> None:
    """Every RocksDB epoch version is a new base: a copy is reopened at each refresh only
    while lookups read it; one nobody read since the last refresh is left to its next
    lookup, which answers the newest version. A copy opens only the restored database."""
    b = rocks.backend()
    state = b.get_partitioned_state(queryable())
    versions = StateVersions()
    versions.reset([("op", 0)], (0, 0))
    o = QueryableOperator("op", "op", 1, MAX_P, KEY_SER, "rocksdb", {"local_dir": rocks.local_dir})
    cache = ServingCache(8)
    k = KEYS[7]
    got = []
    for epoch in range(1, 6):
        H.at(b, k)
        state.update(epoch)
        v = commit_keyed_state(
            storage, {"op": b}, 0, EpochSpec(epoch, 0, None, False, ()), "j", BRIDGED
        )
        storage.discard_epoch_state(
            versions.fold(SubtaskAck(stage=0, subtask=0, token=(0, epoch), versions=v[0]))
        )
        lin = versions.keyed[("op", 0)]
        snap = ServingSnapshot("epoch", epoch, 0, None, {("op", 0): lin}, {"op": o})
        cache.used = True
        cache.refresh(snap)
        if epoch in (1, 2, 5):  # read in epochs 1, 2 and 5 only
            got.append(cache.read_lineage(lin, o, STATE, k, H.kg_of(k)))
    assert got == [1, 2, 5]
    # epoch 1: built by the lookup; 2: refreshed (read in 1); 3: refreshed (read in 2);
    # 4: skipped (nobody read 3); 5: skipped, then built by its lookup
    assert cache.builds == 4 and cache.skipped == 2
    cache.clear()


def test_a_deferred_rocksdb_backend_writes_nothing_before_it_is_used(rocks: Made) -> None:
    r = rocks(
        "op",
        H.compute_key_group_range_for_operator_index(MAX_P, 1, 0),
        MAX_P,
        KEY_SER,
        defer_open=True,
    )
    assert os.listdir(r.path) == []  # no empty database made only to be replaced
    H.at(r, "a")
    r.get_partitioned_state(queryable()).update(1)  # the first state opens it
    assert os.listdir(r.path) and H.dump(r, (queryable(),))["v"] == {"a": 1}


def test_a_deferred_rocksdb_copy_of_an_empty_lineage_opens_when_read(rocks: Made) -> None:
    o = QueryableOperator("op", "op", 1, MAX_P, KEY_SER, "rocksdb", {"local_dir": rocks.local_dir})
    cache = ServingCache(8)
    lin = Lineage((0, 1))
    assert cache.read_lineage(lin, o, STATE, "a", H.kg_of("a")) is None
    cache.clear()


def test_the_refresher_leaves_delta_moves_to_the_next_lookup(heap: Made, storage: Any) -> None:
    """Heap copies are moved by deltas at their next lookup (all the deltas since at once),
    not by the refresher, which only rebuilds; the answers are those of the lookup's epoch."""
    b = heap.backend()
    state = b.get_partitioned_state(queryable())
    versions = StateVersions()
    versions.reset([("op", 0)], (0, 0))
    cache, o = ServingCache(512), op()
    k, kg = KEYS[3], H.kg_of(KEYS[3])
    for epoch in range(1, 5):
        H.at(b, k)
        state.update(epoch)
        v = commit_keyed_state(
            storage, {"op": b}, 0, EpochSpec(epoch, 0, None, False, ()), "j", BRIDGED
        )
        versions.fold(SubtaskAck(stage=0, subtask=0, token=(0, epoch), versions=v[0]))
        lin = versions.keyed[("op", 0)]
        cache.used = True
        cache.refresh(ServingSnapshot("epoch", epoch, 0, None, {("op", 0): lin}, {"op": o}))
        if epoch in (1, 4):
            assert cache.read_lineage(lin, o, STATE, k, kg) == epoch
    entry = next(iter(cache._entries.values()))
    assert cache.builds == 1 and cache.skipped == 3  # epochs 2-4: left to the lookup
    assert len(entry.deltas) == 4 and entry.lineage is lin
