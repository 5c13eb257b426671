"""Checkpoint storage: layout, atomic _metadata, corruption detection, memory limits."""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import uuid

import fsspec
import pytest

from streamstate.datastream.checkpoint_storage import (
    FileSystemCheckpointStorage,
    JobManagerCheckpointStorage,
    checkpoint_storage_from_name,
)
from streamstate.datastream.state_backend import (
    FsStateBackend,
    HashMapStateBackend,
    MemoryStateBackend,
)
from streamstate.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    StateSizeExceededError,
    UnsignedCheckpointError,
)
from streamstate.runtime.checkpoint import signing
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.handles import (
    ByteStreamStateHandle,
    FileStateHandle,
    KeyGroupsStateHandle,
)
from streamstate.runtime.checkpoint.memory import MemoryCheckpointStorageAccess
from streamstate.runtime.checkpoint.metadata import (
    FORMAT_VERSION,
    CheckpointMetadata,
    OperatorSubtaskStates,
    SubtaskState,
)
from streamstate.runtime.checkpoint.registry import (
    create_checkpoint_storage_access,
    get_checkpoint_storage_class,
    register_checkpoint_storage,
)
from streamstate.runtime.checkpoint.storage import (
    epoch_state_name,
    load_restore_point,
    resolve_external_pointer,
)
from streamstate.runtime.keygroups import KeyGroupRange

JOB = "job-1"


def fs_storage(base: str, **kw) -> FileSystemCheckpointStorageAccess:
    s = FileSystemCheckpointStorageAccess(base, **kw)
    s.initialize_job(JOB)
    return s


def write_checkpoint(storage, cid: int, payload: bytes = b"state") -> CheckpointMetadata:
    """Simulate subtask writes (after a pickle round trip, as on a worker) + driver metadata."""
    worker = pickle.loads(pickle.dumps(storage))
    keyed = worker.write_state(cid, "op/0/keyed", payload)
    op = worker.write_state(cid, "op/0/operator", payload + b"-op")
    md = CheckpointMetadata(
        job_id=JOB,
        checkpoint_id=cid,
        timestamp_ms=1000 * cid,
        operator_states={
            "op": OperatorSubtaskStates(
                1,
                128,
                (
                    SubtaskState(
                        [KeyGroupsStateHandle(keyed, KeyGroupRange(0, 127), {3: (0, 5)})], [op]
                    ),
                ),
            )
        },
        source_offsets={"src": {"split-0": cid * 10}},
        sink_state={"sink": ["txn-" + str(cid)]},
        properties={"epoch": cid},
    )
    storage.store_metadata(md)
    return md


@pytest.fixture(params=["local", "file-url", "memory-url"])
def base_url(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "ck")
    if request.param == "file-url":
        return "file://" + str(tmp_path / "ck")
    return f"memory://ck-{uuid.uuid4().hex}"


# -- layout and round trip ---------------------------------------------------------------------


def test_round_trip_and_layout(base_url):
    s = fs_storage(base_url)
    md = write_checkpoint(s, 1)
    assert s.list_checkpoints() == [1]
    loaded = s.load_metadata(1)
    assert loaded == md
    assert loaded.format_version == FORMAT_VERSION
    keyed = loaded.operator_states["op"].subtasks[0].keyed[0]
    assert isinstance(keyed.stream, FileStateHandle)
    assert keyed.stream.path.endswith(f"/{JOB}/chk-1/op/0/keyed")
    assert keyed.stream.read() == b"state"
    assert keyed.offsets == {3: (0, 5)}
    assert s.latest_valid_checkpoint() == md
    loc = s.checkpoint_location(1)
    assert loc is not None and loc.endswith(f"{JOB}/chk-1")
    fs, path = fsspec.core.url_to_fs(loc)
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(path, detail=False)) == ["_metadata", "op"]


def test_memory_url_is_filesystem_storage():
    s = FileSystemCheckpointStorage(f"memory://ck-{uuid.uuid4().hex}").create_access()
    assert isinstance(s, FileSystemCheckpointStorageAccess)
    s.initialize_job(JOB)
    write_checkpoint(s, 7)
    assert s.list_checkpoints() == [7]
    assert s.checkpoint_location(7).startswith("memory://")
    assert s.load_metadata(7).source_offsets == {"src": {"split-0": 70}}


