"""The barrier runner (``execution.runner: barrier``) on the classic local[2] session and
on a Spark Connect session of the test server (local[2]).

Each run is checked against the session's default runner's run of the same job: same output, same keyed
state in the last checkpoint. Failures (a raising function, a killed Python worker) must
restart every co-scheduled task from the last checkpoint with exactly-once output; a
user's exception keeps its type; a job needing more task slots than the session has is a
typed error naming the fix.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from streamstate.common import RestartStrategies, Types
from streamstate.datastream import CheckpointingMode
from streamstate.datastream.connectors import SparkTableSink
from streamstate.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    JobExecutionError,
    TaskSlotsError,
)
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.jobs import CountPerKey, checkpointed_count, records
from tests.support import envs
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()

DATA = records(400, 23)


@pytest.fixture
def epoch_clock():
    """Each epoch boundary is 1 s later: checkpoints every few epochs, deterministically."""
    with use_default_clock(TickingClock(start_ms=1000)) as clock:
        yield clock


def _env(spark: Any, runner: str, **conf: str) -> Any:
    return envs.make_env(
        spark=spark, max_records=40, restarts=3, conf={"execution.runner": runner, **conf}
    )


def run(spark, tmp_path, name, runner="barrier", mode=CheckpointingMode.EXACTLY_ONCE, failure=None):
    return checkpointed_count(
        spark, tmp_path / name, DATA, mode, failure, **{"execution.runner": runner}
    )


@pytest.fixture(scope="module")
def baseline(spark, tmp_path_factory):
    with use_default_clock(TickingClock(start_ms=1000)):
        # the session's own runner: RDD on the classic session, DataFrame on Connect
        return run(spark, tmp_path_factory.mktemp("base"), "baseline", runner="spark")


def test_same_output_and_state_as_the_default_runner(spark, tmp_path, epoch_clock, baseline):
    out, state = run(spark, tmp_path, "same")
    base_out, base_state = baseline
    assert state == base_state == dict(Counter(k for k, _ in DATA))
    assert Counter(out) == Counter(base_out)


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_exactly_once_after_a_failure_restarts_every_task(
    spark, tmp_path, epoch_clock, baseline, how
):
    fail = FailOnce(str(tmp_path), epoch=6, subtask=1, mode=how, after_records=3)
    out, state = run(spark, tmp_path, f"eo-{how}", failure=fail)
    assert fail.fired
    base_out, base_state = baseline
    assert state == base_state
    assert Counter(out) == Counter(base_out)


def test_at_least_once_after_a_failure(spark, tmp_path, epoch_clock, baseline):
    fail = FailOnce(str(tmp_path), epoch=6, subtask=0, mode="raise", after_records=3)
    out, state = run(spark, tmp_path, "alo", mode=CheckpointingMode.AT_LEAST_ONCE, failure=fail)
    assert fail.fired
    base_out, base_state = baseline
    assert state == base_state
    assert not (Counter(base_out) - Counter(out)), "at-least-once lost records"


def test_stages_of_other_parallelisms_and_a_union(spark):
    """Two sources of parallelism 1 (task 0 only), a union keyed into parallelism 2: task 1
    runs no source subtask and waits for task 0's ends of both."""
    env = _env(spark, "barrier")
    left = env.from_collection([("a", 1), ("b", 2)] * 50).set_parallelism(1)
    right = env.from_collection([("b", 3), ("c", 4)] * 50).set_parallelism(1)
    out = list(
        left.union(right).key_by(lambda v: v[0]).process(CountPerKey()).execute_and_collect("union")
    )
    final: dict[str, int] = {}
    for key, count in out:
        final[key] = max(final.get(key, 0), count)
    assert final == {"a": 50, "b": 100, "c": 50}
    assert len(out) == 200


class BadRecord(Exception):
    """A user exception class defined in the job's own module."""


def _bad_on_7(v: int) -> int:
    if v == 7:
        raise BadRecord("record 7 is not allowed")
    return v


def test_a_user_exception_keeps_its_type(spark):
    env = _env(spark, "barrier")
    env.set_restart_strategy(RestartStrategies.no_restart())
    env.from_collection(list(range(20))).map(_bad_on_7).key_by(lambda v: v % 2).map(
        lambda v: v
    ).print()
    with pytest.raises(BadRecord, match="record 7 is not allowed") as ei:
        env.execute("user-error")
    assert isinstance(ei.value, JobExecutionError)


def test_more_tasks_than_task_slots_is_a_typed_error(spark):
    env = _env(spark, "barrier")
    env.set_parallelism(3)  # local[2]: two task slots
    env.from_collection(list(range(10))).key_by(lambda v: v % 3).map(lambda v: v).print()
    with pytest.raises(TaskSlotsError, match="lower the parallelism to 2") as ei:
        env.execute("too-wide")
    assert isinstance(ei.value, ConfigurationError)


def test_a_spark_stream_with_every_slot_held_is_a_configuration_error(spark, tmp_path):
    """Each trigger of ``from_spark_stream`` is a Spark job of the driver's: with the
    co-scheduled tasks holding both slots of local[2] it could never run."""
    indir = tmp_path / "in"
    indir.mkdir()
    (indir / "in-0.json").write_text('{"id": 1, "key": "a"}\n')
    env = _env(spark, "barrier")
    env.set_restart_strategy(RestartStrategies.no_restart())
    stream = spark.readStream.schema("id long, key string").json(str(indir))
    env.from_spark_stream(stream, str(tmp_path / "spark"), bounded=True).map(
        lambda r: (r.key, r.id)
    ).key_by(lambda v: v[0]).process(CountPerKey()).print()
    with pytest.raises(TaskSlotsError, match="from_spark_stream"):
        env.execute("stream")


def test_a_job_failing_before_its_first_epoch_frees_the_task_slots(spark, tmp_path):
    """``prepare`` submits the tasks' Spark job before the driver restores the job: a
    restore that fails must end it, or the next job would wait for slots forever."""
    env = _env(spark, "barrier")
    env.set_restore_path(str(tmp_path / "no-such-savepoint"))
    env.from_collection(DATA).key_by(lambda v: v[0]).process(CountPerKey()).print()
    with pytest.raises(CorruptCheckpointError, match="no-such-savepoint"):
        env.execute("bad-restore")
    env = _env(spark, "barrier")  # both slots again, for a job of two tasks
    out = list(
        env.from_collection(DATA)
        .key_by(lambda v: v[0])
        .process(CountPerKey())
        .execute_and_collect()
    )
    assert len(out) == len(DATA)


def test_a_table_sink_with_every_slot_held_is_an_error(spark, tmp_path):
    """``SparkTableSink`` commits each batch with a Spark job of the driver's: with the
    co-scheduled tasks holding both slots of local[2] that job could never run."""
    env = _env(spark, "barrier")
    env.enable_checkpointing(2500)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    row = Types.ROW_NAMED(["id"], [Types.LONG()])
    env.from_sequence(0, 9).map(lambda i: (i,), output_type=row).sink_to(
        SparkTableSink(str(tmp_path / "table"), format="parquet")
    )
    with pytest.raises(TaskSlotsError, match="SparkTableSink writes every committed batch"):
        env.execute("table")
