"""Incremental RocksDB checkpoints: shared files, reference counting, verification,
fallback to an older checkpoint, killed uploads, local recovery, rescaling."""

from __future__ import annotations

import os
import zlib
from typing import Any

import pytest

from streamstate.datastream.state import ValueStateDescriptor
from streamstate.errors import CorruptCheckpointError
from streamstate.runtime.checkpoint.coordinator import CheckpointCoordinator
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.incremental import IncrementalKeyedStateHandle
from streamstate.runtime.checkpoint.metadata import (
    CheckpointMetadata,
)
from streamstate.runtime.state.rocksdb import incremental as inc
from tests.support import backends as H
from tests.support.backends import Made, made_backends
from tests.support.crc import with_crc32

V = ValueStateDescriptor("v")


@pytest.fixture
def storage(tmp_path: Any) -> FileSystemCheckpointStorageAccess:
    s = FileSystemCheckpointStorageAccess(str(tmp_path / "chk"))
    s.initialize_job("job1")
    return s


def incremental(make: Made, p: int = 1, idx: int = 0) -> Any:
    b = make.backend(p, idx)
    b.incremental = True
    return b


def put(b: Any, keys: list[Any], value: Any) -> None:
    v = b.get_partitioned_state(V)
    for k in keys:
        if H.kg_of(k) in b.key_group_range:
            H.at(b, k)
            v.update(value)


def values(b: Any) -> dict[Any, Any]:
    return H.dump(b, (V,))["v"]


def shared_files(storage: FileSystemCheckpointStorageAccess) -> set[str]:
    return set(storage.shared_state_files())


def complete(coord: CheckpointCoordinator, handles: dict[int, Any]) -> CheckpointMetadata:
    """Complete the next checkpoint of operator 'op' with one handle per subtask."""
    pending = coord.trigger(now_ms=0)
    for i, h in handles.items():
        pending.acknowledge("op", i, len(handles), H.MAX_P, keyed=(h,))
    return coord.complete(pending, job_id="job1")


KEYS = [f"key-{i}" for i in range(2000)]


def test_only_new_files_are_uploaded_and_each_checkpoint_restores_alone(
    rocks: Made, storage: FileSystemCheckpointStorageAccess
) -> None:
    b = incremental(rocks)
    big = bytes(range(256)) * 2  # poorly compressible
    put(b, [k for k in KEYS], big)
    h1 = b.snapshot_incremental(storage, 1, "op-0")
    assert isinstance(h1, IncrementalKeyedStateHandle) and h1.shared
    first = b.bytes_uploaded
    put(b, KEYS[:20], "v2")  # 1% of the keys
    h2 = b.snapshot_incremental(storage, 2, "op-0")
    second = b.bytes_uploaded - first
    names1 = {n for n, _ in h1.shared}
    assert names1 <= {n for n, _ in h2.shared}  # old files are referenced, not re-uploaded
    assert {h.path for n, h in h2.shared if n in names1} == {h.path for _, h in h1.shared}
    new = [h for n, h in h2.shared if n not in names1]
    assert second == sum(h.size for h in new) + h2.private.size  # only new files go up
    assert sum(h.size for h in new) < sum(h.size for _, h in h1.shared) / 20
    assert first == sum(h.size for _, h in h1.shared) + h1.private.size
    expected2 = values(b)
    # each handle restores on its own, from storage (the local copies are removed)
    for h, want in ((h1, dict.fromkeys(KEYS, big)), (h2, expected2)):
        for d in os.listdir(os.path.join(b.local_dir, inc.LOCAL_DIR_NAME)):
            os.rename(
                os.path.join(b.local_dir, inc.LOCAL_DIR_NAME, d),
                os.path.join(b.local_dir, inc.LOCAL_DIR_NAME, "moved-" + d),
            )
        r = rocks.backend()
        r.restore([h])
        assert r.restore_source == "remote" and r.bytes_downloaded >= h.state_size
        assert values(r) == want


def test_local_recovery_downloads_nothing(
    rocks: Made, storage: FileSystemCheckpointStorageAccess
) -> None:
    b = incremental(rocks)
    put(b, KEYS[:300], 7)
    h = b.snapshot_incremental(storage, 1, "op-0")
    before = dict(inc.RESTORE_STATS)
    r = rocks.backend()
    r.restore([h])
    assert r.restore_source == "local" and r.bytes_downloaded == 0
    assert inc.RESTORE_STATS["local"] == before["local"] + 1
    assert values(r) == dict.fromkeys(KEYS[:300], 7)
    # the restored database continues: its next checkpoint reuses the restored files
    r.incremental = True
    put(r, KEYS[:3], 8)
    h2 = r.snapshot_incremental(storage, 2, "op-0")
    assert {x.path for _, x in h.shared} <= {x.path for _, x in h2.shared}


