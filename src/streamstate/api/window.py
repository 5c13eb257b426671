"""Windows, window assigners and triggers, mirroring ``pyflink.datastream.window``.

Durations are accepted as ``Time``, ``Duration``, ``datetime.timedelta`` or int
milliseconds. PyFlink has no evictors, so neither does this module.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from typing import Any, Self

from streamstate.api.state import ValueStateDescriptor
from streamstate.api.window_base import (
    MIN_LONG_VALUE,
    CountWindow,
    GlobalWindow,
    MergingWindowAssigner,
    SessionWindowTimeGapExtractor,
    TimeWindow,
    Trigger,
    TriggerResult,
    Window,
    WindowAssigner,
    to_milliseconds,
)
from streamstate.api.window_triggers import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
)
from streamstate.common.typeinfo import Types
from streamstate.errors import ConfigurationError, TimestampError

__all__ = [
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "CountSlidingWindowAssigner",
    "CountTrigger",
    "CountTumblingWindowAssigner",
    "CountWindow",
    "DynamicEventTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "GlobalWindow",
    "GlobalWindows",
    "MergingWindowAssigner",
    "NeverTrigger",
    "ProcessingTimeSessionWindows",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "SessionWindowTimeGapExtractor",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "TimeWindow",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "Window",
    "WindowAssigner",
]

_NO_TIMESTAMP = (
    "{assigner}: a record has no timestamp. Event-time windows need timestamps: call "
    "data_stream.assign_timestamps_and_watermarks(WatermarkStrategy...with_timestamp_assigner(...)) "
    "before key_by(), or use a processing-time assigner."
)


def _event_timestamp(assigner: WindowAssigner, timestamp: Any) -> int:
    if timestamp is None or timestamp <= MIN_LONG_VALUE:
        raise TimestampError(_NO_TIMESTAMP.format(assigner=assigner))
    return int(timestamp)


def _check_size(cls: str, size: int, slide: int | None, offset: int) -> None:
    if size <= 0:
        raise ConfigurationError(f"{cls}: the window size must be > 0 ms, got {size}")
    step = size if slide is None else slide
    if slide is not None and slide <= 0:
        raise ConfigurationError(f"{cls}: the slide must be > 0 ms, got {slide}")
    if abs(offset) >= step:
        what = "size" if slide is None else "slide"
        raise ConfigurationError(
            f"{cls} parameters must satisfy abs(offset) < {what}: offset {offset}, {what} {step}"
        )


# ---------------------------------------------------------------------- tumbling


class TumblingEventTimeWindows(WindowAssigner):
    """Non-overlapping windows of ``size`` by element timestamp, shifted by ``offset``."""

    def __init__(self, size: int, offset: int = 0) -> None:
        _check_size("TumblingEventTimeWindows", size, None, offset)
        self._size = size
        self._offset = offset
        self._last: TimeWindow | None = None

    @staticmethod
    def of(size: Any, offset: Any = None) -> TumblingEventTimeWindows:
        off = 0 if offset is None else to_milliseconds(offset, "offset")
        return TumblingEventTimeWindows(to_milliseconds(size, "size"), off)

    def assign_windows(
        self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext
    ) -> Collection[TimeWindow]:
        ts = _event_timestamp(self, timestamp)
        start = ts - (ts - self._offset + self._size) % self._size
        last = self._last
        if last is not None and last.start == start:
            return (last,)  # the same object again: cheaper dict lookups downstream
        w = self._last = TimeWindow(start, start + self._size)
        return (w,)

    def get_default_trigger(self, env: Any) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True

    def __getstate__(self) -> dict[str, Any]:
        return {"_size": self._size, "_offset": self._offset, "_last": None}

    def __repr__(self) -> str:
        return f"TumblingEventTimeWindows({self._size}, {self._offset})"


class TumblingProcessingTimeWindows(WindowAssigner):
    """Non-overlapping windows of ``size`` by the operator's processing time."""

    def __init__(self, size: int, offset: int = 0) -> None:
        _check_size("TumblingProcessingTimeWindows", size, None, offset)
        self._size = size
        self._offset = offset

    @staticmethod
    def of(size: Any, offset: Any = None) -> TumblingProcessingTimeWindows:
        off = 0 if offset is None else to_milliseconds(offset, "offset")
        return TumblingProcessingTimeWindows(to_milliseconds(size, "size"), off)

    def assign_windows(
        self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext
    ) -> Collection[TimeWindow]:
        now = context.get_current_processing_time()
        start = TimeWindow.get_window_start_with_offset(now, self._offset, self._size)
        return [TimeWindow(start, start + self._size)]

    def get_default_trigger(self, env: Any) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"TumblingProcessingTimeWindows({self._size}, {self._offset})"


