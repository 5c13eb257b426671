"""Keyed state with event-time timers in a ``KeyedProcessFunction`` (the process
function page's example, re-expressed): per key, a count and the time of the latest
record; each record sets a timer ``QUIET_MS`` after it, and only the timer of a key's
latest record (the key stayed quiet that long) emits ``(key, count)``.

The page's program reads a Table API ``datagen`` table; ``table_source_job`` keeps that
shape (``streamstate.table`` is not supported, see docs/limitations.md)."""

from __future__ import annotations

import calendar
import datetime
from collections.abc import Iterator
from typing import Any

from streamstate.common import Row
from streamstate.common.typeinfo import Types
from streamstate.common.watermark_strategy import TimestampAssigner
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.datastream.functions import KeyedProcessFunction, RuntimeContext
from streamstate.datastream.state import ValueStateDescriptor

QUIET_MS = 60_000


class EmitWhenQuiet(KeyedProcessFunction):
    def __init__(self) -> None:
        self.summary: Any = None

    def open(self, runtime_context: RuntimeContext) -> None:
        self.summary = runtime_context.get_state(
            ValueStateDescriptor("key-summary", Types.PICKLED_BYTE_ARRAY())
        )

    def process_element(self, value: Row, ctx: KeyedProcessFunction.Context) -> None:
        summary = self.summary.value() or Row(value[1], 0, 0)  # key, count, last seen
        summary[1] += 1
        summary[2] = ctx.timestamp()
        self.summary.update(summary)
        ctx.timer_service().register_event_time_timer(summary[2] + QUIET_MS)

    def on_timer(
        self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext
    ) -> Iterator[tuple[str, int]]:
        summary = self.summary.value()
        if timestamp == summary[2] + QUIET_MS:  # not superseded by a later record
            yield summary[0], summary[1]


class FirstFieldMillis(TimestampAssigner):
    """The record's first field, a naive UTC ``datetime``, in epoch milliseconds."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        moment: datetime.datetime = value[0]
        return calendar.timegm(moment.timetuple()) * 1000 + moment.microsecond // 1000


def table_source_job() -> None:
    """The page's source: a Table API ``datagen`` table as a stream (unsupported here)."""
    from streamstate.table import StreamTableEnvironment  # raises UnsupportedFeatureError

    env = StreamExecutionEnvironment.get_execution_environment()
    StreamTableEnvironment.create(stream_execution_environment=env)
