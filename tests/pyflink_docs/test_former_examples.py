"""Behaviours that example programs of earlier PyFlink releases showed and the pinned
wheel's examples no longer do (a continuous event-time trigger, a sliding window with
an offset, event-time timers over untyped pickled state): re-expressed as our own jobs,
checked against ``expected.py``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from streamstate.common import Duration, Time, Types, WatermarkStrategy
from streamstate.common.watermark_strategy import TimestampAssigner
from streamstate.datastream import DataStream, ProcessWindowFunction
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.functions import KeyedProcessFunction, RuntimeContext
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.datastream.window import (
    ContinuousEventTimeTrigger,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
)
from tests.pyflink_docs.expected import sliding
from tests.support.envs import make_env

STAMPS = [1, 2, 3, 4, 5, 8, 9, 15]


class SecondField(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[1])


class Bounds(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    """``(key, start, end, how many)`` per firing."""

    def process(
        self, key: str, context: ProcessWindowFunction.Context, elements: Iterable[tuple]
    ) -> Iterable[tuple]:
        window = context.window()
        return [(key, window.start, window.end, sum(1 for _ in elements))]


def _collect(build: Any) -> list[Any]:
    env = make_env(1, conf={"execution.progress": "none"})
    stream = env.from_collection(
        [("k", t) for t in STAMPS], type_info=Types.TUPLE([Types.STRING(), Types.INT()])
    ).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField())
    )
    sink = CollectSink()
    out: DataStream = build(stream.key_by(lambda x: x[0], key_type=Types.STRING()))
    out.sink_to(sink)
    env.execute()
    return list(sink.get_results())


def test_continuous_event_time_trigger_in_a_bounded_job() -> None:
    # 10 ms windows, early firings every 5 ms of event time: [0, 10) registers timers at
    # 5 (its first element's 1 -> 0 + 5) and 9 (its max timestamp); the bounded job reads
    # every element before the final watermark, so both firings see all 7 of them;
    # [10, 20) fires once, at 19
    out = _collect(
        lambda keyed: (
            keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
            .trigger(ContinuousEventTimeTrigger.of(Time.milliseconds(5)))
            .process(Bounds())
        )
    )
    assert out == [("k", 0, 10, 7), ("k", 0, 10, 7), ("k", 10, 20, 1)]


@pytest.mark.parametrize("offset", [0, 1])
def test_sliding_window_with_an_offset_argument(offset: int) -> None:
    size, slide = Time.milliseconds(5), Time.milliseconds(2)
    out = _collect(
        lambda keyed: keyed.window(
            SlidingEventTimeWindows.of(size, slide, Time.milliseconds(offset))
        ).process(Bounds())
    )
    assert out == [("k", s, e, n) for s, e, n in sliding(STAMPS, 5, 2, offset)]


class RunningTotalAtTimer(KeyedProcessFunction):
    """Adds each amount to pickled (untyped) state; a timer 2 s after each record
    emits ``(key, total)`` as it is then."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(
            ValueStateDescriptor("total", Types.PICKLED_BYTE_ARRAY())
        )

    def process_element(self, value: tuple, ctx: KeyedProcessFunction.Context) -> None:
        self.total.update((self.total.value() or 0) + value[2])
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 2000)

    def on_timer(
        self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext
    ) -> Iterator[tuple[str, float]]:
        yield ctx.get_current_key(), self.total.value()


class FirstField(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[0])


def test_event_time_timers_over_untyped_pickled_state() -> None:
    events = [(1000, "ann", 12.5), (4000, "bo", 3.25), (3000, "ann", 0.1), (2000, "bo", 7.0)]
    events += [(5000, "ann", 2.2), (3000, "bo", 1.1), (9000, "bo", 4.4)]
    env = make_env(2, conf={"execution.progress": "none"})
    sink = CollectSink()
    env.from_collection(events).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(
            Duration.of_seconds(2)
        ).with_timestamp_assigner(FirstField())
    ).key_by(lambda e: e[1]).process(RunningTotalAtTimer()).sink_to(sink)
    env.execute()
    # one bounded epoch: every timer (one per key and time) fires after all records,
    # reading its key's final Python-float total
    totals: dict[str, float] = {}
    for _, k, v in events:
        totals[k] = totals.get(k, 0) + v
    timers = {(k, t + 2000) for t, k, _ in events}
    assert sorted(sink.get_results()) == sorted((k, totals[k]) for k, _ in timers)