# ---------------------------------------------------------------------- sliding


class _Sliding(WindowAssigner):
    #: event time (element timestamps) or processing time
    event_time = True

    def __init__(self, size: int, slide: int, offset: int = 0) -> None:
        _check_size(type(self).__name__, size, slide, offset)
        self._size = size
        self._slide = slide
        self._offset = offset
        self._pane_size = math.gcd(size, slide)

    @classmethod
    def of(cls, size: Any, slide: Any, offset: Any = None) -> Self:
        off = 0 if offset is None else to_milliseconds(offset, "offset")
        return cls(to_milliseconds(size, "size"), to_milliseconds(slide, "slide"), off)

    def _windows(self, ts: int) -> list[TimeWindow]:
        last_start = TimeWindow.get_window_start_with_offset(ts, self._offset, self._slide)
        return [
            TimeWindow(start, start + self._size)
            for start in range(last_start, ts - self._size, -self._slide)
        ]

    def get_default_trigger(self, env: Any) -> Trigger:
        return EventTimeTrigger() if self.event_time else ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return self.event_time

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._size}, {self._slide}, {self._offset})"


class SlidingEventTimeWindows(_Sliding):
    """Windows of ``size`` every ``slide`` by element timestamp (an element is in several)."""

    def assign_windows(
        self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext
    ) -> Collection[TimeWindow]:
        return self._windows(_event_timestamp(self, timestamp))


class SlidingProcessingTimeWindows(_Sliding):
    """Windows of ``size`` every ``slide`` by processing time."""

    event_time = False

    def assign_windows(
        self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext
    ) -> Collection[TimeWindow]:
        return self._windows(context.get_current_processing_time())


# ---------------------------------------------------------------------- sessions


class _Sessions(MergingWindowAssigner):
    event_time = True

    def __init__(self, session_gap: int) -> None:
        if session_gap <= 0:
            raise ConfigurationError(
                f"{type(self).__name__} parameters must satisfy 0 < gap, got {session_gap} ms"
            )
        self._session_gap = session_gap

    def _time(self, timestamp: Any, context: WindowAssigner.WindowAssignerContext) -> int:
        if self.event_time:
            return _event_timestamp(self, timestamp)
        return context.get_current_processing_time()

    def _gap(self, element: Any) -> int:
        return self._session_gap

    def assign_windows(
        self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext
    ) -> Collection[TimeWindow]:
        t = self._time(timestamp, context)
        return [TimeWindow(t, t + self._gap(element))]

    def merge_windows(
        self, windows: Iterable[TimeWindow], callback: MergingWindowAssigner.MergeCallback
    ) -> None:
        TimeWindow.merge_windows(windows, callback)

    def get_default_trigger(self, env: Any) -> Trigger:
        return EventTimeTrigger() if self.event_time else ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return self.event_time

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._session_gap})"


class _DynamicGap:
    _extractor: Any

    def _gap(self, element: Any) -> int:
        ex = self._extractor
        gap = ex.extract(element) if hasattr(ex, "extract") else ex(element)
        gap = to_milliseconds(gap, "the extracted session gap")
        if gap <= 0:
            raise ConfigurationError(
                f"Dynamic session time gap must satisfy 0 < gap: the extractor returned {gap} "
                f"for {element!r}"
            )
        return gap


class EventTimeSessionWindows(_Sessions):
    """Sessions by element timestamp: windows closer than ``gap`` merge."""

    @staticmethod
    def with_gap(size: Any) -> EventTimeSessionWindows:
        return EventTimeSessionWindows(to_milliseconds(size, "session gap"))

    @staticmethod
    def with_dynamic_gap(
        extractor: SessionWindowTimeGapExtractor,
    ) -> DynamicEventTimeSessionWindows:
        return DynamicEventTimeSessionWindows(extractor)


