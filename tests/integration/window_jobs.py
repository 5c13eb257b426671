"""Window jobs shared by the local (in-process) tests and the Spark integration tests.

Every job is deterministic for a given epoch size, so a run with an injected failure
must produce exactly the failure-free run's output (compared as multisets).
"""

from __future__ import annotations

from typing import Any

from streamstate.common import Duration, TimestampAssigner, WatermarkStrategy
from streamstate.datastream import OutputTag, ProcessWindowFunction, WindowFunction
from streamstate.datastream.window import EventTimeSessionWindows, TumblingEventTimeWindows

LATE = OutputTag("late-events")
WINDOW_MS = 10_000
LATENESS_MS = 3_000


class EventTime(TimestampAssigner):
    """Events are ``(key, timestamp_ms, value)``."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[1])


def strategy(bound_ms: int = 2_000) -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(bound_ms)
    ).with_timestamp_assigner(EventTime())


def out_of_order_events(n: int, keys: int = 3) -> list[tuple[str, int, int]]:
    """Events ~200 ms apart, up to 1.5 s out of order; every 23rd is 15 s late (some of
    those land within the allowed lateness and re-fire their window, the others are too
    late and go to the side output)."""
    out = []
    for i in range(n):
        ts = 10_000 + i * 200 + ((i * 37) % 8) * 200 - 1_500
        if i % 23 == 22:
            ts -= 15_000
        out.append((f"k{(i * 5) % keys}", ts, i))
    return out


class KeyWindowCount(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        for count in inputs:
            yield key, window.start, count


def tumbling_count(ds: Any) -> tuple[Any, Any]:
    """(key, window start, count) per firing, plus the late-event side output."""
    counted = (
        ds.key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(Duration.of_millis(WINDOW_MS)))
        .allowed_lateness(LATENESS_MS)
        .side_output_late_data(LATE)
        .aggregate(_Count(), KeyWindowCount())
        .uid("tumbling-count")
    )
    return counted, counted.get_side_output(LATE)


class _Count:
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b


def session_events() -> list[tuple[str, int, int]]:
    """Per key, bursts of events with 1 s spacing separated by gaps; the arrival order
    is shuffled within 4 s, so sessions first appear split and later merge (an event
    arriving late bridges two partial sessions)."""
    base: list[tuple[str, int, int]] = []
    n = 0
    for k in range(4):
        t = 5_000 + k * 700
        for burst in range(5):
            for _ in range(3 + (burst + k) % 4):
                base.append((f"u{k}", t, n))
                n += 1
                t += 1_000 + (n % 3) * 400
            t += 9_000 + ((burst * 3 + k) % 4) * 1_000
    base.sort(key=lambda e: e[1])
    # shuffle within blocks of 4 events: deterministic, bounded disorder
    out = []
    for i in range(0, len(base), 4):
        block = base[i : i + 4]
        out.extend(block[::-1] if (i // 4) % 2 else block)
    return out


class SessionSummary(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        w = context.window()
        yield key, w.start, w.end, sorted(e[2] for e in elements)


def sessions(ds: Any, gap_ms: int = 3_000) -> Any:
    return (
        ds.key_by(lambda e: e[0])
        .window(EventTimeSessionWindows.with_gap(Duration.of_millis(gap_ms)))
        .process(SessionSummary())
        .uid("sessions")
    )


def count_windows(ds: Any) -> Any:
    """Per key, the sum of every 4 values (tumbling count windows)."""
    return (
        ds.key_by(lambda e: e[0])
        .count_window(4)
        .reduce(lambda a, b: (a[0], max(a[1], b[1]), a[2] + b[2]))
        .uid("count-windows")
    )