def test_no_temp_files_left(tmp_path):
    s = fs_storage(str(tmp_path))
    write_checkpoint(s, 1)
    names = [p.name for p in (tmp_path / JOB / "chk-1").rglob("*")]
    assert not [n for n in names if n.endswith(".inprogress")]


def test_retried_write_overwrites(tmp_path):
    s = fs_storage(str(tmp_path))
    s.write_state(1, "a", b"first attempt, longer")
    h = s.write_state(1, "a", b"retry")
    assert h.read() == b"retry"


def test_invalid_state_names(tmp_path):
    s = fs_storage(str(tmp_path))
    for bad in ["", "/abs", "../up", "a/../b", "_metadata"]:
        with pytest.raises(ConfigurationError):
            s.write_state(1, bad, b"x")


def test_uninitialized_storage_is_a_clear_error(tmp_path):
    s = FileSystemCheckpointStorageAccess(str(tmp_path))
    with pytest.raises(Exception, match="initialize_job"):
        s.write_state(1, "a", b"x")


# -- atomicity and corruption ------------------------------------------------------------------


def test_chk_dir_without_metadata_is_not_a_checkpoint(tmp_path, caplog):
    s = fs_storage(str(tmp_path))
    md1 = write_checkpoint(s, 1)
    # crash between the subtasks' writes and the rename of _metadata: no _metadata
    s.write_state(2, "op/0/keyed", b"half")
    (tmp_path / JOB / "chk-2" / ".some.inprogress").write_bytes(b'{"format_ver')
    assert s.list_checkpoints() == [1]
    assert s.latest_valid_checkpoint() == md1
    with pytest.raises(CorruptCheckpointError, match="never completed") as e:
        s.load_metadata(2)
    assert "chk-2" in str(e.value)
    # the next id is above the half-written directory
    assert s.max_checkpoint_id_in_use() == 2


def test_truncated_metadata_is_skipped_and_explicit_load_raises(tmp_path, caplog):
    s = fs_storage(str(tmp_path))
    md1 = write_checkpoint(s, 1)
    write_checkpoint(s, 2)
    meta = tmp_path / JOB / "chk-2" / "_metadata"
    meta.write_bytes(meta.read_bytes()[:40])
    assert s.list_checkpoints() == [1, 2]
    with caplog.at_level(logging.WARNING):
        assert s.latest_valid_checkpoint() == md1
    assert "skipping checkpoint 2" in caplog.text
    with pytest.raises(CorruptCheckpointError, match="no valid header") as e:
        s.load_metadata(2)
    assert str(meta) in str(e.value)


