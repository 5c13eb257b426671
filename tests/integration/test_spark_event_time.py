"""Event time on Spark: the temperature-jump alert (a state machine with a timer), side
outputs, watermark restore after a crash, and timers moving on rescale.

Each faulty run is compared with a failure-free run of the same job on Spark.
"""

from __future__ import annotations

from collections import Counter

import pytest

from streamstate.common import WatermarkStrategy
from streamstate.datastream import ExternalizedCheckpointCleanup, KeyedProcessFunction
from streamstate.datastream.connectors import CollectSink
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.event_time_jobs import (
    ALERTS_LATE,
    TagOdd,
    TemperatureJumpAlert,
    readings,
    readings_strategy,
)
from tests.integration.jobs import make_env
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()

DATA = readings(90)


@pytest.fixture
def epoch_clock():
    """Each driver clock reading is 1 s later: checkpoints every few epochs, deterministically."""
    with use_default_clock(TickingClock()) as clock:
        yield clock


def alert_job(env, data, fail=None):
    """collection -> assigner (chained, p=1) -> [fail] -> key_by sensor -> alert -> collect."""
    ds = env.from_collection(data).assign_timestamps_and_watermarks(readings_strategy())
    ds.set_parallelism(1)
    if fail is not None:
        ds = ds.map(fail).name("inject")
        ds.set_parallelism(1)
    alerts = ds.key_by(lambda r: r[0]).process(TemperatureJumpAlert()).uid("alerts")
    main, late = CollectSink(), CollectSink()
    alerts.sink_to(main)
    alerts.get_side_output(ALERTS_LATE).sink_to(late)
    return main, late


def checkpointed(env, tmp_path, name, interval=2500):
    env.enable_checkpointing(interval)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / name))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)


@pytest.fixture(scope="module")
def alert_baseline(spark):
    env = make_env(spark, epoch_records=15)
    main, late = alert_job(env, DATA)
    env.execute("alerts-baseline")
    return main.get_results(), late.get_results()


def test_alert_baseline_is_meaningful(alert_baseline):
    out, late = alert_baseline
    kinds = Counter(r[0] for r in out)
    assert kinds["ALERT"] > 0 and kinds["EXPIRED"] == 5  # every sensor expires at the end
    assert late == []


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_alerts_after_a_failure_equal_the_failure_free_run(
    spark, tmp_path, epoch_clock, alert_baseline, how
):
    env = make_env(spark, epoch_records=15)
    checkpointed(env, tmp_path, f"alerts-{how}")
    fail = FailOnce(str(tmp_path), epoch=4, subtask=0, mode=how, after_records=5)
    main, late = alert_job(env, DATA, fail)
    result = env.execute(f"alerts-{how}")
    assert fail.fired and result.get_accumulator_result("restarts") >= 1
    assert Counter(main.get_results()) == Counter(alert_baseline[0])
    assert late.get_results() == alert_baseline[1]


class WatermarkLog(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timestamp(), ctx.timer_service().current_watermark()


def watermark_job(env, fail=None):
    ds = env.from_sequence(0, 119).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, t: v * 100)
    )
    if fail is not None:
        ds = ds.map(fail).name("inject")
    sink = CollectSink()
    ds.key_by(lambda v: v % 7).process(WatermarkLog()).uid("wm-log").sink_to(sink)
    return sink


def test_watermarks_restored_after_a_worker_crash(spark, tmp_path, epoch_clock):
    env = make_env(spark, epoch_records=10)
    base = watermark_job(env)
    env.execute("wm-base")
    env = make_env(spark, epoch_records=10)
    checkpointed(env, tmp_path, "wm", interval=1)
    fail = FailOnce(str(tmp_path), epoch=4, subtask=1, mode="exit")
    sink = watermark_job(env, fail)
    env.execute("wm-crash")
    assert fail.fired
    # the same timestamps and watermarks per record as without the crash: the generators
    # and operator watermarks continued from the checkpoint, not from Long.MIN
    assert sorted(sink.get_results()) == sorted(base.get_results())
    assert len({wm for _, _, wm in base.get_results()}) > 3


def test_side_outputs_through_shuffles(spark):
    env = make_env(spark, epoch_records=20)
    main = env.from_sequence(0, 59).process(TagOdd())
    evens, odds, fives = CollectSink(), CollectSink(), CollectSink()
    main.sink_to(evens)
    main.get_side_output(TagOdd.ODD).key_by(lambda v: v % 3).map(lambda v: -v).sink_to(odds)
    main.get_side_output(TagOdd.FIVE).rebalance().map(lambda v: v * 10).sink_to(fives)
    env.execute("side-outputs")
    assert sorted(evens.get_results()) == list(range(0, 60, 2))
    assert sorted(odds.get_results()) == sorted(-v for v in range(1, 60, 2))
    assert sorted(fives.get_results()) == [v * 10 for v in range(0, 60, 5)]


def test_timers_move_with_their_keys_on_rescale(spark, tmp_path, epoch_clock, alert_baseline):
    """Stop after 3 epochs at parallelism 2 with a retained checkpoint, restore at 3: the
    pending timers (and last readings) of every sensor fire on their new subtasks."""
    outputs = []
    restore = None
    for parallelism, max_epochs in [(2, "3"), (3, "0")]:
        env = make_env(spark, epoch_records=15, **{"execution.epoch.max-epochs": max_epochs})
        env.set_parallelism(parallelism)
        checkpointed(env, tmp_path, "rescale", interval=1)
        if restore is not None:
            env.set_restore_path(restore)
        main, _ = alert_job(env, DATA)
        result = env.execute(f"alerts-p{parallelism}")
        outputs.append(main.get_results())
        restore = result.get_accumulator_result("latest-checkpoint")
        assert restore is not None
    expired_after = [r for r in outputs[1] if r[0] == "EXPIRED"]
    assert outputs[0] and expired_after
    assert Counter(outputs[0] + outputs[1]) == Counter(alert_baseline[0])
