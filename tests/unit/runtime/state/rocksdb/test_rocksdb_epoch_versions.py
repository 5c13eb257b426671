"""RocksDB epoch versions: every epoch between checkpoints is RocksDB's own files, only the
new SST files written; consecutive versions share the rest; a worker without the database
adopts a version (from its local copy or the files) in time that does not grow with the
deltas; folding a version deletes only the files no version needs any more."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.incremental import IncrementalKeyedStateHandle
from streamstate.runtime.protocol import EpochSpec, SubtaskAck, VersionKind
from streamstate.runtime.state.rocksdb import incremental as inc
from streamstate.runtime.versions import StateVersions, commit_keyed_state
from tests.support import backends as H
from tests.support.backends import Made

V = ValueStateDescriptor("v")
KEYS = [f"key-{i}" for i in range(3000)]


@pytest.fixture
def storage(tmp_path: Any) -> FileSystemCheckpointStorageAccess:
    s = FileSystemCheckpointStorageAccess(str(tmp_path / "chk"))
    s.initialize_job("job1")
    return s


def put(b: Any, keys: list[Any], value: Any) -> None:
    v = b.get_partitioned_state(V)
    for k in keys:
        H.at(b, k)
        v.update(value)


def values(b: Any) -> dict[Any, Any]:
    return H.dump(b, (V,))["v"]


def commit(storage: Any, b: Any, epoch: int, attempt: int = 0, checkpoint: int | None = None):
    es = EpochSpec(epoch, attempt, checkpoint, False, ())
    versions, _ = commit_keyed_state(storage, {"op": b}, 0, es, "job1")
    return versions["op"]


def ack(epoch: int, version: Any, attempt: int = 0) -> SubtaskAck:
    return SubtaskAck(stage=0, subtask=0, token=(attempt, epoch), versions={"op": version})


def epoch_files(storage: Any) -> set[str]:
    fs, root = storage._epoch_fs()
    return {f.rsplit("/", 1)[-1] for f in fs.find(root)} if fs.exists(root) else set()


def test_epoch_versions_write_only_new_files_and_restore_alone(
    rocks: Made, storage: FileSystemCheckpointStorageAccess
) -> None:
    b = rocks.backend()
    big = bytes(range(256)) * 2  # poorly compressible
    put(b, KEYS, big)
    v1 = commit(storage, b, 1)
    assert v1.kind is VersionKind.FULL and isinstance(v1.handle, IncrementalKeyedStateHandle)
    assert v1.handle.meta["epoch_version"] is True
    written = b.bytes_uploaded
    put(b, KEYS[:30], "small change")
    v2 = commit(storage, b, 2)
    new = [h for n, h in v2.handle.shared if n not in dict(v1.handle.shared)]
    # the second version shares the first one's files and writes little
    assert {h.path for _, h in v1.handle.shared} <= {h.path for _, h in v2.handle.shared}
    assert b.bytes_uploaded - written == sum(h.size for h in new) + v2.handle.private.size
    assert sum(h.size for h in new) < written / 20
    want = values(b)
    # from the files alone (no local copy): the state of epoch 2
    shutil.rmtree(os.path.join(b.local_dir, inc.LOCAL_DIR_NAME))
    r = rocks.backend()
    r.restore([v2.handle])
    assert r.restore_source == "remote" and values(r) == want
    # the adopting worker continues the lineage: its next version reuses the files
    put(r, KEYS[:2], 5)
    v3 = commit(storage, r, 3)
    assert {h.path for _, h in v2.handle.shared} <= {h.path for _, h in v3.handle.shared}
    r2 = rocks.backend()
    r2.restore([v3.handle])
    assert r2.restore_source == "local" and r2.bytes_downloaded == 0
    assert values(r2) == {**want, **dict.fromkeys(KEYS[:2], 5)}


def test_folding_deletes_only_files_no_version_needs(
    rocks: Made, storage: FileSystemCheckpointStorageAccess
) -> None:
    b = rocks.backend()
    versions = StateVersions()
    versions.reset([("op", 0)], (0, 0))
    for epoch in range(1, 8):
        put(b, KEYS[epoch * 100 : epoch * 100 + 400], epoch)
        if epoch == 5:
            b.flush_buffers()
            b.db.compact_range(None, None)  # rewrites the files: old ones drop out
        v = commit(storage, b, epoch)
        storage.discard_epoch_state(versions.fold(ack(epoch, v)))
        lineage = versions.keyed[("op", 0)]
        need = {h.path.rsplit("/", 1)[-1] for b_ in lineage.base for h in b_.stream_handles()}
        # every file the current version needs is there, nothing else is left behind
        assert epoch_files(storage) == need
    r = rocks.backend()
    shutil.rmtree(os.path.join(b.local_dir, inc.LOCAL_DIR_NAME))
    r.restore(list(versions.keyed[("op", 0)].base))
    assert values(r) == values(b)


def test_a_restart_deletes_the_failed_attempts_version_files(
    rocks: Made, storage: FileSystemCheckpointStorageAccess
) -> None:
    b = rocks.backend()
    put(b, KEYS[:500], 1)
    commit(storage, b, 1, attempt=0)
    put(b, KEYS[:10], 2)
    commit(storage, b, 2, attempt=0)
    assert epoch_files(storage)
    storage.discard_epoch_attempts_before(1)
    assert epoch_files(storage) == set()


def test_a_checkpoint_after_adopting_an_epoch_version_uploads_only_new_files(
    rocks: Made, storage: FileSystemCheckpointStorageAccess
) -> None:
    b = rocks.backend()
    b.incremental = True
    put(b, KEYS, bytes(range(256)))
    chk = b.snapshot_incremental(storage, 1, "job1-op-0")
    put(b, KEYS[:10], 3)
    v = commit(storage, b, 2)
    r = rocks.backend()
    r.incremental = True
    r.restore([v.handle])
    put(r, KEYS[:10], 4)
    chk2 = r.snapshot_incremental(storage, 2, "job1-op-0")
    # the big file of checkpoint 1 is referenced again, not uploaded a second time
    assert {h.path for _, h in chk.shared} & {h.path for _, h in chk2.shared}
    assert r.bytes_uploaded < chk.state_size / 5