def test_every_bit_flip_in_metadata_is_detected(tmp_path):
    """_metadata verifies itself before parsing: no flipped bit loads as changed fields."""
    s = fs_storage(str(tmp_path))
    write_checkpoint(s, 1)
    meta = tmp_path / JOB / "chk-1" / "_metadata"
    good = meta.read_bytes()
    assert good.startswith(b"streamstate-metadata v2 crc32=")
    rng = random.Random(11)
    positions = list(range(len(good)))
    for pos in positions:
        flipped = bytearray(good)
        flipped[pos] ^= 1 << rng.randrange(8)
        meta.write_bytes(bytes(flipped))
        with pytest.raises(CorruptCheckpointError):
            s.load_metadata(1, verify=False)
    meta.write_bytes(good[: len(good) // 2])
    with pytest.raises(CorruptCheckpointError, match="checksum"):
        s.load_metadata(1, verify=False)


def test_unsigned_metadata_is_refused_unless_allowed_by_name(tmp_path):
    """Format 1 (plain JSON) and a format-2 header without its hmac are downgrades anyone
    can write (issue 27): refused by default, read when the reader opts in by name."""
    s = fs_storage(str(tmp_path))
    md = write_checkpoint(s, 1)
    meta = tmp_path / JOB / "chk-1" / "_metadata"
    header, body = meta.read_bytes().split(b"\n", 1)
    doc = json.loads(body)
    doc["format_version"] = 1
    unsigned_header = header.split(b" hmac-sha256=")[0] + b"\n"
    for data in (json.dumps(doc).encode(), unsigned_header + body):
        meta.write_bytes(data)
        with pytest.raises(UnsignedCheckpointError, match="allow-unsigned-checkpoints"):
            s.load_metadata(1)
        assert s.latest_valid_checkpoint() is None
        with signing.allowing_unsigned():
            assert s.load_metadata(1).operator_states == md.operator_states


def test_wrong_crc_detected(tmp_path):
    s = fs_storage(str(tmp_path))
    md1 = write_checkpoint(s, 1)
    write_checkpoint(s, 2, payload=b"abcde")
    f = tmp_path / JOB / "chk-2" / "op" / "0" / "keyed"
    f.write_bytes(b"abcdX")  # same size, different content
    with pytest.raises(CorruptCheckpointError, match="damaged") as e:
        s.load_metadata(2)
    assert "chk-2/op/0/keyed" in str(e.value)
    assert s.latest_valid_checkpoint() == md1
    # without verification the metadata itself still loads
    assert s.load_metadata(2, verify=False).checkpoint_id == 2


def test_wrong_size_and_missing_file_detected(tmp_path):
    s = fs_storage(str(tmp_path))
    write_checkpoint(s, 1)
    f = tmp_path / JOB / "chk-1" / "op" / "0" / "operator"
    f.write_bytes(b"longer than before")
    with pytest.raises(CorruptCheckpointError, match="damaged"):
        s.load_metadata(1)
    f.unlink()
    with pytest.raises(CorruptCheckpointError, match="missing"):
        s.load_metadata(1)
    assert s.latest_valid_checkpoint() is None


def test_unknown_format_version_rejected(tmp_path):
    s = fs_storage(str(tmp_path))
    write_checkpoint(s, 1)
    meta = tmp_path / JOB / "chk-1" / "_metadata"
    doc = json.loads(meta.read_bytes().split(b"\n", 1)[1])  # a format-1 style plain document
    doc["format_version"] = FORMAT_VERSION + 1
    meta.write_text(json.dumps(doc))
    with signing.allowing_unsigned(), pytest.raises(CorruptCheckpointError, match="format version"):
        s.load_metadata(1)
    doc["format_version"] = FORMAT_VERSION
    del doc["job_id"]
    meta.write_text(json.dumps(doc))
    with signing.allowing_unsigned(), pytest.raises(CorruptCheckpointError, match="malformed"):
        s.load_metadata(1)


def test_resolve_external_pointer(tmp_path):
    s = fs_storage(str(tmp_path))
    md = write_checkpoint(s, 3)
    chk = tmp_path / JOB / "chk-3"
    for p in [str(chk), str(chk) + "/", str(chk / "_metadata"), "file://" + str(chk)]:
        assert resolve_external_pointer(p).endswith("chk-3/_metadata")
        assert s.load_metadata(p) == md
    with pytest.raises(CorruptCheckpointError, match="no _metadata"):
        resolve_external_pointer(str(tmp_path / JOB))


# -- discarding --------------------------------------------------------------------------------


def test_discard_never_touches_shared(tmp_path):
    s = fs_storage(str(tmp_path))
    write_checkpoint(s, 1)
    shared = tmp_path / JOB / "shared"
    shared.mkdir()
    (shared / "sst-1").write_bytes(b"x")
    s.discard_checkpoint(1)
    assert s.list_checkpoints() == []
    assert not (tmp_path / JOB / "chk-1").exists()
    assert (shared / "sst-1").exists()
    s.discard_checkpoint(1)  # idempotent


# -- epoch states ------------------------------------------------------------------------------


def test_epoch_states_filesystem(base_url):
    s = fs_storage(base_url)
    worker = pickle.loads(pickle.dumps(s))
    hs = [worker.write_epoch_state(epoch_state_name("op/0", v), bytes([v])) for v in range(4)]
    assert "/epochs/op/0/v2-state" in hs[2].path
    assert hs[2].read() == b"\x02"
    assert s.discard_epoch_states_before("op/0", 2) == 2
    assert hs[3].read() == b"\x03"
    with pytest.raises(CorruptCheckpointError):
        hs[0].read()
    s.discard_epoch_state([hs[2], ByteStreamStateHandle.of(b"ignored")])
    with pytest.raises(CorruptCheckpointError):
        hs[2].read()
    s.discard_epoch_state([hs[2]])  # idempotent


def test_discard_epoch_state_ignores_checkpoint_files(tmp_path):
    s = fs_storage(str(tmp_path))
    md = write_checkpoint(s, 1)
    s.discard_epoch_state(md.stream_handles())
    assert s.load_metadata(1) == md


def test_epoch_states_memory_storage_use_working_dir(tmp_path):
    s = MemoryCheckpointStorageAccess(working_dir=str(tmp_path))
    s.initialize_job(JOB)
    h = s.write_epoch_state("op/v1-state", b"abc")
    assert isinstance(h, FileStateHandle)
    assert os.path.exists(tmp_path / JOB / "epochs" / "op" / "v1-state")
    assert h.read() == b"abc"


# -- memory storage ----------------------------------------------------------------------------


def test_memory_storage_round_trip_and_pickle():
    s = JobManagerCheckpointStorage().create_access()
    assert isinstance(s, MemoryCheckpointStorageAccess)
    s.initialize_job(JOB)
    md = write_checkpoint(s, 1)
    handle = md.operator_states["op"].subtasks[0].keyed[0].stream
    assert isinstance(handle, ByteStreamStateHandle)
    assert s.list_checkpoints() == [1]
    assert s.load_metadata(1) == md
    assert s.latest_valid_checkpoint() == md
    shipped = pickle.loads(pickle.dumps(s))
    assert shipped.list_checkpoints() == []  # the driver's checkpoints stay on the driver
    s.discard_checkpoint(1)
    assert s.list_checkpoints() == []
    with pytest.raises(CorruptCheckpointError, match="never completed"):
        s.load_metadata(1)


def test_memory_storage_size_limit():
    s = JobManagerCheckpointStorage(max_state_size=10).create_access()
    s.initialize_job(JOB)
    s.write_state(1, "ok", b"x" * 10)
    with pytest.raises(StateSizeExceededError) as e:
        s.write_state(1, "op/0/keyed", b"x" * 11)
    msg = str(e.value)
    assert "11 bytes" in msg and "10 bytes" in msg and "FileSystemCheckpointStorage" in msg


def test_memory_storage_default_limit_is_5_mib():
    assert JobManagerCheckpointStorage().get_max_state_size() == 5 * 1024 * 1024
    s = MemoryCheckpointStorageAccess()
    s.initialize_job(JOB)
    with pytest.raises(StateSizeExceededError):
        s.write_state(1, "big", bytes(5 * 1024 * 1024 + 1))


def test_memory_storage_with_checkpoint_path_persists_metadata(tmp_path):
    storage = JobManagerCheckpointStorage(str(tmp_path))
    s = storage.create_access()
    s.initialize_job(JOB)
    md = write_checkpoint(s, 4)
    assert (tmp_path / JOB / "chk-4" / "_metadata").exists()
    # a new driver (fresh access object) finds it on disk
    s2 = storage.create_access()
    s2.initialize_job(JOB)
    assert s2.list_checkpoints() == [4]
    assert s2.load_metadata(4) == md


# -- public storage classes and registry -------------------------------------------------------


def test_filesystem_threshold_inlines_small_state(tmp_path):
    s = FileSystemCheckpointStorage(str(tmp_path), file_state_size_threshold=100).create_access()
    s.initialize_job(JOB)
    assert isinstance(s.write_state(1, "small", b"x"), ByteStreamStateHandle)
    assert isinstance(s.write_state(1, "big", b"x" * 100), FileStateHandle)


def test_public_storage_validation():
    with pytest.raises(ConfigurationError):
        FileSystemCheckpointStorage(None)
    with pytest.raises(ConfigurationError):
        FileSystemCheckpointStorage("/x", file_state_size_threshold=2 * 1024 * 1024)
    with pytest.raises(ConfigurationError):
        JobManagerCheckpointStorage(max_state_size=0)
    with pytest.raises(ConfigurationError, match="filesystem, jobmanager"):
        checkpoint_storage_from_name("rocks")
    fs = FileSystemCheckpointStorage("relative/dir")
    assert os.path.isabs(fs.get_checkpoint_path())
    assert FileSystemCheckpointStorage("s3://b/p").get_checkpoint_path() == "s3://b/p"
    assert fs.get_write_buffer_size() == 4096
    assert FileSystemCheckpointStorage("/a") == FileSystemCheckpointStorage("/a")


def test_registry(tmp_path):
    assert get_checkpoint_storage_class("jobmanager") is MemoryCheckpointStorageAccess
    assert get_checkpoint_storage_class("FileSystem") is FileSystemCheckpointStorageAccess
    with pytest.raises(ConfigurationError, match="accepted: .*filesystem.*jobmanager"):
        get_checkpoint_storage_class("nope")

    class Custom(MemoryCheckpointStorageAccess):
        name = "custom"

    register_checkpoint_storage("custom", Custom)
    assert isinstance(create_checkpoint_storage_access("custom"), Custom)


def test_state_backends_imply_storage(tmp_path):
    assert HashMapStateBackend().backend_name == "hashmap"
    assert HashMapStateBackend().get_implied_checkpoint_storage() is None
    mem = MemoryStateBackend(max_state_size=100)
    assert mem.backend_name == "hashmap"
    assert mem.get_implied_checkpoint_storage() == JobManagerCheckpointStorage(None, 100)
    fsb = FsStateBackend(str(tmp_path))
    assert fsb.get_implied_checkpoint_storage() == FileSystemCheckpointStorage(str(tmp_path))
    assert fsb.get_checkpoint_path() == str(tmp_path)
    with pytest.raises(ConfigurationError):
        FsStateBackend()


def test_state_backend_creates_registered_keyed_backend():
    from streamstate.runtime.serializers.key import default_key_serializer

    backend = MemoryStateBackend().create_keyed_backend(
        operator_name="op",
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
        key_serializer=default_key_serializer(),
    )
    assert type(backend).__name__ == "HeapKeyedStateBackend"


# -- one writer per job directory, owner-only permissions, restore points (issue 17) ----------


def test_a_second_job_on_the_same_directory_and_job_id_is_refused(tmp_path):
    from streamstate.errors import CheckpointStorageError

    first = fs_storage(str(tmp_path))
    second = FileSystemCheckpointStorageAccess(str(tmp_path))
    with pytest.raises(
        CheckpointStorageError, match=rf"in use by job '{JOB}' of process {os.getpid()}"
    ):
        second.initialize_job(JOB)
    first.release_job()
    second.initialize_job(JOB)  # free again
    second.release_job()


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path, caplog):
    import json
    import socket
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    job_dir = tmp_path / JOB
    job_dir.mkdir()
    owner = {"host": socket.gethostname(), "pid": int(dead.stdout), "job_id": JOB, "since_ms": 1}
    (job_dir / "_lock").write_text(json.dumps(owner))
    with caplog.at_level(logging.WARNING):
        s = fs_storage(str(tmp_path))
    assert "stale lock" in caplog.text
    assert json.loads((job_dir / "_lock").read_text())["pid"] == os.getpid()
    s.release_job()
    assert not (job_dir / "_lock").exists()


def test_a_lock_whose_pid_was_handed_out_again_is_taken_over(tmp_path, caplog):
    """A driver killed without releasing its lock leaves a pid the kernel reuses: a live
    process with that pid but another start time (here this process) does not hold it."""
    import json
    import socket

    from streamstate.runtime.host_owner import start_time

    job_dir = tmp_path / JOB
    job_dir.mkdir()
    me = start_time(os.getpid())
    assert me
    owner = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_start": me - 1,
        "job_id": JOB,
        "since_ms": 1,
    }
    (job_dir / "_lock").write_text(json.dumps(owner))
    with caplog.at_level(logging.WARNING):
        s = fs_storage(str(tmp_path))
    assert "stale lock" in caplog.text
    assert json.loads((job_dir / "_lock").read_text())["pid_start"] == me
    s.release_job()


