"""Timer services handed to user functions (``ctx.timer_service()``).

``QueryOnlyTimerService`` serves non-keyed process functions: they may query
time but, as in Flink, not set timers. Keyed operators use
:class:`KeyedTimerService`, a view of the operator's
:class:`~streamstate.runtime.timers.InternalTimerService` scoped to the current key.
"""

from __future__ import annotations

from typing import Any

from streamstate.datastream.timerservice import TimerService
from streamstate.runtime.errors import StateAccessError, TimestampError

__all__ = ["KeyedTimerService", "QueryOnlyTimerService"]

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
        self.internal.register_processing_time_timer(None, _ts(timestamp))

    def register_event_time_timer(self, timestamp: int) -> None:
        self.internal.register_event_time_timer(None, _ts(timestamp))

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
