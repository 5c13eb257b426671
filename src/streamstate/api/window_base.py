"""Windows, trigger results and the trigger/assigner contracts (public via ``window``).

Kept apart from the concrete assigners and triggers so both can import these
without a cycle; ``streamstate.api.window`` re-exports everything, as
PyFlink's ``pyflink.datastream.window`` holds it in one module.
"""

from __future__ import annotations

import datetime as _dt
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from enum import Enum
from typing import Any, Generic, TypeVar

from streamstate.api.state import State, StateDescriptor

__all__ = [
    "MAX_LONG_VALUE",
    "MIN_LONG_VALUE",
    "CountWindow",
    "GlobalWindow",
    "MergingWindowAssigner",
    "SessionWindowTimeGapExtractor",
    "TimeWindow",
    "Trigger",
    "TriggerResult",
    "Window",
    "WindowAssigner",
    "to_milliseconds",
]

#: Java's Long.MAX_VALUE / Long.MIN_VALUE, as PyFlink's constants
MAX_LONG_VALUE = (1 << 63) - 1
MIN_LONG_VALUE = -(1 << 63)


def to_milliseconds(value: Any, what: str) -> int:
    """A duration as int milliseconds: ``Time``, ``Duration``, ``timedelta`` or int ms."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a Time, Duration, timedelta or int ms, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, _dt.timedelta):
        return value // _dt.timedelta(milliseconds=1)
    to_ms = getattr(value, "to_milliseconds", None)
    if callable(to_ms):
        return int(to_ms())
    raise TypeError(
        f"{what} must be a Time, Duration, timedelta or int milliseconds, got "
        f"{type(value).__name__} {value!r}"
    )


# Type parameters as PyFlink's (``Trigger[tuple, TimeWindow]``).
T = TypeVar("T")
W = TypeVar("W")
W2 = TypeVar("W2")


class Window(ABC):
    """A finite bucket of elements; ``max_timestamp()`` is the last time that belongs to it."""

    __slots__ = ()

    @abstractmethod
    def max_timestamp(self) -> int: ...


class TimeWindow(Window):
    """The interval ``[start, end)`` in milliseconds."""

    __slots__ = ("start", "end")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        """True if the windows overlap or touch (so sessions merge across a zero gap)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        """The smallest window holding both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        """Start of the window of ``timestamp`` for windows of ``window_size`` shifted by ``offset``."""
        return timestamp - (timestamp - offset + window_size) % window_size

    @staticmethod
    def merge_windows(windows: Iterable[TimeWindow], callback: Any) -> None:
        """Merge overlapping windows: ``callback.merge(to_be_merged, merge_result)`` per group."""
        merged: list[tuple[TimeWindow, list[TimeWindow]]] = []
        cur: TimeWindow | None = None
        cur_set: list[TimeWindow] = []
        for w in sorted(windows, key=lambda w: (w.start, w.end)):
            if cur is None:
                cur, cur_set = w, [w]
            elif cur.intersects(w):
                cur = cur.cover(w)
                cur_set.append(w)
            else:
                merged.append((cur, cur_set))
                cur, cur_set = w, [w]
        if cur is not None:
            merged.append((cur, cur_set))
        for result, group in merged:
            if len(group) > 1:
                callback.merge(group, result)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is TimeWindow
            and self.start == other.start  # type: ignore[attr-defined]  # type(other) was checked on the line above
            and self.end == other.end  # type: ignore[attr-defined]  # type(other) was checked on the line above
        )

    def __hash__(self) -> int:
        # deterministic across processes (windows are namespaces of keyed state)
        return (self.start * 1_000_003) ^ self.end

    def __lt__(self, other: TimeWindow) -> bool:
        if not isinstance(other, TimeWindow):
            return NotImplemented
        return (self.start, self.end) < (other.start, other.end)

    def __le__(self, other: TimeWindow) -> bool:
        if not isinstance(other, TimeWindow):
            return NotImplemented
        return (self.start, self.end) <= (other.start, other.end)

    def __reduce__(self) -> tuple[Any, ...]:
        return (TimeWindow, (self.start, self.end))

    def __repr__(self) -> str:
        return f"TimeWindow(start={self.start}, end={self.end})"


class CountWindow(Window):
    """A count window, identified by its sequence number ``id`` within its key."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:  # PyFlink's parameter name
        self.id = id

    def max_timestamp(self) -> int:
        return MAX_LONG_VALUE

    def __eq__(self, other: object) -> bool:
        return type(other) is CountWindow and self.id == other.id  # type: ignore[attr-defined]  # type(other) was checked on the line above

    def __hash__(self) -> int:
        return self.id * 0x9E3779B1

    def __reduce__(self) -> tuple[Any, ...]:
        return (CountWindow, (self.id,))

    def __repr__(self) -> str:
        return f"CountWindow(id={self.id})"


