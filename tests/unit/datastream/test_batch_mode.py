"""RuntimeExecutionMode.BATCH: Flink's batch semantics on bounded inputs (issue 10)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from streamstate.common import Time, Types, WatermarkStrategy
from streamstate.common.watermark_strategy import TimestampAssigner
from streamstate.datastream import RuntimeExecutionMode
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.functions import SourceFunction
from streamstate.datastream.window import TumblingEventTimeWindows, TumblingProcessingTimeWindows
from streamstate.errors import ConfigurationError
from streamstate.runtime.job_status import EpochStats, JobObserver
from tests.support.envs import make_env

WORDS = "to be or not to be that is the question to be".split()


def _batch_env(**kw: object):
    # a small epoch budget that BATCH must ignore
    env = make_env(
        2, max_records=2, conf={"execution.progress": "none", "rest.enabled": "false"}, **kw
    )
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    return env


def test_batch_word_count_prints_final_counts_only(capfd: pytest.CaptureFixture[str]) -> None:
    env = _batch_env()
    (
        env.from_collection(WORDS)
        .map(lambda w: (w, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .print()
    )
    result = env.execute("batch word count")
    out, err = capfd.readouterr()
    lines = sorted(line.split("> ", 1)[-1] for line in (out + err).splitlines() if line)
    expected = sorted(f"({w},{n})" for w, n in Counter(WORDS).items())  # a typed Tuple2
    assert lines == expected
    assert result.get_net_runtime() >= 0


def test_batch_sum_is_one_record_per_key_and_one_epoch() -> None:
    env = _batch_env()
    epochs: list[int] = []

    class Observer(JobObserver):
        def on_epoch(self, job_id: str, stats: EpochStats) -> None:
            epochs.append(stats.epoch)

    env.add_job_observer(Observer())
    sink = CollectSink()
    env.from_collection([(w, 1) for w in WORDS]).key_by(lambda t: t[0]).sum(1).sink_to(sink)
    env.execute()
    assert sorted(sink.get_results()) == sorted(Counter(WORDS).items())
    assert epochs == [1]


def test_streaming_mode_still_emits_running_counts() -> None:
    env = make_env(2)
    sink = CollectSink()
    env.from_collection([(w, 1) for w in WORDS]).key_by(lambda t: t[0]).sum(1).sink_to(sink)
    env.execute()
    assert len(sink.get_results()) == len(WORDS)


class _Ts(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):  # type: ignore[no-untyped-def]
        return value[1]


def test_batch_event_time_windows_fire_once_with_every_element() -> None:
    # out of order by far more than the bound: in BATCH nothing is late
    data = [("a", 9_000), ("a", 1_000), ("b", 2_000), ("a", 3_000), ("a", 12_000), ("b", 500)]
    env = _batch_env()
    sink = CollectSink()
    (
        env.from_collection(data)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(_Ts())
        )
        .map(lambda v: (v[0], 1))
        .key_by(lambda v: v[0])
        .window(TumblingEventTimeWindows.of(Time.seconds(5)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(sink)
    )
    env.execute()
    expected = Counter((k, t // 5000) for k, t in data)
    assert sorted(sink.get_results()) == sorted((k, n) for (k, _), n in expected.items())


def test_batch_processing_time_windows_fire_at_end_of_input() -> None:
    env = _batch_env()
    sink = CollectSink()
    (
        env.from_collection([(w, 1) for w in WORDS])
        .key_by(lambda v: v[0])
        .window(TumblingProcessingTimeWindows.of(Time.hours(1)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(sink)
    )
    env.execute()
    # one processing-time window per key unless the job straddles an hour boundary
    totals: Counter[str] = Counter()
    for k, n in sink.get_results():
        totals[k] += n
    assert totals == Counter(WORDS)


class _Endless(SourceFunction):
    def run(self, ctx):  # type: ignore[no-untyped-def]
        while True:
            ctx.collect(1)

    def cancel(self) -> None:
        pass


def test_unbounded_source_in_batch_mode_is_a_clear_error() -> None:
    env = _batch_env()
    env.add_source(_Endless()).print()
    with pytest.raises(ConfigurationError, match="unbounded.*BATCH.*STREAMING"):
        env.execute()


def test_automatic_mode_is_batch_on_bounded_inputs() -> None:
    env = make_env(2, max_records=2, conf={"execution.progress": "none", "rest.enabled": "false"})
    env.set_runtime_mode(RuntimeExecutionMode.AUTOMATIC)
    sink = CollectSink()
    env.from_collection([(w, 1) for w in WORDS]).key_by(lambda t: t[0]).sum(1).sink_to(sink)
    env.execute()
    assert sorted(sink.get_results()) == sorted(Counter(WORDS).items())  # final counts only


def test_batch_writes_no_state_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamstate.runtime.worker import commit

    commits: list[Any] = []
    real = commit.commit_keyed_state

    def counted(*args: Any, **kwargs: Any) -> Any:  # a spy: the real commit still runs
        commits.append(args[3].epoch)
        return real(*args, **kwargs)

    monkeypatch.setattr(commit, "commit_keyed_state", counted)

    def run(mode: RuntimeExecutionMode) -> list[Any]:
        commits.clear()
        env = make_env(2, conf={"execution.progress": "none", "rest.enabled": "false"})
        env.set_runtime_mode(mode)
        sink = CollectSink()
        env.from_collection([(w, 1) for w in WORDS]).key_by(lambda t: t[0]).sum(1).sink_to(sink)
        env.execute()
        return list(commits)

    assert run(RuntimeExecutionMode.STREAMING)  # every subtask commits its state version
    assert run(RuntimeExecutionMode.BATCH) == []
