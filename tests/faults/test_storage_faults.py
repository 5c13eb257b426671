"""Storage faults while a job runs (issue 17): a full or read-only checkpoint directory, and
damaged checkpoints at restore. Expected: a typed error or a fallback to an older
checkpoint, never a silent wrong restore. (Bit flips in ``_metadata``, damaged RocksDB
local copies and shared files, and a second writer of a job directory are covered next to
their code: tests/unit/runtime/checkpoint/test_checkpoint_storage.py and tests/unit/runtime/state/rocksdb/test_rocksdb_incremental.py.)"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from streamstate.common import Encoder, RestartStrategies, Types
from streamstate.datastream import ExternalizedCheckpointCleanup, KeyedProcessFunction
from streamstate.datastream.connectors import FileSink
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.errors import CheckpointStorageError, CorruptCheckpointError, JobExecutionError
from streamstate.runtime.checkpoint import storage
from streamstate.runtime.job_status import EpochStats, JobObserver
from streamstate.testing import TickingClock
from tests.support import envs
from tests.support.files import committed_lines

DATA = [(f"k{i % 11}", i) for i in range(400)]


class RunningSum(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        t = (self.total.value() or 0) + value[1]
        self.total.update(t)
        yield f"{value[0]},{value[1]},{t}"


class DiskFault(JobObserver):
    """From epoch ``start`` on, checkpoint writes fail with ``err`` (as on a full disk,
    ENOSPC, or a read-only mount, EROFS): the first ``writes`` of them, or all (None)."""

    def __init__(self, monkeypatch: Any, err: int, start: int, writes: int | None) -> None:
        self.err, self.start, self.writes = err, start, writes
        self.active = False
        self.failed_writes = 0
        real_write, real_write_once = storage.atomic_write, storage.write_once_or_fail

        def fail(path: str) -> None:
            if self.active and "/chk-" in path:
                if self.writes is None or self.failed_writes < self.writes:
                    self.failed_writes += 1
                    raise CheckpointStorageError(f"cannot write {path}: {OSError(self.err, path)}")

        def atomic_write(fs: Any, path: str, data: bytes) -> None:
            fail(path)
            real_write(fs, path, data)

        def write_once_or_fail(fs: Any, path: str, data: bytes, what: str) -> None:
            fail(path)  # _metadata: written once, not through atomic_write
            real_write_once(fs, path, data, what)

        monkeypatch.setattr(storage, "atomic_write", atomic_write)
        monkeypatch.setattr(storage, "write_once_or_fail", write_once_or_fail)

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        if stats.epoch + 1 == self.start:
            self.active = True


def job(tmp_path: Path, restarts: int, observer: Any = None) -> Any:
    env = envs.make_env(max_records=20)
    env.set_clock(TickingClock())
    env.enable_checkpointing(1)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    cc.set_num_retained_checkpoints(2)
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 0))
    if observer is not None:
        env.add_job_observer(observer)
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()
    env.from_collection(DATA).key_by(lambda v: v[0]).process(RunningSum()).sink_to(sink)
    return env


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    d = tmp_path_factory.mktemp("failure-free")
    job(d, restarts=0).execute("failure-free")
    return committed_lines(d / "out")


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS], ids=["full", "read-only"])
def test_a_checkpoint_directory_that_recovers_loses_nothing(tmp_path, monkeypatch, expected, err):
    fault = DiskFault(monkeypatch, err, start=6, writes=3)
    job(tmp_path, restarts=5, observer=fault).execute("disk-fault")
    assert fault.failed_writes > 0
    assert committed_lines(tmp_path / "out") == expected


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS], ids=["full", "read-only"])
def test_a_checkpoint_directory_that_stays_broken_fails_typed_and_keeps_the_last_good_one(
    tmp_path, monkeypatch, expected, err
):
    fault = DiskFault(monkeypatch, err, start=6, writes=None)
    with pytest.raises(JobExecutionError) as ei:
        job(tmp_path, restarts=2, observer=fault).execute("disk-fault")
    assert isinstance(ei.value.__cause__, CheckpointStorageError)
    assert str(err) in str(ei.value.__cause__) or "cannot write" in str(ei.value.__cause__)
    # the last good checkpoint is intact and restores to the failure-free result
    monkeypatch.undo()
    restored = job(tmp_path, restarts=0)
    restored.set_restore_path(str(tmp_path / "chk"))
    restored.execute("restored")
    assert committed_lines(tmp_path / "out") == expected


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_state_file_at_restore_is_refused_or_skipped(tmp_path, expected, damage):
    job(tmp_path, restarts=0).execute("first")
    job_dir = next((tmp_path / "chk").iterdir())
    checkpoints = sorted(job_dir.glob("chk-*"), key=lambda p: int(p.name.split("-")[1]))
    newest, older = checkpoints[-1], checkpoints[-2]
    victim = next(p for p in newest.iterdir() if p.name.endswith("-keyed"))
    data = bytearray(victim.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 3] ^= 0x04
    victim.write_bytes(bytes(data))
    # named explicitly: a typed error naming the file, never a silent partial restore
    env = job(tmp_path / "again", restarts=0)
    env.set_restore_path(str(newest))
    with pytest.raises(CorruptCheckpointError, match=victim.name):
        env.execute("restore-damaged")
    # the job directory: the newest *valid* checkpoint is taken instead
    env = job(tmp_path / "again2", restarts=0)
    env.set_restore_path(str(job_dir))
    env.execute("restore-job-dir")
    assert older.exists()
