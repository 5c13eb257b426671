"""SparkTableSink: checkpointed epochs become committed Spark batches, never duplicated."""

from __future__ import annotations

import os

import pytest

from streamstate.common import Types
from streamstate.datastream import CheckpointingMode
from streamstate.datastream.connectors import SparkTableSink
from streamstate.errors import ConfigurationError
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.jobs import make_env
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()

N = 240
ROW = Types.ROW_NAMED(["id", "key"], [Types.LONG(), Types.STRING()])


def _job(spark, tmp_path, table, name, failure=None, mode="append", n=N):
    env = make_env(spark, epoch_records=20)
    env.enable_checkpointing(2500, CheckpointingMode.EXACTLY_ONCE)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / f"chk-{name}"))
    ds = env.from_sequence(0, n - 1)
    if failure is not None:
        ds = ds.map(failure).name("fail-once")
    sink = SparkTableSink(str(table), format="parquet", mode=mode)
    ds.map(lambda i: (i, f"k{i % 7}"), output_type=ROW).sink_to(sink)
    with use_default_clock(TickingClock(start_ms=1000)):
        env.execute(name)
    return sink


def _ids(spark, table):
    return sorted(r.id for r in spark.read.parquet(str(table)).collect())


def test_failure_replays_without_duplicates(spark, tmp_path):
    base = _job(spark, tmp_path, tmp_path / "base", "base")
    fail = FailOnce(str(tmp_path), epoch=4, subtask=1, after_records=3)
    _job(spark, tmp_path, tmp_path / "faulty", "faulty", failure=fail)
    assert (tmp_path / "fail-once.failed").exists()
    assert _ids(spark, tmp_path / "base") == list(range(N))
    assert _ids(spark, tmp_path / "faulty") == list(range(N))
    df = spark.read.parquet(str(tmp_path / "faulty"))
    assert df.columns == ["id", "key"] and df.schema["id"].dataType.typeName() == "long"
    # one batch per completed checkpoint, not one per epoch
    assert 1 < base._committer.batches_written < 12
    assert not list((tmp_path / "faulty" / "_streamstate" / "staging").iterdir())


def test_save_modes(spark, tmp_path):
    table = tmp_path / "t"
    _job(spark, tmp_path, table, "first", n=30)
    _job(spark, tmp_path, table, "append", n=30)
    assert _ids(spark, table) == sorted(list(range(30)) * 2)
    _job(spark, tmp_path, table, "overwrite", mode="overwrite", n=10)
    assert _ids(spark, table) == list(range(10))
    with pytest.raises(Exception, match="already holds data"):
        _job(spark, tmp_path, table, "error", mode="error", n=10)
    with pytest.raises(ConfigurationError, match="mode must be"):
        SparkTableSink(str(table), mode="merge")


def test_restore_finishes_a_half_done_commit(spark, tmp_path):
    """A driver crash after _metadata: the restored committer writes the checkpoint's batch
    (again: each step is repeatable), never twice."""
    from streamstate.connectors.staged import write_staged_rows
    from streamstate.spark.table_sink import SaveMode, SparkTableCommitter

    table = str(tmp_path / "t")
    staging = SparkTableCommitter.staging_dir(table)

    def committer(token):
        return SparkTableCommitter(table, "json", SaveMode.APPEND, {}, ROW, True, token=token)

    first = committer("runa")
    first.abort(0)
    for epoch in (1, 2):
        path = f"{staging}/runa-0-e{epoch}.rows"
        write_staged_rows(path, [(epoch * 10 + i, "k") for i in range(3)])
        first.prepare(epoch, [path, None])
    state = first.snapshot(2)  # stored in _metadata; the driver dies before commit(2)
    # the crashed driver had got as far as Spark's write of the batch
    first._spark_write(state["files"], f"{table}/_streamstate/out/{state['batch']}")
    # ... and had staged epoch 3, which no checkpoint covers
    write_staged_rows(f"{staging}/runa-1-e3.rows", [(30, "k")])
    second = committer("runb")
    second.restore(state)
    write_staged_rows(f"{staging}/runb-0-e3.rows", [(30, "k")])  # the restored run dies too
    third = committer("runc")
    third.restore(state)  # a second crash before the next checkpoint: restore again
    rows = sorted(r.id for r in spark.read.json(table).collect())
    assert rows == [10, 11, 12, 20, 21, 22]
    assert second.batches_written == 1 and third.batches_written == 0  # found committed
    # the dead runs' staged epochs (same lineage) are gone; nothing else is staged
    assert os.listdir(staging) == []