class GlobalWindow(Window):
    """The single window of :class:`GlobalWindows` (all instances are equal)."""

    __slots__ = ()

    @staticmethod
    def get() -> GlobalWindow:
        return _GLOBAL_WINDOW

    def max_timestamp(self) -> int:
        return MAX_LONG_VALUE

    def __eq__(self, other: object) -> bool:
        return type(other) is GlobalWindow

    def __hash__(self) -> int:
        return 0

    def __reduce__(self) -> tuple[Any, ...]:
        return (GlobalWindow, ())

    def __repr__(self) -> str:
        return "GlobalWindow"


_GLOBAL_WINDOW = GlobalWindow()


class TriggerResult(Enum):
    """What a trigger decides for a pane: ``(fire, purge)``."""

    CONTINUE = (False, False)
    FIRE_AND_PURGE = (True, True)
    FIRE = (True, False)
    PURGE = (False, True)

    def is_fire(self) -> bool:
        return bool(self.value[0])

    def is_purge(self) -> bool:
        return bool(self.value[1])


class Trigger(ABC, Generic[T, W]):
    """Decides when a pane (the elements of one key and window) is evaluated or purged.

    Triggers keep no state in attributes (one instance serves every key and
    window); they use ``ctx.get_partitioned_state`` (scoped to key and window)
    and timers registered through ``ctx``.
    """

    class TriggerContext(ABC):
        """Timers, time and window-scoped state for trigger methods."""

        @abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abstractmethod
        def get_metric_group(self) -> Any: ...

        @abstractmethod
        def get_current_watermark(self) -> int: ...

        @abstractmethod
        def register_processing_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def register_event_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def delete_processing_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def delete_event_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def get_partitioned_state(self, state_descriptor: StateDescriptor) -> State: ...

    class OnMergeContext(TriggerContext):
        """The context of :meth:`Trigger.on_merge`."""

        @abstractmethod
        def merge_partitioned_state(self, state_descriptor: StateDescriptor) -> None: ...

    @abstractmethod
    def on_element(
        self, element: Any, timestamp: int, window: Any, ctx: Trigger.TriggerContext
    ) -> TriggerResult: ...

    @abstractmethod
    def on_processing_time(
        self, time: int, window: Any, ctx: Trigger.TriggerContext
    ) -> TriggerResult: ...

    @abstractmethod
    def on_event_time(
        self, time: int, window: Any, ctx: Trigger.TriggerContext
    ) -> TriggerResult: ...

    def can_merge(self) -> bool:
        """True if :meth:`on_merge` is implemented (needed by merging assigners)."""
        return False

    def on_merge(self, window: Any, ctx: Trigger.OnMergeContext) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support merging windows")

    @abstractmethod
    def clear(self, window: Any, ctx: Trigger.TriggerContext) -> None:
        """Delete the trigger's timers and state of ``window`` (called when it is purged)."""


class WindowAssigner(ABC, Generic[T, W]):
    """Assigns zero or more windows to every element."""

    class WindowAssignerContext(ABC):
        @abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abstractmethod
        def get_runtime_context(self) -> Any: ...

    @abstractmethod
    def assign_windows(
        self, element: Any, timestamp: int, context: WindowAssigner.WindowAssignerContext
    ) -> Collection[Any]: ...

    @abstractmethod
    def get_default_trigger(self, env: Any) -> Trigger: ...

    def get_window_serializer(self) -> Any:
        """Windows are namespaces of keyed state; the backend's namespace serializer writes them."""
        return None

    @abstractmethod
    def is_event_time(self) -> bool: ...


class MergingWindowAssigner(WindowAssigner[T, W]):
    """An assigner whose windows can merge (sessions)."""

    class MergeCallback(ABC, Generic[W2]):
        @abstractmethod
        def merge(self, to_be_merged: Iterable[Any], merge_result: Any) -> None: ...

    @abstractmethod
    def merge_windows(
        self, windows: Iterable[Any], callback: MergingWindowAssigner.MergeCallback
    ) -> None: ...


class SessionWindowTimeGapExtractor(ABC):
    """Extracts the session gap (ms) of an element, for dynamic-gap session windows."""

    @abstractmethod
    def extract(self, element: Any) -> int: ...
