"""The crash jobs of the fault suites: a keyed running sum into an exactly-once sink,
``files`` (FileSink) or ``postgres`` (JdbcSink.exactly_once_sink), killed where the test
says.

As a script (the driver SIGKILL suite, ``test_crash.py``)::

    python crash_job.py files OUT CHK
    python crash_job.py postgres URL|TABLE CHK       (also postgres-wal: the write-ahead sink)
    python crash_job.py spark-table OUT CHK          (SparkTableSink, parquet)
    streamstate run --from-checkpoint CHK crash_job.py -- <the same arguments>

``CRASH_AT=<point>:<n>`` SIGKILLs this driver process (with the in-process runner also
the worker) at the ``n``-th occurrence of ``point``:

* ``record``: while epoch work runs (a record in the user function);
* ``pre-commit``: right after a subtask pre-committed (FileSink: its segments and pending
  parts are written; PostgreSQL: after ``PREPARE TRANSACTION``);
* ``metadata-write``: while ``_metadata`` is written (half a hidden file, no ``_metadata``);
* ``after-metadata``: after ``_metadata`` was stored, before the sinks commit;
* ``commit``: in the middle of a sink commit (after the first rename or completed upload /
  COMMIT PREPARED;
  the write-ahead sink: after a checkpoint's rows and commit record were written;
  SparkTableSink: after a batch's data file was renamed into the table).

The hooks wrap the real code paths in this process only (fault injection, not mocks);
``install_crash_hooks`` installs them when run as a script. Imported (the Spark worker
suite, ``test_worker_crash.py``), the module provides the job (``build``), the expected
output (``expected``) and sinks whose worker exits after its pre-commit.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from functools import partial
from typing import Any

from streamstate.common import Configuration, Encoder, Types
from streamstate.connectors import file_sink, postgres
from streamstate.datastream import (
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors import FileSink, RollingPolicy, SparkTableSink
from streamstate.datastream.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
    JdbcSink,
)
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.checkpoint import coordinator, storage
from streamstate.spark import table_sink
from streamstate.testing import TickingClock, crash_once


@dataclass(frozen=True)
class Spec:
    records: int
    keys: int
    epoch_records: int


SPECS = {
    "files": Spec(600, 13, 40),
    "spark-table": Spec(150, 7, 30),
    "postgres": Spec(400, 11, 30),
    "postgres-wal": Spec(400, 11, 30),
}


def hit(point: str) -> None:
    """Count ``point`` in this process; SIGKILL it at the occurrence CRASH_AT names.

    The count lives on the ``sys`` module: user functions of this script travel pickled by
    value (each subtask gets its own copy of this module's globals), ``sys`` does not."""
    target_point, _, n = (os.environ.get("CRASH_AT") or "none:0").partition(":")
    if point != target_point:
        return
    seen = sys.__dict__.setdefault("_streamstate_crash_seen", [0])
    seen[0] += 1
    if seen[0] == int(n):
        os.kill(os.getpid(), signal.SIGKILL)


def _after(cls: Any, name: str, point: str) -> None:
    original = getattr(cls, name)

    def hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        hit(point)
        return out

    setattr(cls, name, hooked)


def install_crash_hooks() -> None:
    """Wrap the checkpoint and sink code paths of this process with ``hit``."""
    write_once_or_fail = storage.write_once_or_fail

    def crashing_metadata_write(fs: Any, path: str, data: bytes, what: str) -> None:
        if path.endswith("/_metadata") and os.environ.get("CRASH_AT", "").startswith("metadata-"):
            # killed while writing: half of a hidden file exists (a file system's temp file,
            # an object store's never-completed upload), _metadata never appears
            tmp = f"{path.rsplit('/', 1)[0]}/._metadata.crash.inprogress"
            with fs.open(tmp, "wb") as f:
                f.write(data[: len(data) // 2])
            hit("metadata-write")
        write_once_or_fail(fs, path, data, what)

    storage.write_once_or_fail = crashing_metadata_write
    _after(coordinator.CheckpointCoordinator, "complete", "after-metadata")
    commit_one = file_sink.FileCommitter._commit_one

    def crashing_commit_one(self: Any, *args: Any) -> None:
        commit_one(self, *args)
        hit("commit")

    file_sink.FileCommitter._commit_one = crashing_commit_one  # type: ignore[method-assign]
    _after(file_sink.FileSinkOperator, "snapshot_state", "pre-commit")
    _after(postgres.PostgresTwoPhaseCommitSink, "pre_commit", "pre-commit")
    _after(postgres.PostgresTwoPhaseCommitSink, "commit", "commit")
    _after(postgres.PostgresWriteAheadSink, "send_values", "commit")
    publish = table_sink.SparkTableCommitter._publish

    def crashing_publish(fs: Any, src: str, dest: str) -> None:
        publish(fs, src, dest)
        hit("commit")  # a batch's first data files are in the table, the others not yet

    table_sink.SparkTableCommitter._publish = staticmethod(crashing_publish)  # type: ignore[method-assign]


class RunningSum(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        hit("record")
        t = (self.total.value() or 0) + value[1]
        self.total.update(t)
        yield value[1], value[0], t


def data(kind: str, records: int | None = None) -> list[tuple[str, int]]:
    spec = SPECS[kind]
    return [(f"k{i % spec.keys}", i) for i in range(records or spec.records)]


def expected(kind: str, records: int | None = None) -> list[tuple[int, str, int]]:
    """The failure-free output: (i, key, running sum of the key up to i), by i."""
    totals: dict[str, int] = {}
    out = []
    for k, i in data(kind, records):
        totals[k] = totals.get(k, 0) + i
        out.append((i, k, totals[k]))
    return out


def as_line(v: Any) -> str:
    return f"{v[1]},{v[0]},{v[2]}"


def expected_lines(kind: str = "files", records: int | None = None) -> list[str]:
    return sorted(as_line(v) for v in expected(kind, records))


def file_sink_for(out: str) -> FileSink:
    return (
        FileSink.for_row_format(out, Encoder.simple_string_encoder())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )


def jdbc_sink_for(url: str, table: str, sink_class: Any = None) -> Any:
    sink = JdbcSink.exactly_once_sink(
        f"INSERT INTO {table} (i, k, total) VALUES (%s, %s, %s)",
        None,
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(url).build(),
        JdbcExecutionOptions.builder().with_batch_size(7).build(),
        JdbcExactlyOnceOptions.builder().with_transaction_id_prefix(table).build(),
    )
    if sink_class is not None:
        sink.__class__ = sink_class  # same state, the subclass's hooks
    return sink


def build(env: Any, kind: str, sink: Any, fail: Any = None, records: int | None = None) -> None:
    """The job: running sums per key into ``sink`` (``fail``: a map before the sum)."""
    ds = env.from_collection(data(kind, records))
    if fail is not None:
        ds = ds.map(fail)
    sums = ds.key_by(lambda v: v[0]).process(RunningSum())
    if kind == "files":
        sums.map(as_line).sink_to(sink).uid("files")
    elif kind == "spark-table":
        sums.sink_to(sink).uid("spark-table")
    else:
        sums.add_sink(sink).uid("postgres")


# -- worker crashes right after the pre-commit (Spark) ----------------------------------------


class ExitAfterPreCommitFileSinkOperator(file_sink.FileSinkOperator):
    """Exits its worker right after writing its segments and pending parts (subtask 0, from
    epoch ``epoch`` on, once)."""

    def __init__(self, marker_dir: str, epoch: int, *args: Any) -> None:
        super().__init__(*args)
        self.marker_dir, self.crash_epoch = marker_dir, epoch

    def snapshot_state(self, checkpoint_id: int | None, timestamp_ms: int) -> None:
        super().snapshot_state(checkpoint_id, timestamp_ms)
        ctx = self.ctx
        assert ctx is not None
        if ctx.subtask_index == 0 and ctx.epoch >= self.crash_epoch and self.pending:
            crash_once(self.marker_dir, "file-sink-pre-commit")


class ExitAfterPreCommit:
    """A FileSink whose subtasks are :class:`ExitAfterPreCommitFileSinkOperator`."""

    def __init__(self, sink: FileSink, marker_dir: str, epoch: int) -> None:
        self.sink, self.marker_dir, self.epoch = sink, marker_dir, epoch

    def _sink_parts(self) -> tuple[str, Any, Any]:
        name, factory, committer = self.sink._sink_parts()
        op = partial(ExitAfterPreCommitFileSinkOperator, self.marker_dir, self.epoch)
        return name, partial(op, *factory.args), committer


class ExitAfterPrepare(postgres.PostgresTwoPhaseCommitSink):
    """Exits its worker right after ``PREPARE TRANSACTION`` (subtask 0, from epoch
    ``CRASH_EPOCH`` on, once): the dead attempt leaves a prepared transaction."""

    marker_dir = ""
    crash_epoch = 4

    def pre_commit(self, transaction: str) -> None:
        super().pre_commit(transaction)
        ctx = self.ctx
        if ctx.get_index_of_this_subtask() == 0 and getattr(ctx, "epoch", 0) >= self.crash_epoch:
            crash_once(self.marker_dir, "postgres-pre-commit")


class ExitAfterSend(postgres.PostgresWriteAheadSink):
    """Exits its worker right after writing a checkpoint's rows and commit record (subtask
    0, from epoch ``crash_epoch`` on, once): the driver never hears of the write."""

    marker_dir = ""
    crash_epoch = 4

    def send_values(self, values: list[Any], checkpoint_id: int, timestamp: int) -> bool:
        written = super().send_values(values, checkpoint_id, timestamp)
        ctx = self._ctx_for_crash
        if ctx.get_index_of_this_subtask() == 0 and getattr(ctx, "epoch", 0) >= self.crash_epoch:
            crash_once(self.marker_dir, "postgres-wal-send")
        return written

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._ctx_for_crash = runtime_context


SPARK_TABLE_ROW = Types.ROW_NAMED(["i", "k", "total"], [Types.LONG(), Types.STRING(), Types.LONG()])


def spark_table_sink_for(out: str) -> SparkTableSink:
    """A parquet SparkTableSink; its committer runs Spark (local) in this driver process."""
    return SparkTableSink(out, format="parquet", type_info=SPARK_TABLE_ROW)


def wal_sink_for(url: str, table: str) -> Any:
    return postgres.PostgresWriteAheadSink(
        f"INSERT INTO {table} (i, k, total) VALUES (%s, %s, %s)", url, batch_size=7
    )


def main(kind: str, target: str, chk: str) -> None:
    spec = SPECS[kind]
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", str(spec.epoch_records))
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.set_clock(TickingClock())
    env.enable_checkpointing(2500)  # every 2-3 epochs (the clock ticks 1 s per reading)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(chk)
    cc.set_num_retained_checkpoints(2)
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    url, _, table = target.partition("|")
    if kind == "files":
        sink = file_sink_for(target)
    elif kind == "spark-table":
        sink = spark_table_sink_for(target)
    elif kind == "postgres-wal":
        sink = wal_sink_for(url, table)
    else:
        sink = jdbc_sink_for(url, table)
    build(env, kind, sink)
    env.execute(f"crash-job-{kind}")


if __name__ == "__main__":
    install_crash_hooks()
    main(sys.argv[1], sys.argv[2], sys.argv[3])
