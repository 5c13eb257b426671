"""Worker crash suite for the exactly-once sinks on Spark (issue 15): a Python worker ends
with ``os._exit`` during an epoch (``FailOnce(mode="exit")`` before the running sum) or
right after its sink pre-committed (FileSink: segments and pending parts written;
PostgreSQL: ``PREPARE TRANSACTION`` done; the write-ahead sink: a checkpoint's rows and
commit record written), before the driver heard of it. The restart
strategy restores the last checkpoint; the output then equals the failure-free run and
nothing is left prepared or pending. The commits run on the driver: a kill during the
commit is the driver suite's (``test_crash.py``).

A lost PostgreSQL connection (the server terminates the sink's backend mid-epoch) fails
the epoch; the restart strategy takes over and nothing is half-committed.

The jobs and the crashing sinks are in ``tests/faults/crash_job.py`` (shared with the
driver suite).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

from streamstate.connectors.postgres import PostgresTwoPhaseCommitSink
from streamstate.testing import FailOnce, TickingClock
from tests.faults import crash_job
from tests.support import envs
from tests.support.files import committed_lines

RECORDS = 80
CRASH_EPOCH = 5


def new_table(pg: str, name: str) -> str:
    with psycopg.connect(pg, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (i INT PRIMARY KEY, k TEXT, total BIGINT)")
    return name


def table_rows(pg: str, name: str) -> list[tuple[int, str, int]]:
    with psycopg.connect(pg) as c:
        return list(c.execute(f"SELECT i, k, total FROM {name} ORDER BY i").fetchall())


def prepared(pg: str, prefix: str) -> list[str]:
    with psycopg.connect(pg) as c:
        gids = [r[0] for r in c.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]
    return [g for g in gids if g.startswith(prefix + "-")]


def hidden(out: Path) -> list[str]:
    return sorted(f.name for f in out.rglob(".*") if f.is_file())


def env_for(tmp_path: Path, spark: Any = None) -> Any:
    env = envs.make_env(2, spark=spark, max_records=10, restarts=2)
    env.set_clock(TickingClock())
    env.enable_checkpointing(2500)  # every 2-3 epochs: pre-committed epochs wait for one
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    return env


def exit_in_epoch(tmp_path: Path) -> FailOnce:
    return FailOnce(str(tmp_path), epoch=CRASH_EPOCH, subtask=0, mode="exit", after_records=3)


def exits_after(cls: type) -> Any:
    """A function turning a PostgreSQL sink into ``cls``, its subclass whose worker exits
    right after a step of epoch ``CRASH_EPOCH`` (the marker file in ``marker_dir``)."""

    def wrap(sink: Any, marker_dir: str) -> Any:
        sink.__class__ = cls
        sink.marker_dir, sink.crash_epoch = marker_dir, CRASH_EPOCH
        return sink

    return wrap


def run_with_worker_exit(
    spark: Any, tmp_path: Path, kind: str, sink: Any, point: str, exit_after: Any, marker: str
) -> None:
    """Runs the ``kind`` job into ``sink`` while a worker exits: in epoch ``CRASH_EPOCH``
    (``point`` "epoch") or right after the sink's step (the sink ``exit_after(sink,
    marker_dir)`` leaves file ``marker``); the job restarts once and finishes."""
    fail = None
    if point == "epoch":
        fail = exit_in_epoch(tmp_path)
    else:
        sink = exit_after(sink, str(tmp_path))
    env = env_for(tmp_path, spark)
    crash_job.build(env, kind, sink, fail, RECORDS)
    result = env.execute(f"{kind}-worker-exit-{point}")
    assert os.path.exists(tmp_path / ("fail-once.failed" if fail else marker))
    assert result.get_accumulator_result("restarts") == 1


@pytest.mark.parametrize("point", ["epoch", "pre-commit"])
def test_file_sink_worker_exit_then_restart_equals_the_failure_free_run(spark, tmp_path, point):
    out = tmp_path / "out"
    sink = crash_job.file_sink_for(str(out))
    run_with_worker_exit(
        spark,
        tmp_path,
        "files",
        sink,
        point,
        lambda s, d: crash_job.ExitAfterPreCommit(s, d, CRASH_EPOCH),
        "file-sink-pre-commit.failed",
    )
    assert committed_lines(out) == crash_job.expected_lines("files", RECORDS)
    assert hidden(out) == []  # the dead attempt's segments were deleted at the restore


@pytest.mark.parametrize("point", ["epoch", "pre-commit"])
def test_postgres_worker_exit_then_restart_equals_the_failure_free_run(spark, pg, tmp_path, point):
    table = new_table(pg, f"worker_exit_{point.replace('-', '_')}")
    sink = crash_job.jdbc_sink_for(pg, table)
    exit_after = exits_after(crash_job.ExitAfterPrepare)
    marker = "postgres-pre-commit.failed"
    run_with_worker_exit(spark, tmp_path, "postgres", sink, point, exit_after, marker)
    assert table_rows(pg, table) == crash_job.expected("postgres", RECORDS)
    assert prepared(pg, table) == []


@pytest.mark.parametrize("point", ["epoch", "after-send"])
def test_postgres_write_ahead_worker_exit_then_restart_equals_the_failure_free_run(
    spark, pg, tmp_path, point
):
    table = new_table(pg, f"wal_worker_exit_{point.replace('-', '_')}")
    sink = crash_job.wal_sink_for(pg, table)
    exit_after = exits_after(crash_job.ExitAfterSend)
    marker = "postgres-wal-send.failed"
    run_with_worker_exit(spark, tmp_path, "postgres-wal", sink, point, exit_after, marker)
    # the rows written right before the worker died are not written again
    assert table_rows(pg, table) == crash_job.expected("postgres-wal", RECORDS)


class LosesItsConnection(PostgresTwoPhaseCommitSink):
    """Once (subtask 0, epoch ``CRASH_EPOCH``): the server terminates this sink's backend
    in the middle of the epoch's transaction."""

    marker = ""

    def invoke(self, transaction: str, value: Any, context: Any) -> None:  # type: ignore[override]  # Flink's 2PC signature
        ctx = self.ctx
        if ctx.get_index_of_this_subtask() == 0 and ctx.epoch == CRASH_EPOCH:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                pid = self._connection().info.backend_pid
                with psycopg.connect(self.url, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        super().invoke(transaction, value, context)


def test_a_lost_postgres_connection_fails_the_epoch_and_the_restart_recovers(pg, tmp_path):
    table = new_table(pg, "connection_loss")
    sink = crash_job.jdbc_sink_for(pg, table, LosesItsConnection)
    sink.marker = str(tmp_path / "terminated")
    env = env_for(tmp_path)  # in-process: the failure is the driver's to see
    crash_job.build(env, "postgres", sink, None, RECORDS)
    result = env.execute("postgres-connection-loss")
    assert os.path.exists(sink.marker)
    assert result.get_accumulator_result("restarts") == 1
    assert table_rows(pg, table) == crash_job.expected("postgres", RECORDS)
    assert prepared(pg, table) == []
