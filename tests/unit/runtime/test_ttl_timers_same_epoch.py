"""State TTL vs event-time timers of the same job (issue 10).

PyFlink's ``event_time_timer`` example keeps a sum in a ValueState with a 1 s
processing-time TTL and reads it in event-time timers. In Flink the small bounded job
ends milliseconds after its last record, so every timer reads the sum. streamstate
used to run one more epoch just to deliver the final watermark: on Spark that epoch
started seconds later (driver time), the TTL had run out and 6 of 8 timers read None.
The epoch that reads the rest of a bounded source now ends with the final watermark.
"""

from __future__ import annotations

from typing import Any

from streamstate.common import Duration, Time, Types, WatermarkStrategy
from streamstate.common.watermark_strategy import TimestampAssigner
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.functions import KeyedProcessFunction
from streamstate.datastream.state import StateTtlConfig, ValueStateDescriptor
from streamstate.runtime.job_status import EpochStats, JobObserver
from streamstate.testing import TickingClock
from tests.support.envs import make_env


class Epochs(JobObserver):
    """Records the number of every finished epoch."""

    def __init__(self) -> None:
        self.epochs: list[int] = []

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        self.epochs.append(stats.epoch)


DATA = [
    (1000, "Alice", 110.0),
    (4000, "Bob", 30.0),
    (3000, "Alice", 20.0),
    (2000, "Bob", 53.0),
    (5000, "Alice", 13.0),
    (3000, "Bob", 3.0),
    (7000, "Bob", 16.0),
    (10000, "Alice", 20.0),
]


class Sum(KeyedProcessFunction):
    def open(self, runtime_context: Any) -> None:
        d = ValueStateDescriptor("state", Types.DOUBLE())
        d.enable_time_to_live(
            StateTtlConfig.new_builder(Time.seconds(1))
            .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
            .disable_cleanup_in_background()
            .build()
        )
        self.state = runtime_context.get_state(d)

    def process_element(self, value: Any, ctx: Any) -> None:
        self.state.update((self.state.value() or 0) + value[2])
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 2000)

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield ctx.get_current_key(), timestamp, self.state.value()


class Ts(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[0])


def expected() -> list[tuple[str, int, float]]:
    """Every record is read before any timer fires (one small epoch, as Flink's run):
    each distinct timer (timestamp + 2 s per key) reads the key's final sum."""
    sums: dict[str, float] = {}
    timers: set[tuple[str, int]] = set()
    for ts, key, v in DATA:
        sums[key] = sums.get(key, 0) + v
        timers.add((key, ts + 2000))
    return sorted((k, t, sums[k]) for k, t in timers)


def test_timers_read_ttl_state_of_a_bounded_job_with_slow_epochs() -> None:
    env = make_env(2, conf={"execution.progress": "none", "rest.enabled": "false"})
    env.set_clock(TickingClock(step_ms=5000))  # every driver reading 5 s later: slow epochs
    seen = Epochs()
    env.add_job_observer(seen)
    sink = CollectSink()
    (
        env.from_collection(DATA)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(
                Duration.of_seconds(2)
            ).with_timestamp_assigner(Ts())
        )
        .key_by(lambda v: v[1])
        .process(Sum())
        .sink_to(sink)
    )
    env.execute()
    assert sorted(sink.get_results()) == expected()
    assert seen.epochs == [1]  # the epoch reading the collection carries the final watermark


def test_a_collection_read_over_several_epochs_ends_with_its_last_one() -> None:
    env = make_env(2, max_records=3, conf={"execution.progress": "none", "rest.enabled": "false"})
    seen = Epochs()
    env.add_job_observer(seen)
    sink = CollectSink()
    env.from_collection(list(range(8))).key_by(lambda v: v % 2).sum(0).sink_to(sink)
    env.execute()
    assert seen.epochs == [1, 2, 3]  # 3 + 3 + 2 records, no empty epoch after them
    assert sorted(sink.get_results()) == sorted([0, 2, 6, 12, 1, 4, 9, 16])


def test_a_bounded_file_source_ends_with_the_epoch_that_reads_its_last_line(
    tmp_path: Any,
) -> None:
    from streamstate.datastream.connectors.file_system import FileSource, StreamFormat

    (tmp_path / "in.txt").write_text("".join(f"{i}\n" for i in range(7)))
    for budget, n in ((100, [1]), (3, [1, 2, 3])):
        env = make_env(
            1, max_records=budget, conf={"execution.progress": "none", "rest.enabled": "false"}
        )
        seen = Epochs()
        env.add_job_observer(seen)
        sink = CollectSink()
        source = FileSource.for_record_stream_format(
            StreamFormat.text_line_format(), str(tmp_path / "in.txt")
        ).build()
        (
            env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
            .key_by(lambda v: int(v) % 2)
            .map(int)
            .sink_to(sink)
        )
        env.execute()
        assert sorted(sink.get_results()) == list(range(7))
        # budget 3 per epoch: 3 + 3 + 1 lines; the byte count (14) only proves the
        # end is reached once at most 3 bytes are left, so the last epoch is the 3rd
        assert seen.epochs == n