def test_job_directories_are_owner_only(tmp_path):
    s = fs_storage(str(tmp_path))
    assert (tmp_path / JOB).stat().st_mode & 0o777 == 0o700
    s.release_job()


def test_restore_point_of_a_job_directory_is_its_newest_valid_checkpoint(tmp_path, caplog):
    s = fs_storage(str(tmp_path))
    write_checkpoint(s, 1)
    md2 = write_checkpoint(s, 2)
    write_checkpoint(s, 3)
    meta3 = tmp_path / JOB / "chk-3" / "_metadata"
    meta3.write_bytes(meta3.read_bytes()[:-5])  # damaged: skipped
    (tmp_path / JOB / "chk-4").mkdir()  # never completed: ignored
    with caplog.at_level(logging.WARNING):
        md, url = load_restore_point(str(tmp_path / JOB))
    assert md == md2 and url.endswith("chk-2/_metadata")
    assert "skipping checkpoint" in caplog.text
    # the base directory: the newest valid checkpoint of any job directory
    other = FileSystemCheckpointStorageAccess(str(tmp_path))
    other.initialize_job("job-2")
    md9 = write_checkpoint(other, 9)
    md, url = load_restore_point(str(tmp_path))
    assert md.checkpoint_id == md9.checkpoint_id and "/job-2/chk-9/" in url
    with pytest.raises(CorruptCheckpointError, match="no valid completed checkpoint"):
        load_restore_point(str(tmp_path / "nothing-here"))


