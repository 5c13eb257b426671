"""The autoscaler's decisions (runtime/autoscaler.py) from synthetic epoch samples: a
source stepping from 10k to 50k records/s scales the keyed stage out, stepping back
scales it in; nothing happens within the utilization boundary, before the
stabilization interval or without a full metrics window; bounds per operator hold."""

from __future__ import annotations

import pytest

from streamstate.common import Configuration, Types
from streamstate.datastream import KeyedProcessFunction
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.errors import ConfigurationError
from streamstate.runtime.autoscaler import (
    Autoscaler,
    AutoscalerSettings,
    EpochSample,
    StageSample,
)
from streamstate.testing import TickingClock, use_default_clock
from tests.support import envs

#: one keyed subtask processes 8,000 records/s when busy all the time
CAPACITY = 8_000.0
SOURCE, COUNT = 1, 2


class Feed:
    """One-second epochs of a source (parallelism 2, not rescalable; reads what arrives
    while the count stage keeps up) and a keyed count stage at ``parallelism``; the
    clock is the epochs' ends."""

    def __init__(self, scaler: Autoscaler, start_ms: int = 0) -> None:
        self.scaler = scaler
        self.now = start_ms
        self.backlog = 0
        self.parallelism = 2

    def epochs(self, n: int, rate: int) -> None:
        for _ in range(n):
            self.now += 1000
            arrived = self.backlog + rate
            read = min(arrived, int(CAPACITY * self.parallelism))  # the count stage's limit
            self.backlog = arrived - read
            busy = read / CAPACITY  # seconds, summed over the count stage's subtasks
            self.scaler.observe(
                EpochSample(
                    self.now,
                    1.0,
                    {
                        # a SourceFunction's stage: a whole-job rescale leaves it alone
                        SOURCE: StageSample(
                            2, ("numbers",), 128, read, 0.05, True, self.backlog, False
                        ),
                        COUNT: StageSample(self.parallelism, ("count",), 128, read, busy),
                    },
                )
            )

    def decide(self):
        decision = self.scaler.evaluate(self.now)
        if decision is not None and decision.applied:
            self.parallelism = decision.operators().get("count", self.parallelism)
            self.scaler.rescaled(self.now)
        return decision


def settings(**kw) -> AutoscalerSettings:
    base = {
        "enabled": True,
        "stabilization_ms": 10_000,
        "metrics_window_ms": 10_000,
        "catch_up_ms": 60_000,
        "max_parallelism": 8,
    }
    return AutoscalerSettings(**{**base, **kw})


def test_a_rate_step_up_scales_out_and_a_step_down_scales_in():
    feed = Feed(Autoscaler(settings(), started_ms=0))
    feed.epochs(20, 10_000)  # utilization 0.625: inside 0.7 +- 0.3
    assert feed.decide() is None and feed.parallelism == 2
    feed.epochs(10, 50_000)  # the count stage saturates at 16k/s, the backlog grows
    out = feed.decide()
    assert out is not None and out.applied
    (count,) = [v for v in out.vertices if v.uid == "count"]
    # target 50k/s read + backlog/60 s: far beyond 16k/s at 0.7 -> bounded to 8
    assert (count.parallelism, count.new_parallelism) == (2, 8)
    assert count.reason.startswith("busy: true processing rate 16,000 rec/s at parallelism 2")
    assert "bounded to [1, 8]" in count.reason
    assert feed.parallelism == 8
    feed.epochs(9, 50_000)
    assert feed.decide() is None  # stabilization: 10 s after the rescale not yet passed
    feed.epochs(30, 50_000)  # the backlog is caught up at 64k/s, then 50k/s: 0.78 busy
    assert feed.backlog == 0
    assert feed.decide() is None
    feed.epochs(20, 10_000)  # 10k/s at 8: utilization 0.16, idle
    out = feed.decide()
    assert out is not None
    (count,) = [v for v in out.vertices if v.uid == "count"]
    # wanted ceil(8 * 10k / (64k * 0.7)) = 2, but one step goes down by at most 60 %
    assert (count.parallelism, count.new_parallelism) == (8, 4)
    assert count.reason.startswith("idle: ")
    feed.epochs(20, 10_000)
    out = feed.decide()
    assert out is not None and out.operators() == {"count": 2}


def test_nothing_before_the_stabilization_interval_or_a_full_window():
    scaler = Autoscaler(settings(stabilization_ms=30_000, metrics_window_ms=5_000), 0)
    feed = Feed(scaler)
    feed.epochs(20, 50_000)
    assert feed.decide() is None  # 20 s < 30 s since the start
    feed.epochs(10, 50_000)
    assert feed.decide() is not None
    scaler = Autoscaler(settings(stabilization_ms=0, metrics_window_ms=60_000), 0)
    feed = Feed(scaler)
    feed.epochs(59, 50_000)
    assert feed.decide() is None  # 59 s of samples < a 60 s window
    feed.epochs(1, 50_000)
    assert feed.decide() is not None


def test_off_by_default_and_decisions_only_recorded_without_scaling():
    feed = Feed(Autoscaler(AutoscalerSettings(), 0))
    feed.epochs(2000, 50_000)
    assert feed.decide() is None
    feed = Feed(Autoscaler(settings(scaling=False), 0))
    feed.epochs(20, 50_000)
    out = feed.decide()
    assert out is not None and not out.applied and feed.parallelism == 2
    assert out.to_json()["vertices"][0]["reason"].startswith("busy: ")