@pytest.mark.parametrize("damage", ["flip", "truncate", "same-crc"])
def test_a_damaged_local_copy_is_replaced_by_the_remote_one(
    rocks: Made, storage: FileSystemCheckpointStorageAccess, damage: str, caplog: Any
) -> None:
    """Issue 17: a corrupted SST file in the local recovery copy was opened and the job
    failed; now the copy is checked against the checkpoint's CRCs and never opened. Issue
    27: a file swapped for one with the same size and CRC32 (SST files may hold pickled
    values) is caught by the SHA-256 the signed ``_metadata`` recorded."""
    b = incremental(rocks)
    put(b, KEYS[:300], 7)
    h = b.snapshot_incremental(storage, 1, "op-0")
    local = os.path.join(b.local_dir, inc.LOCAL_DIR_NAME, h.local_id)
    name = max((n for n, _ in h.shared), key=lambda n: os.path.getsize(os.path.join(local, n)))
    path = os.path.join(local, name)
    data = bytearray(open(path, "rb").read())
    if damage == "flip":
        data[len(data) // 2] ^= 0x10  # same size, one bit different
    elif damage == "same-crc":
        data[len(data) // 2] ^= 0x10
        data = bytearray(with_crc32(bytes(data), zlib.crc32(open(path, "rb").read())))
    else:
        data = data[: len(data) - 7]
    os.unlink(path)  # the copy is a hard link of the live database's file: replace, not edit
    with open(path, "wb") as f:
        f.write(data)
    r = rocks.backend()
    with caplog.at_level("WARNING", logger="streamstate"):
        r.restore([h])
    assert r.restore_source == "remote"
    assert "does not match its checkpoint" in caplog.text
    assert values(r) == dict.fromkeys(KEYS[:300], 7)
    assert not os.path.exists(local)  # the damaged copy is gone


def test_rescale_restores_only_own_key_groups(
    rocks: Made, storage: FileSystemCheckpointStorageAccess
) -> None:
    olds = [incremental(rocks, 3, i) for i in range(3)]
    handles = []
    for i, b in enumerate(olds):
        put(b, KEYS, f"from-{i}")
        handles.append(b.snapshot_incremental(storage, 1, f"op-{i}"))
    merged: dict[Any, Any] = {}
    for b in olds:
        merged.update(values(b))
    got: dict[Any, Any] = {}
    for i in range(2):
        nb = rocks.backend(2, i)
        nb.restore(handles)
        part = values(nb)
        assert all(H.kg_of(k) in nb.key_group_range for k in part)
        got.update(part)
    assert got == merged and len(got) == len(KEYS)


def test_shared_files_are_reference_counted_across_retained_checkpoints(
    rocks: Made, storage: FileSystemCheckpointStorageAccess
) -> None:
    coord = CheckpointCoordinator(storage, interval_ms=1, num_retained=2)
    b = incremental(rocks)
    put(b, KEYS, 0)
    h1 = b.snapshot_incremental(storage, 1, "op-0")
    complete(coord, {0: h1})
    files1 = {h.path for _, h in h1.shared}
    assert files1 <= shared_files(storage)
    generations = [h1]
    for cid in range(2, 6):
        put(b, KEYS, cid)  # rewrite everything: compaction drops old files
        b.flush_buffers()
        b.store("v").cf.raw.compact_range(None, None)
        h = b.snapshot_incremental(storage, cid, "op-0")
        complete(coord, {0: h})
        generations.append(h)
        retained = generations[-2:]
        referenced = {x.path for g in retained for _, x in g.shared}
        assert shared_files(storage) == referenced  # exactly what retained checkpoints use
    assert not files1 & shared_files(storage)  # h1's files died with checkpoint 1
    # the job ends without retaining checkpoints: the shared folder is emptied too
    coord.on_job_terminal(cancelled=True)
    assert shared_files(storage) == set()


def test_damaged_or_missing_shared_file_falls_back_to_an_older_checkpoint(
    rocks: Made, storage: FileSystemCheckpointStorageAccess
) -> None:
    coord = CheckpointCoordinator(storage, interval_ms=1, num_retained=3)
    b = incremental(rocks)
    put(b, KEYS[:500], "a")
    complete(coord, {0: b.snapshot_incremental(storage, 1, "op-0")})
    put(b, KEYS[:500], "b")
    h2 = b.snapshot_incremental(storage, 2, "op-0")
    complete(coord, {0: h2})
    put(b, KEYS[:500], "c")
    h3 = b.snapshot_incremental(storage, 3, "op-0")
    complete(coord, {0: h3})
    assert storage.latest_valid_checkpoint().checkpoint_id == 3
    new3 = [h for n, h in h3.shared if n not in dict(h2.shared)]
    assert new3
    with open(new3[0].path.removeprefix("file://"), "r+b") as f:  # flip a byte
        f.seek(10)
        byte = f.read(1)
        f.seek(10)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptCheckpointError, match="damaged"):
        storage.load_metadata(3, verify=True)
    assert storage.latest_valid_checkpoint().checkpoint_id == 2
    new2 = [h for _, h in h2.shared if "-c2-" in h.path][0]  # uploaded by checkpoint 2
    os.remove(new2.path.removeprefix("file://"))
    with pytest.raises(CorruptCheckpointError, match="missing"):
        storage.load_metadata(2, verify=True)
    md = storage.latest_valid_checkpoint()
    assert md is not None and md.checkpoint_id == 1
    r = rocks.backend()
    r.restore(list(md.operator_states["op"].subtasks[0].keyed))
    assert values(r) == dict.fromkeys(KEYS[:500], "a")


def test_killed_upload_leaves_no_complete_checkpoint_and_no_orphans(
    rocks: Made, storage: FileSystemCheckpointStorageAccess, monkeypatch: pytest.MonkeyPatch
) -> None:
    coord = CheckpointCoordinator(storage, interval_ms=1, num_retained=1)
    b = incremental(rocks)
    put(b, KEYS, 1)
    complete(coord, {0: b.snapshot_incremental(storage, 1, "op-0")})
    baseline = shared_files(storage)
    put(b, KEYS[:50], 2)
    # checkpoint 2: the process "dies" after one shared file was written and during the
    # next one (a half-written temp file stays behind, as after a SIGKILL)
    real = storage.write_shared_state
    calls = []

    def dying(name: str, data: bytes) -> Any:
        calls.append(name)
        if len(calls) == 1:
            return real(name, data)
        d = storage._directory()
        tmp = f"{d.job_path}/shared/.{name}.{'ab' * 16}.inprogress"
        d.fs.makedirs(f"{d.job_path}/shared", exist_ok=True)
        with d.fs.open(tmp, "wb") as f:
            f.write(data[: len(data) // 2])
        raise SystemExit("killed")

    monkeypatch.setattr(storage, "write_shared_state", dying)
    put(b, KEYS[:50], 2)
    b.flush_buffers()
    b.store("v").cf.raw.flush()  # the memtable to an SST file
    put(b, KEYS[50:100], 2)  # two new SST files for checkpoint 2
    with pytest.raises(SystemExit):
        b.snapshot_incremental(storage, 2, "op-0")
    monkeypatch.setattr(storage, "write_shared_state", real)
    assert storage.list_checkpoints() == [1]  # nothing looks complete
    assert storage.latest_valid_checkpoint().checkpoint_id == 1
    orphans = shared_files(storage) - baseline
    assert len(orphans) == 2  # one complete upload, one temp file
    # a new attempt restores checkpoint 1 and completes checkpoint 3: orphans are gone
    md = storage.latest_valid_checkpoint()
    r = incremental(rocks)
    r.restore(list(md.operator_states["op"].subtasks[0].keyed))
    put(r, KEYS[:10], 3)
    h3 = r.snapshot_incremental(storage, 3, "op-0")
    complete(coord, {0: h3})
    assert shared_files(storage) == {x.path for _, x in h3.shared}
    assert not orphans & shared_files(storage)


def test_memory_storage_falls_back_to_full_snapshots(rocks: Made, tmp_path: Any) -> None:
    from streamstate.runtime.checkpoint.memory import MemoryCheckpointStorageAccess

    s = MemoryCheckpointStorageAccess(working_dir=str(tmp_path))
    s.initialize_job("job1")
    b = incremental(rocks)
    put(b, KEYS[:5], 1)
    assert b.snapshot_incremental(s, 1, "op-0") is None


def test_handle_json_round_trip_and_heap_refuses_it(
    rocks: Made, storage: FileSystemCheckpointStorageAccess
) -> None:
    from streamstate.runtime.checkpoint.handles import handle_from_dict

    b = incremental(rocks)
    put(b, KEYS[:5], 1)
    h = b.snapshot_incremental(storage, 1, "op-0")
    assert handle_from_dict(h.to_dict()) == h
    heap = made_backends("hashmap")
    m = next(heap)
    with pytest.raises(CorruptCheckpointError, match="another state backend"):
        m.backend().restore([h])
    m.close()


def test_pack_round_trip_and_damage() -> None:
    with pytest.raises(CorruptCheckpointError):
        inc.unpack_files(b"XXXX\x01\x00\x00\x00\x00")
    with pytest.raises(CorruptCheckpointError):
        inc.unpack_files(b"SS")


def test_describe_counts_shared_files(
    rocks: Made, storage: FileSystemCheckpointStorageAccess
) -> None:
    from streamstate.runtime.state_reader import describe_checkpoint, read_keyed_state

    coord = CheckpointCoordinator(storage, interval_ms=1, num_retained=1)
    b = incremental(rocks)
    put(b, KEYS[:100], 5)
    h = b.snapshot_incremental(storage, 1, "op-0")
    md = complete(coord, {0: h})
    info = describe_checkpoint(md)
    assert info["operators"]["op"]["state_bytes"] == h.state_size
    assert dict(read_keyed_state(md, "op", V)) == dict.fromkeys(KEYS[:100], 5)
