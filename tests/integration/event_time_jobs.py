"""Event-time jobs shared by the local unit tests and the Spark integration tests."""

from __future__ import annotations

from typing import Any

from streamstate.common import Duration, TimestampAssigner, Types, WatermarkStrategy
from streamstate.datastream import KeyedProcessFunction, OutputTag, ProcessFunction
from streamstate.datastream.state import ValueStateDescriptor

MINUTE = 60_000
ALERTS_LATE = OutputTag("late-readings")


class ReadingTime(TimestampAssigner):
    """Readings are ``(sensor, temperature, timestamp_ms)``."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[2])


def readings(n: int, sensors: int = 5) -> list[tuple[str, float, int]]:
    """Deterministic, slightly out-of-order readings; some pairs jump > 20 degrees within a
    minute, some just after a minute."""
    out = []
    for i in range(n):
        s = f"s{(i * 7) % sensors}"
        ts = i * 9_000 + ((i * 13) % 5) * 1_000  # up to 4 s out of order
        temp = 20.0 + ((i * 37) % 50) * (1 if i % 3 else -1)
        out.append((s, temp, ts))
    return out


def readings_strategy() -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_seconds(5)
    ).with_timestamp_assigner(ReadingTime())


class TemperatureJumpAlert(KeyedProcessFunction):
    """Alert when two readings of a sensor within one minute differ by more than 20 degrees.

    A state machine with a timer: the state holds the last reading; an event-time
    timer one minute after it clears the state (the pair can no longer alert).
    Readings behind the watermark go to the ``late-readings`` side output.
    """

    def open(self, ctx: Any) -> None:
        self.last = ctx.get_state(ValueStateDescriptor("last", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        ts = ctx.timestamp()
        ts_service = ctx.timer_service()
        if ts <= ts_service.current_watermark():
            ctx.output(ALERTS_LATE, (value[0], ts))
            return
        prev = self.last.value()
        if prev is not None:
            p_temp, p_ts = prev
            if abs(value[1] - p_temp) > 20 and abs(ts - p_ts) <= MINUTE:
                yield ("ALERT", value[0], p_ts, ts, round(abs(value[1] - p_temp), 1))
            ts_service.delete_event_time_timer(p_ts + MINUTE)
        self.last.update((value[1], ts))
        ts_service.register_event_time_timer(ts + MINUTE)

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        prev = self.last.value()
        if prev is not None and prev[1] + MINUTE == timestamp:
            self.last.clear()
            yield ("EXPIRED", ctx.get_current_key(), timestamp, ctx.time_domain().name)


class TagOdd(ProcessFunction):
    """Even numbers to the main output; odd ones to ``odd`` (ctx.output) and multiples of 5
    also to ``five`` (PyFlink's yielded (tag, value) form)."""

    ODD = OutputTag("odd")
    FIVE = OutputTag("five", Types.LONG())

    def process_element(self, value: Any, ctx: Any) -> Any:
        if value % 2:
            ctx.output(self.ODD, value)
        else:
            yield value
        if value % 5 == 0:
            yield self.FIVE, value