def test_per_operator_bounds_and_the_max_parallelism():
    conf = Configuration()
    for k, v in {
        "job.autoscaler.enabled": "true",
        "job.autoscaler.stabilization.interval": "10 s",
        "job.autoscaler.metrics.window": "10 s",
        "job.autoscaler.vertex.max-parallelism": "100",
        "job.autoscaler.vertex.count.max-parallelism": "5",
        "job.autoscaler.vertex.count.min-parallelism": "2",
        "job.autoscaler.target.utilization": "0.6",
    }.items():
        conf.set_string(k, v)
    s = AutoscalerSettings.from_configuration(conf)
    assert s.bounds(("count",)) == (2, 5) and s.bounds(("other",)) == (1, 100)
    assert (s.stabilization_ms, s.metrics_window_ms, s.target_utilization) == (10_000, 10_000, 0.6)
    feed = Feed(Autoscaler(s, 0))
    feed.epochs(20, 50_000)
    assert feed.decide().operators() == {"count": 5}
    feed.epochs(40, 1_000)  # nearly idle: down, but never below 2
    feed.decide()
    feed.epochs(40, 1_000)
    feed.decide()
    assert feed.parallelism == 2


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("job.autoscaler.target.utilization", "1.5", r"must be in \(0, 1\]"),
        ("job.autoscaler.enabled", "yes", "must be true or false"),
        ("job.autoscaler.metrics.window", "soon", "must be a duration"),
        ("job.autoscaler.vertex.max-parallelism", "0", "must be >= 1"),
        ("job.autoscaler.vertex.count.min-parallelism", "two", "must be an integer"),
        ("job.autoscaler.scale-up.max-factor", "0", "must be > 0"),
        ("job.autoscaler.scale-down.max-factor", "much", "must be a number"),
    ],
)
def test_bad_keys_are_typed_errors_naming_the_key(key, value, message):
    with pytest.raises(ConfigurationError, match=message) as e:
        AutoscalerSettings.from_configuration(Configuration().set_string(key, value))
    assert key in str(e.value)


class CountPerKey(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield ctx.get_current_key(), self.count.value()


def test_a_job_with_a_backlog_scales_out_in_place_and_records_why(tmp_path):
    """A sequence source reports its unread numbers as backlog; with a 1 ms catch-up the
    keyed stage is far too slow, so the autoscaler rescales it (and the source) to the
    vertex maximum in place, records why, and the counts stay exact."""
    env = envs.make_env(
        1,
        max_records=40,
        conf={
            "job.autoscaler.enabled": "true",
            "job.autoscaler.stabilization.interval": "3 s",
            "job.autoscaler.metrics.window": "2 s",
            "job.autoscaler.catch-up.duration": "1 ms",
            "job.autoscaler.vertex.max-parallelism": "3",
        },
    )
    envs.checkpoint_every_epoch(env, tmp_path / "chk")
    sink = CollectSink()
    (
        env.from_sequence(0, 1199)
        .key_by(lambda i: i % 7)
        .process(CountPerKey())
        .uid("count")
        .sink_to(sink)
    )
    with use_default_clock(TickingClock()):
        result = env.execute("autoscaled")
    acc = result.get_all_accumulator_results()
    assert acc["autoscaler_decisions"] >= 1 and acc["rescales"] >= 1
    finals = {}
    for key, n in sink.get_results():
        finals[key] = max(finals.get(key, 0), n)
    assert finals == {k: len(range(k, 1200, 7)) for k in range(7)}
    assert sorted(n for k, n in sink.get_results() if k == 0) == list(range(1, 173))


def test_the_decisions_are_in_the_job_metrics_with_their_reasons(tmp_path):
    env = envs.make_env(
        1,
        max_records=40,
        conf={
            "job.autoscaler.enabled": "true",
            "job.autoscaler.scaling.enabled": "false",  # record, do not apply
            "job.autoscaler.stabilization.interval": "3 s",
            "job.autoscaler.metrics.window": "2 s",
            "job.autoscaler.catch-up.duration": "1 ms",
            "job.autoscaler.vertex.max-parallelism": "3",
        },
    )
    envs.checkpoint_every_epoch(env, tmp_path / "chk")
    env.from_sequence(0, 399).key_by(lambda i: i % 7).process(CountPerKey()).uid(
        "count"
    ).sink_to(CollectSink())
    with use_default_clock(TickingClock()):
        client = env.execute_async("recorded")
        result = client.get_job_execution_result().result(300)
    assert result.get_accumulator_result("autoscaler_decisions") >= 1
    assert result.get_accumulator_result("rescales") in (None, 0)
    decisions = list(client._executor.parts.metrics.scaling)
    count = [v for d in decisions for v in d["vertices"] if v["uid"] == "count"]
    assert count and not decisions[0]["applied"]
    assert count[0]["from"] == 1 and count[0]["to"] == 3
    assert count[0]["reason"].startswith("busy: true processing rate")


def test_executors_are_asked_for_the_subtasks_that_run_at_once():
    """Stages behind a shuffle run one after another, sources start together: the
    executors an epoch needs follow the widest of those, not the sum of every stage."""
    from types import SimpleNamespace

    from streamstate.runtime.autoscaling import subtasks_at_once

    def stage(is_source: bool, p: int) -> SimpleNamespace:
        return SimpleNamespace(is_source=is_source, parallelism=p)

    def width(st: SimpleNamespace) -> int:
        return int(st.parallelism)

    chain = [stage(True, 2), stage(False, 8), stage(False, 4)]
    assert subtasks_at_once(chain, width) == 8  # not 14
    two_sources = [stage(True, 3), stage(True, 4), stage(False, 5)]
    assert subtasks_at_once(two_sources, width) == 7
    assert subtasks_at_once(chain, lambda st: 1 if st.is_source else 2) == 2
