"""GenericWriteAheadSink with file-system and PostgreSQL CheckpointCommitters."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream.connectors.write_ahead import (
    CheckpointCommitter,
    FileSystemCheckpointCommitter,
    GenericWriteAheadSink,
    PostgresCheckpointCommitter,
    PostgresWriteAheadSink,
)
from streamstate.errors import ConfigurationError
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.support import envs

N = 60


class AppendLines(GenericWriteAheadSink):
    """Appends every value as a line ``<value> <checkpoint>`` (not idempotent on purpose);
    with ``crash_dir``, raises once right after writing, before the commit record."""

    def __init__(self, committer: CheckpointCommitter, out: str, crash_dir: str | None = None):
        super().__init__(committer)
        self.out, self.crash_dir = out, crash_dir

    def send_values(self, values, checkpoint_id, timestamp):
        with open(f"{self.out}/{self._sending_subtask}.txt", "a") as f:
            f.writelines(f"{v} {checkpoint_id}\n" for v in values)
        if self.crash_dir is not None:
            try:
                os.close(os.open(f"{self.crash_dir}/crashed", os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return True
            raise RuntimeError(
                f"crash between the write of checkpoint {checkpoint_id} and its record"
            )
        return True


def written(out: Path) -> list[tuple[int, int]]:
    return [
        (int(v), int(c))
        for f in sorted(out.glob("*.txt"))
        for v, c in (line.split() for line in f.read_text().splitlines())
    ]


@pytest.fixture
def clock():
    with use_default_clock(TickingClock()) as c:
        yield c


def run(tmp_path: Path, sink, fail_epoch: int | None = None):
    env = envs.make_env(max_records=5, restarts=3)
    env.enable_checkpointing(1)  # a checkpoint at every epoch boundary
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    ds = env.from_sequence(1, N)
    fail = None
    if fail_epoch is not None:
        fail = FailOnce(str(tmp_path), epoch=fail_epoch, subtask=1, after_records=1)
        ds = ds.map(fail)
    ds.add_sink(sink)
    result = env.execute("write-ahead")
    return result, fail


def fs_sink(tmp_path: Path, crash: bool = False) -> tuple[AppendLines, Path]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    committer = FileSystemCheckpointCommitter(str(tmp_path / "commits"))
    return AppendLines(committer, str(out), str(tmp_path) if crash else None), out


def test_values_are_written_once_their_checkpoint_completed(tmp_path, clock):
    sink, out = fs_sink(tmp_path)
    run(tmp_path, sink)
    rows = written(out)
    assert sorted(v for v, _ in rows) == list(range(1, N + 1))
    # each value went out with the checkpoint that covered its epoch: 10 records/epoch
    assert {c for _, c in rows} == set(range(1, N // 10 + 1))


@pytest.mark.parametrize("epoch", [2, 4])
def test_a_replay_never_writes_a_committed_checkpoint_again(tmp_path, clock, epoch):
    sink, out = fs_sink(tmp_path)
    result, fail = run(tmp_path, sink, fail_epoch=epoch)
    assert fail.fired and result.get_accumulator_result("restarts") == 1
    assert sorted(v for v, _ in written(out)) == list(range(1, N + 1))
    assert list((tmp_path / "commits").rglob("*"))  # the marker files


def test_failure_between_write_and_commit_record_sends_that_checkpoint_again(tmp_path, clock):
    """Flink's write-ahead guarantee: only the checkpoint whose commit record was not
    written is sent again (once), nothing is lost."""
    sink, out = fs_sink(tmp_path, crash=True)
    result, _ = run(tmp_path, sink)
    assert (tmp_path / "crashed").exists() and result.get_accumulator_result("restarts") == 1
    counts = Counter(v for v, _ in written(out))
    assert set(counts) == set(range(1, N + 1))
    twice = sorted(v for v, n in counts.items() if n == 2)
    assert twice and max(counts.values()) == 2
    (cid,) = {c for v, c in written(out) if v in twice}  # exactly one checkpoint's values
    assert len(twice) <= 10


def test_committer_must_be_a_checkpoint_committer():
    with pytest.raises(ConfigurationError, match="CheckpointCommitter"):
        AppendLines(object(), "/tmp")


# -- PostgreSQL -----------------------------------------------------------------------------


@pytest.fixture
def table(pg) -> str:
    with psycopg.connect(pg, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS wal_t")
        c.execute("DROP TABLE IF EXISTS streamstate_checkpoint_commits")
        c.execute("CREATE TABLE wal_t (k INT PRIMARY KEY)")
    return "wal_t"


def pg_rows(pg: str) -> list[int]:
    with psycopg.connect(pg) as c:
        return [r[0] for r in c.execute("SELECT k FROM wal_t ORDER BY k").fetchall()]


def test_postgres_committer_keeps_a_replay_from_writing_twice(pg, table, tmp_path, clock):
    out = tmp_path / "out"
    out.mkdir()
    sink = AppendLines(PostgresCheckpointCommitter(pg), str(out))
    result, fail = run(tmp_path, sink, fail_epoch=4)
    assert fail.fired and result.get_accumulator_result("restarts") == 1
    assert sorted(v for v, _ in written(out)) == list(range(1, N + 1))
    with psycopg.connect(pg) as c:
        recorded = c.execute(
            "SELECT subtask, checkpoint_id FROM streamstate_checkpoint_commits ORDER BY subtask"
        ).fetchall()
    assert [s for s, _ in recorded] == [0, 1] and all(c >= N // 10 for _, c in recorded)


class CrashingPostgresSink(PostgresWriteAheadSink):
    """Fails once after its INSERTs, before the commit record, inside the transaction."""

    def __init__(self, pg: str, crash_dir: str) -> None:
        super().__init__("INSERT INTO wal_t (k) VALUES (%s)", pg)
        self.crash_dir = crash_dir

    def send_values(self, values, checkpoint_id, timestamp):
        committer = self.committer
        real = committer.commit_checkpoint

        def crash_first(*args, **kwargs):
            try:
                os.close(os.open(f"{self.crash_dir}/crashed", os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return real(*args, **kwargs)
            raise RuntimeError("crash between the INSERTs and the commit record")

        committer.commit_checkpoint = crash_first
        try:
            return super().send_values(values, checkpoint_id, timestamp)
        finally:
            del committer.commit_checkpoint


def test_postgres_write_ahead_sink_is_exactly_once(pg, table, tmp_path, clock):
    env = envs.make_env(max_records=5, restarts=3)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    env.from_sequence(1, N).map(lambda i: (i,)).add_sink(CrashingPostgresSink(pg, str(tmp_path)))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    result = env.execute("pg-wal")
    assert (tmp_path / "crashed").exists() and result.get_accumulator_result("restarts") == 1
    assert pg_rows(pg) == list(range(1, N + 1))  # a duplicate would violate the primary key