# -- restore safety: signed metadata, SHA-256 of state files (issue 17) --------------------------


def _resign_without_key(meta) -> None:
    """What someone without the key can do: change the JSON and fix the length and CRC."""
    import zlib

    header, body = meta.read_bytes().split(b"\n", 1)
    body = body.replace(b'"timestamp_ms": 1000', b'"timestamp_ms": 2000')
    fields = dict(f.split("=", 1) for f in header.decode().split()[2:])
    fields["crc32"] = f"{zlib.crc32(body) & 0xFFFFFFFF:08x}"
    fields["length"] = str(len(body))
    new = "streamstate-metadata v2 " + " ".join(f"{k}={v}" for k, v in fields.items())
    meta.write_bytes(new.encode() + b"\n" + body)


def test_metadata_changed_without_the_key_is_refused(tmp_path):
    s = fs_storage(str(tmp_path))
    write_checkpoint(s, 1)
    meta = tmp_path / JOB / "chk-1" / "_metadata"
    assert b"hmac-sha256=" in meta.read_bytes().split(b"\n", 1)[0]
    _resign_without_key(meta)
    with pytest.raises(CorruptCheckpointError, match="does not verify against this process's"):
        s.load_metadata(1, verify=False)


def test_metadata_of_another_key_is_refused_and_the_right_key_restores(tmp_path, monkeypatch):
    s = fs_storage(str(tmp_path))
    monkeypatch.setenv("STREAMSTATE_CHECKPOINT_KEY", "key-of-the-writer")
    md = write_checkpoint(s, 1)
    monkeypatch.setenv("STREAMSTATE_CHECKPOINT_KEY", "some-other-key")
    with pytest.raises(CorruptCheckpointError, match="written with another key"):
        s.load_metadata(1)
    monkeypatch.setenv("STREAMSTATE_CHECKPOINT_KEY", "key-of-the-writer")
    assert s.load_metadata(1) == md


def test_a_swapped_state_file_with_the_same_size_and_crc_is_refused(tmp_path):
    from streamstate.runtime.checkpoint.handles import FileStateHandle, checksum

    f = tmp_path / "state"
    f.write_bytes(b"original")
    h = FileStateHandle.of(str(f), b"original")
    f.write_bytes(b"replaced")
    # a forged handle: the CRC of the new bytes, the SHA-256 the checkpoint recorded
    forged = FileStateHandle(h.path, h.size, checksum(b"replaced"), h.sha256)
    with pytest.raises(CorruptCheckpointError, match="SHA-256 differs"):
        forged.read()
