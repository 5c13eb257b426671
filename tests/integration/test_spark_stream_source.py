"""env.from_spark_stream: a Structured Streaming file source feeds a job, exactly once."""

from __future__ import annotations

import json

import pytest

from streamstate.common import Row, Types
from streamstate.datastream import CheckpointingMode, ExternalizedCheckpointCleanup
from streamstate.runtime.state_reader import list_checkpoints
from streamstate.testing import FailOnce, TickingClock, _first_time, use_default_clock
from tests.integration.jobs import CountPerKey, make_env
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()


def _write(indir, n_file, rows=50):
    path = indir / f"in-{n_file}.json"
    lines = [json.dumps({"id": n_file * rows + i, "key": f"k{i % 7}"}) for i in range(rows)]
    tmp = indir / f".in-{n_file}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(path)


def _stream(spark, indir):
    return (
        spark.readStream.schema("id long, key string")
        .option("maxFilesPerTrigger", 2)
        .json(str(indir))
    )


def _env(spark, tmp_path, name, **conf):
    env = make_env(spark, epoch_records=20, **conf)
    env.enable_checkpointing(2500, CheckpointingMode.EXACTLY_ONCE)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / f"chk-{name}"))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    return env


def _count_job(spark, tmp_path, indir, name, failure=None):
    env = _env(spark, tmp_path, name)
    ds = env.from_spark_stream(_stream(spark, indir), str(tmp_path / f"spark-{name}"), bounded=True)
    assert ds._t.output_type == Types.ROW_NAMED(["id", "key"], [Types.LONG(), Types.STRING()])
    ds = ds.map(lambda r: (r.key, r.id))
    if failure is not None:
        ds = ds.map(failure).name("fail-once")
    job = ds.key_by(lambda v: v[0]).process(CountPerKey())
    with use_default_clock(TickingClock(start_ms=1000)):
        return list(job.execute_and_collect(name))


def test_replay_after_failure_equals_the_failure_free_run(spark, tmp_path):
    indir = tmp_path / "in"
    indir.mkdir()
    for f in range(4):
        _write(indir, f)
    base = _count_job(spark, tmp_path, indir, "base")
    fail = FailOnce(str(tmp_path), epoch=3, subtask=0, after_records=5)
    faulty = _count_job(spark, tmp_path, indir, "faulty", fail)
    assert (tmp_path / "fail-once.failed").exists()
    assert len(base) == 200
    assert sorted(faulty) == sorted(base)


def _ids_job(spark, tmp_path, indir, name, restore=None, max_epochs=None):
    conf = {} if max_epochs is None else {"execution.epoch.max-epochs": str(max_epochs)}
    env = _env(spark, tmp_path, name, **conf)
    if restore is not None:
        env.set_restore_path(restore)
    ds = env.from_spark_stream(
        _stream(spark, indir), str(tmp_path / "spark"), bounded=max_epochs is None
    )
    with use_default_clock(TickingClock(start_ms=1000)):
        out = list(ds.execute_and_collect(name))
    assert all(isinstance(r, Row) for r in out)
    return [r.id for r in out]


def test_restore_resumes_at_the_checkpointed_offsets(spark, tmp_path):
    indir = tmp_path / "in"
    indir.mkdir()
    for f in range(2):
        _write(indir, f)
    # the first job stops after 2 epochs (+ its final checkpoint), mid-way through the first
    # trigger's 100 rows
    first = _ids_job(spark, tmp_path, indir, "first", max_epochs=2)
    assert 0 < len(first) < 100
    (latest,) = sorted(
        (c for c in list_checkpoints(str(tmp_path / "chk-first")) if c.valid),
        key=lambda c: c.checkpoint_id,
    )[-1:]
    for f in range(2, 4):
        _write(indir, f)  # new files arrive while no job runs
    second = _ids_job(spark, tmp_path, indir, "second", restore=latest.path)
    assert sorted(first + second) == list(range(200))


class FailInFirstEpochWithRecords(FailOnce):
    """FailOnce at the first epoch >= ``epoch`` in which the subtask sees records: the rate
    source's rows arrive by wall-clock time, so which epoch has them varies between runs."""

    def _should_fail(self) -> bool:
        ctx = self._ctx
        if ctx is None or ctx.get_index_of_this_subtask() != self.subtask:
            return False
        if getattr(ctx, "epoch", 0) < self.epoch:
            return False
        return _first_time(self.marker)


def test_rate_source_with_a_failure_delivers_no_value_twice(spark, tmp_path):
    env = make_env(spark, epoch_records=25, **{"execution.epoch.max-epochs": "8"})
    env.enable_checkpointing(1)  # every epoch boundary
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    df = spark.readStream.format("rate").option("rowsPerSecond", 50).load()
    ds = env.from_spark_stream(df, str(tmp_path / "spark"))
    assert ds._t.output_type == Types.ROW_NAMED(
        ["timestamp", "value"], [Types.SQL_TIMESTAMP(), Types.LONG()]
    )
    fail = FailInFirstEpochWithRecords(str(tmp_path), epoch=2, subtask=0)
    with use_default_clock(TickingClock(start_ms=1000)):
        out = list(ds.map(lambda r: r.value).map(fail).execute_and_collect("rate"))
    assert fail.fired
    assert out and len(set(out)) == len(out)
