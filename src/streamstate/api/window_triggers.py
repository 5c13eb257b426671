"""The built-in triggers (public via ``streamstate.api.window``), as PyFlink's."""

from __future__ import annotations

import operator
from typing import Any

from streamstate.api.functions import ReduceFunction
from streamstate.api.state import ReducingStateDescriptor
from streamstate.api.window_base import (
    CountWindow,
    GlobalWindow,
    TimeWindow,
    Trigger,
    TriggerResult,
    Window,
    to_milliseconds,
)
from streamstate.common.typeinfo import Types

__all__ = [
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "CountTrigger",
    "EventTimeTrigger",
    "NeverTrigger",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
]


class Min(ReduceFunction):
    def reduce(self, value1: Any, value2: Any) -> Any:
        return min(value1, value2)


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the end of the window."""

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # late but within allowed lateness: fire at once
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(
        self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(
        self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Trigger.OnMergeContext) -> None:
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())

    @staticmethod
    def create() -> EventTimeTrigger:
        return EventTimeTrigger()

    def __repr__(self) -> str:
        return "EventTimeTrigger()"


class ProcessingTimeTrigger(Trigger):
    """Fires once processing time passes the end of the window."""

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(
        self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return TriggerResult.FIRE

    def on_event_time(
        self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Trigger.OnMergeContext) -> None:
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())

    @staticmethod
    def create() -> ProcessingTimeTrigger:
        return ProcessingTimeTrigger()

    def __repr__(self) -> str:
        return "ProcessingTimeTrigger()"


class _ContinuousTrigger(Trigger):
    """Shared logic: fire every ``interval`` ms, next fire time kept in "fire-time" state."""

    def __init__(self, interval: Any) -> None:
        self.interval = to_milliseconds(interval, "interval")
        if self.interval <= 0:
            raise ValueError(f"the interval of {type(self).__name__} must be > 0 ms")
        self.state_desc = ReducingStateDescriptor("fire-time", Min(), Types.LONG())

    def _register(self, time: int, ctx: Trigger.TriggerContext) -> None:
        raise NotImplementedError

    def _delete(self, time: int, ctx: Trigger.TriggerContext) -> None:
        raise NotImplementedError

    def register_next_fire_timestamp(
        self,
        time: int,
        window: TimeWindow,
        ctx: Trigger.TriggerContext,
        fire_timestamp_state: Any,
    ) -> None:
        nxt = min(time + self.interval, window.max_timestamp())
        fire_timestamp_state.add(nxt)
        self._register(nxt, ctx)

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Trigger.OnMergeContext) -> None:
        ctx.merge_partitioned_state(self.state_desc)
        nxt = ctx.get_partitioned_state(self.state_desc).get()  # type: ignore[attr-defined]  # trigger contexts of the window operator have it
        if nxt is not None:
            self._register(nxt, ctx)

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        state: Any = ctx.get_partitioned_state(self.state_desc)
        ts = state.get()
        if ts is not None:
            self._delete(ts, ctx)
            state.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.interval})"


class ContinuousEventTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of event time, and at the end of the window."""

    @staticmethod
    def of(interval: Any) -> ContinuousEventTimeTrigger:
        return ContinuousEventTimeTrigger(interval)

    def _register(self, time: int, ctx: Trigger.TriggerContext) -> None:
        ctx.register_event_time_timer(time)

    def _delete(self, time: int, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_event_time_timer(time)

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        state: Any = ctx.get_partitioned_state(self.state_desc)
        if state.get() is None:
            self.register_next_fire_timestamp(
                timestamp - (timestamp % self.interval), window, ctx, state
            )
        return TriggerResult.CONTINUE

    def on_processing_time(
        self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(
        self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        state: Any = ctx.get_partitioned_state(self.state_desc)
        fire_ts = state.get()
        if fire_ts is not None and fire_ts == time:
            state.clear()
            self.register_next_fire_timestamp(time, window, ctx, state)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE


class ContinuousProcessingTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of processing time."""

    @staticmethod
    def of(interval: Any) -> ContinuousProcessingTimeTrigger:
        return ContinuousProcessingTimeTrigger(interval)

    def _register(self, time: int, ctx: Trigger.TriggerContext) -> None:
        ctx.register_processing_time_timer(time)

    def _delete(self, time: int, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_processing_time_timer(time)

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        state: Any = ctx.get_partitioned_state(self.state_desc)
        now = ctx.get_current_processing_time()
        if state.get() is None:
            self.register_next_fire_timestamp(now - (now % self.interval), window, ctx, state)
        return TriggerResult.CONTINUE

    def on_processing_time(
        self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        state: Any = ctx.get_partitioned_state(self.state_desc)
        if state.get() == time:
            state.clear()
            self.register_next_fire_timestamp(time, window, ctx, state)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_event_time(
        self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE


class PurgingTrigger(Trigger):
    """Turns any trigger into a purging one: FIRE becomes FIRE_AND_PURGE."""

    def __init__(self, nested_trigger: Trigger) -> None:
        self.nested_trigger = nested_trigger

    @staticmethod
    def of(nested_trigger: Trigger) -> PurgingTrigger:
        return PurgingTrigger(nested_trigger)

    @staticmethod
    def _purging(r: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if r.is_fire() else r

    def on_element(
        self, element: Any, timestamp: int, window: Window, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return self._purging(self.nested_trigger.on_element(element, timestamp, window, ctx))

    def on_event_time(
        self, time: int, window: Window, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return self._purging(self.nested_trigger.on_event_time(time, window, ctx))

    def on_processing_time(
        self, time: int, window: Window, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return self._purging(self.nested_trigger.on_processing_time(time, window, ctx))

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        self.nested_trigger.clear(window, ctx)

    def can_merge(self) -> bool:
        return self.nested_trigger.can_merge()

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        self.nested_trigger.on_merge(window, ctx)

    def __repr__(self) -> str:
        return f"PurgingTrigger({self.nested_trigger!r})"


class CountTrigger(Trigger):
    """Fires once the pane holds ``window_size`` elements (count kept in "count" state)."""

    def __init__(self, window_size: int) -> None:
        if window_size <= 0:
            raise ValueError(f"CountTrigger needs a count > 0, got {window_size}")
        self._window_size = window_size
        self._count_state_descriptor = ReducingStateDescriptor("count", operator.add, Types.LONG())

    @staticmethod
    def of(window_size: int) -> CountTrigger:
        return CountTrigger(window_size)

    def on_element(
        self, element: Any, timestamp: int, window: CountWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        count: Any = ctx.get_partitioned_state(self._count_state_descriptor)
        count.add(1)
        if count.get() >= self._window_size:
            count.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_processing_time(
        self, time: int, window: CountWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(
        self, time: int, window: CountWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: CountWindow, ctx: Trigger.OnMergeContext) -> None:
        ctx.merge_partitioned_state(self._count_state_descriptor)

    def clear(self, window: CountWindow, ctx: Trigger.TriggerContext) -> None:
        ctx.get_partitioned_state(self._count_state_descriptor).clear()

    def __repr__(self) -> str:
        return f"CountTrigger({self._window_size})"


class NeverTrigger(Trigger):
    """Never fires: the default trigger of :class:`GlobalWindows`."""

    def on_element(
        self, element: Any, timestamp: int, window: GlobalWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(
        self, time: int, window: GlobalWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(
        self, time: int, window: GlobalWindow, ctx: Trigger.TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: GlobalWindow, ctx: Trigger.OnMergeContext) -> None:
        pass

    def clear(self, window: GlobalWindow, ctx: Trigger.TriggerContext) -> None:
        pass

    def __repr__(self) -> str:
        return "NeverTrigger()"
