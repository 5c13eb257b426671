"""A user-defined ``WindowAssigner`` and window functions (the API shape of the
windows page's "Window Assigners" and "Window Functions" sections, our words): the
typing generics ``WindowAssigner[...]``, ``Trigger[...]``, ``TypeSerializer[...]``,
``ProcessWindowFunction[...]``, ``WindowFunction[...]`` are subscripted as in PyFlink."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from streamstate.common.serializer import TypeSerializer
from streamstate.datastream import ProcessWindowFunction, Trigger, WindowAssigner, WindowFunction
from streamstate.datastream.window import EventTimeTrigger, TimeWindow, TimeWindowSerializer


class FixedBuckets(WindowAssigner[tuple, TimeWindow]):
    """Tumbling ``size``-ms buckets shifted by ``offset``; ``event_time`` is what
    ``is_event_time()`` answers (the trigger is event-time either way)."""

    def __init__(self, size: int, offset: int, event_time: bool) -> None:
        self.size, self.offset, self.event_time = size, offset, event_time

    def assign_windows(
        self, element: tuple, timestamp: int, context: WindowAssigner.WindowAssignerContext
    ) -> Collection[TimeWindow]:
        first = TimeWindow.get_window_start_with_offset(timestamp, self.offset, self.size)
        return [TimeWindow(first, first + self.size)]

    def get_default_trigger(self, env: Any) -> Trigger[tuple, TimeWindow]:
        return EventTimeTrigger()

    def get_window_serializer(self) -> TypeSerializer[TimeWindow]:
        return TimeWindowSerializer()

    def is_event_time(self) -> bool:
        return self.event_time


class TotalPerWindow(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    """``(key, sum of the elements' first fields)`` through the process interface."""

    def process(
        self, key: str, context: ProcessWindowFunction.Context, elements: Iterable[tuple]
    ) -> Iterable[tuple]:
        return [(key, sum(e[0] for e in elements))]

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        return None


class TotalPerWindowApply(WindowFunction[tuple, tuple, str, TimeWindow]):
    """The same total through the ``apply`` interface."""

    def apply(self, key: str, window: TimeWindow, inputs: Iterable[tuple]) -> Iterable[tuple]:
        return [(key, sum(e[0] for e in inputs))]
