"""PyFlink's internal forms of SQL date/time values (``TypeInformation.to_internal_type``):
a date is days since 1970-01-01, a time microseconds of the day, a timestamp microseconds
since the epoch (a naive one read in local time, as PyFlink's ``time.mktime``)."""

from __future__ import annotations

import calendar
import datetime as _dt
import time
from collections.abc import Callable
from typing import Any

__all__ = ["FROM_INTERNAL", "TO_INTERNAL"]

_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()


def _timestamp_to_micros(ts: _dt.datetime) -> int:
    seconds = (
        calendar.timegm(ts.utctimetuple()) if ts.tzinfo is not None else time.mktime(ts.timetuple())
    )
    return int(seconds) * 10**6 + ts.microsecond


def _time_to_micros(t: _dt.time) -> int:
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 10**6 + t.microsecond


def _micros_to_time(us: int) -> _dt.time:
    seconds, micros = divmod(us, 10**6)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return _dt.time(hours, minute, sec, micros)


def _micros_to_timestamp(us: int) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(us // 10**6).replace(microsecond=us % 10**6)


TO_INTERNAL: dict[str, Callable[[Any], Any]] = {
    "DATE": lambda d: d.toordinal() - _EPOCH_ORDINAL,
    "TIME": _time_to_micros,
    "TIMESTAMP": _timestamp_to_micros,
}
FROM_INTERNAL: dict[str, Callable[[Any], Any]] = {
    "DATE": lambda days: _dt.date.fromordinal(days + _EPOCH_ORDINAL),
    "TIME": _micros_to_time,
    "TIMESTAMP": _micros_to_timestamp,
}