class ProcessingTimeSessionWindows(_Sessions):
    """Sessions by processing time."""

    event_time = False

    @staticmethod
    def with_gap(size: Any) -> ProcessingTimeSessionWindows:
        return ProcessingTimeSessionWindows(to_milliseconds(size, "session gap"))

    @staticmethod
    def with_dynamic_gap(
        extractor: SessionWindowTimeGapExtractor,
    ) -> DynamicProcessingTimeSessionWindows:
        return DynamicProcessingTimeSessionWindows(extractor)


class DynamicEventTimeSessionWindows(_DynamicGap, _Sessions):
    """Event-time sessions whose gap ``extractor.extract(element)`` computes per element."""

    def __init__(self, session_window_time_gap_extractor: Any) -> None:
        self._session_gap = 0
        self._extractor = session_window_time_gap_extractor

    @staticmethod
    def with_dynamic_gap(
        extractor: SessionWindowTimeGapExtractor,
    ) -> DynamicEventTimeSessionWindows:
        return DynamicEventTimeSessionWindows(extractor)


class DynamicProcessingTimeSessionWindows(_DynamicGap, _Sessions):
    """Processing-time sessions with a per-element gap."""

    event_time = False

    def __init__(self, session_window_time_gap_extractor: Any) -> None:
        self._session_gap = 0
        self._extractor = session_window_time_gap_extractor

    @staticmethod
    def with_dynamic_gap(
        extractor: SessionWindowTimeGapExtractor,
    ) -> DynamicProcessingTimeSessionWindows:
        return DynamicProcessingTimeSessionWindows(extractor)


# ---------------------------------------------------------------------- count / global


class CountTumblingWindowAssigner(WindowAssigner):
    """Windows of ``window_size`` elements per key (the count lives in keyed state)."""

    def __init__(self, window_size: int) -> None:
        if window_size <= 0:
            raise ConfigurationError(f"a count window needs a size > 0, got {window_size}")
        self._window_size = window_size
        self._count_descriptor = ValueStateDescriptor("tumble-count-assigner", Types.LONG())

    @staticmethod
    def of(window_size: int) -> CountTumblingWindowAssigner:
        return CountTumblingWindowAssigner(window_size)

    def assign_windows(
        self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext
    ) -> Collection[CountWindow]:
        state = context.get_runtime_context().get_state(self._count_descriptor)
        current = state.value() or 0
        state.update(current + 1)
        return [CountWindow(current // self._window_size)]

    def get_default_trigger(self, env: Any) -> Trigger:
        return CountTrigger(self._window_size)

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"CountTumblingWindowAssigner({self._window_size})"


class CountSlidingWindowAssigner(WindowAssigner):
    """Windows of ``window_size`` elements every ``window_slide`` elements, per key."""

    def __init__(self, window_size: int, window_slide: int) -> None:
        if window_size <= 0 or window_slide <= 0:
            raise ConfigurationError(
                f"a sliding count window needs size > 0 and slide > 0, got {window_size}, "
                f"{window_slide}"
            )
        self._window_size = window_size
        self._window_slide = window_slide
        self._count_descriptor = ValueStateDescriptor("slide-count-assigner", Types.LONG())

    @staticmethod
    def of(window_size: int, window_slide: int) -> CountSlidingWindowAssigner:
        return CountSlidingWindowAssigner(window_size, window_slide)

    def assign_windows(
        self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext
    ) -> Collection[CountWindow]:
        state = context.get_runtime_context().get_state(self._count_descriptor)
        current = state.value() or 0
        state.update(current + 1)
        last_id = current // self._window_slide
        last_start = last_id * self._window_slide
        last_end = last_start + self._window_size - 1
        windows = []
        while last_id >= 0 and last_start <= current <= last_end:
            windows.append(CountWindow(last_id))
            last_id -= 1
            last_start -= self._window_slide
            last_end -= self._window_slide
        return windows

    def get_default_trigger(self, env: Any) -> Trigger:
        return CountTrigger(self._window_size)

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"CountSlidingWindowAssigner({self._window_size}, {self._window_slide})"


class GlobalWindows(WindowAssigner):
    """Everything in one :class:`GlobalWindow`; fires only with a custom trigger."""

    def assign_windows(
        self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext
    ) -> Collection[GlobalWindow]:
        return (GlobalWindow.get(),)

    @staticmethod
    def create() -> GlobalWindows:
        return GlobalWindows()

    def get_default_trigger(self, env: Any) -> Trigger:
        return NeverTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "GlobalWindows()"
