"""Timer services handed to user functions (``ctx.timer_service()``).

``QueryOnlyTimerService`` serves non-keyed process functions: they may query
time but, as in Flink, not set timers. Keyed operators use
:class:`KeyedTimerService`, a view of the operator's
:class:`~streamstate.runtime.timers.InternalTimerService` scoped to the current key.
"""

from __future__ import annotations

from typing import Any

from streamstate.api.co_functions import KeyedBroadcastProcessFunction, KeyedCoProcessFunction
from streamstate.api.functions import KeyedProcessFunction
from streamstate.api.timerservice import TimerService
from streamstate.errors import StateAccessError, TimestampError
from streamstate.runtime.operators.outputs import outputs_not_iterable, split_yielded_side_outputs

__all__ = [
    "KeyedTimerService",
    "KeyedTimersMixin",
    "QueryOnlyTimerService",
]

_NOT_KEYED = (
    "Setting timers is only supported on a keyed stream: apply the process function to a "
    "stream returned by key_by() (operator {op!r})"
)


class QueryOnlyTimerService(TimerService):
    __slots__ = ("ctx",)

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def current_processing_time(self) -> int:
        return int(self.ctx.processing_time)

    def current_watermark(self) -> int:
        return int(self.ctx.current_watermark)

    def register_processing_time_timer(self, timestamp: int) -> None:
        raise StateAccessError(_NOT_KEYED.format(op=self.ctx.task_name))

    def register_event_time_timer(self, timestamp: int) -> None:
        raise StateAccessError(_NOT_KEYED.format(op=self.ctx.task_name))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        raise StateAccessError(_NOT_KEYED.format(op=self.ctx.task_name))

    def delete_event_time_timer(self, timestamp: int) -> None:
        raise StateAccessError(_NOT_KEYED.format(op=self.ctx.task_name))


class KeyedTimerService(QueryOnlyTimerService):
    """Timers of the current key in namespace ``VoidNamespace`` (None), as Flink's
    KeyedProcessOperator registers them."""

    __slots__ = ("internal",)

    def __init__(self, ctx: Any, internal: Any) -> None:
        super().__init__(ctx)
        self.internal = internal

    def register_processing_time_timer(self, timestamp: int) -> None:
        self.internal.register_processing_time_timer(
            None, timestamp if type(timestamp) is int else _ts(timestamp)
        )

    def register_event_time_timer(self, timestamp: int) -> None:
        # the hot call of timer-heavy functions: the type check inline, the helper on misses
        self.internal.register_event_time_timer(
            None, timestamp if type(timestamp) is int else _ts(timestamp)
        )

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self.internal.delete_processing_time_timer(None, _ts(timestamp))

    def delete_event_time_timer(self, timestamp: int) -> None:
        self.internal.delete_event_time_timer(None, _ts(timestamp))


def _ts(timestamp: Any) -> int:
    if type(timestamp) is not int:
        if isinstance(timestamp, int) and not isinstance(timestamp, bool):
            return int(timestamp)
        raise TimestampError(
            f"timer timestamps are int milliseconds, got {type(timestamp).__name__} {timestamp!r}"
        )
    return timestamp


#: the API's no-op ``on_timer`` defaults: a function that keeps one of them has no timers
_DEFAULT_ON_TIMERS = frozenset(
    {
        KeyedProcessFunction.on_timer,
        KeyedCoProcessFunction.on_timer,
        KeyedBroadcastProcessFunction.on_timer,
    }
)


def overrides_on_timer(fn: Any) -> bool:
    """True when ``fn``'s class defines its own ``on_timer`` (not the API's no-op default)."""
    on_timer = getattr(type(fn), "on_timer", None)
    return on_timer is not None and on_timer not in _DEFAULT_ON_TIMERS


class KeyedTimersMixin:
    """Timers of a keyed operator whose function has ``on_timer`` (KeyedProcessFunction,
    KeyedCoProcessFunction, KeyedBroadcastProcessFunction).

    Mix in before the operator base. The operator calls :meth:`open_timers` in
    ``open()`` and provides :meth:`on_timer_context` (an ``OnTimerContext`` with a
    writable ``ts``). The timer service (``InternalTimerService.for_operator(ctx,
    "user-timers")``) is created in ``open()`` when the function overrides
    ``on_timer`` (so restored timers fire), else on first use. Fired timers call
    ``fn.on_timer(timestamp, ctx)`` with the key set; outputs carry the timer's
    timestamp; side outputs are routed as for records.
    """

    ctx: Any
    fn: Any
    side_tags: frozenset[str]
    hook_timestamps: list[Any] | None
    _internal: Any = None
    _timer_view: Any = None

    def open_timers(self) -> None:
        if overrides_on_timer(self.fn):
            self._internal_timers()

    def _internal_timers(self) -> Any:
        if self._internal is None:
            from streamstate.runtime.timers import InternalTimerService

            self._internal = InternalTimerService.for_operator(self.ctx, "user-timers")
        return self._internal

    def timer_service(self) -> Any:
        if self._timer_view is None:
            self._timer_view = KeyedTimerService(self.ctx, self._internal_timers())
        return self._timer_view

    def on_timer_context(self, event_time: bool) -> Any:
        raise NotImplementedError

    def process_watermark(self, watermark_ms: int) -> list[Any]:
        if self._internal is None:
            return []
        return self._fire(self._internal.advance_watermark(watermark_ms), True)

    def on_processing_time(self, now_ms: int) -> list[Any]:
        if self._internal is None:
            return []
        return self._fire(self._internal.advance_processing_time(now_ms), False)

    def _fire(self, timers: Any, event_time: bool) -> list[Any]:
        on_timer = getattr(self.fn, "on_timer", None)
        set_key = self.ctx.keyed_backend.set_current_key
        tctx = self.on_timer_context(event_time)
        out: list[Any] = []
        out_ts: list[Any] = []
        for timer in timers:  # lazy: timers registered by on_timer that are due fire too
            set_key(timer.key, timer.key_group)
            tctx.ts = timer.timestamp
            r = on_timer(timer.timestamp, tctx) if on_timer is not None else None
            if r is not None:
                n = len(out)
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
                out_ts.extend([timer.timestamp] * (len(out) - n))
        if self.side_tags and out:
            out, out_ts = split_yielded_side_outputs(self, out, out_ts)  # type: ignore[arg-type]  # out_ts is a list whenever the operator emits side outputs
        self.hook_timestamps = out_ts
        return out
