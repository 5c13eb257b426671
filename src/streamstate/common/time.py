"""Time amounts and instants: PyFlink's ``Time``, ``Duration`` and ``Instant``.

``Time`` (Flink 1.x, removed in 2.x but still common in user code) and
``Duration`` (``java.time.Duration``) are immutable, comparable and hashable.
Both convert from and to :class:`datetime.timedelta`. :func:`to_millis` is the
single place where the runtime turns any accepted "amount of time" argument into
integer milliseconds.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from functools import total_ordering
from typing import Any

from streamstate.errors import ConfigurationError

__all__ = [
    "Duration",
    "Instant",
    "Time",
    "to_millis",
]

_NANOS_PER_MILLI = 1_000_000
_NANOS_PER_SECOND = 1_000_000_000
_MS = _dt.timedelta(milliseconds=1)
_US = _dt.timedelta(microseconds=1)
_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _require_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    return value


@total_ordering
class Time:
    """A non-negative or negative amount of time with millisecond precision (PyFlink ``Time``)."""

    __slots__ = ("_millis",)

    def __init__(self, milliseconds: int) -> None:
        self._millis = _require_int(milliseconds, "Time milliseconds")

    @staticmethod
    def milliseconds(milliseconds: int) -> Time:
        return Time(milliseconds)

    @staticmethod
    def seconds(seconds: int) -> Time:
        return Time(_require_int(seconds, "seconds") * 1000)

    @staticmethod
    def minutes(minutes: int) -> Time:
        return Time(_require_int(minutes, "minutes") * 60_000)

    @staticmethod
    def hours(hours: int) -> Time:
        return Time(_require_int(hours, "hours") * 3_600_000)

    @staticmethod
    def days(days: int) -> Time:
        return Time(_require_int(days, "days") * 86_400_000)

    @staticmethod
    def from_timedelta(delta: _dt.timedelta) -> Time:
        """The ``Time`` of ``delta``, truncated (floored) to whole milliseconds."""
        if not isinstance(delta, _dt.timedelta):
            raise TypeError(f"expected datetime.timedelta, got {type(delta).__name__}")
        return Time(delta // _MS)

    def to_milliseconds(self) -> int:
        return self._millis

    def to_timedelta(self) -> _dt.timedelta:
        return _dt.timedelta(milliseconds=self._millis)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Time) and other._millis == self._millis

    def __lt__(self, other: Time) -> bool:
        if not isinstance(other, Time):
            return NotImplemented
        return self._millis < other._millis

    def __hash__(self) -> int:
        return self._millis.__hash__()

    def __repr__(self) -> str:
        return f"Time.milliseconds({self._millis})"

    def __reduce__(self) -> tuple[Any, ...]:
        return Time, (self._millis,)


@total_ordering
class Duration:
    """A time-based amount of time with nanosecond precision (``java.time.Duration``)."""

    __slots__ = ("_nanos",)

    def __init__(self, nanos: int = 0) -> None:
        self._nanos = _require_int(nanos, "Duration nanos")

    @staticmethod
    def of_nanos(nanos: int) -> Duration:
        return Duration(nanos)

    @staticmethod
    def of_millis(millis: int) -> Duration:
        return Duration(_require_int(millis, "millis") * _NANOS_PER_MILLI)

    @staticmethod
    def of_seconds(seconds: int) -> Duration:
        return Duration(_require_int(seconds, "seconds") * _NANOS_PER_SECOND)

    @staticmethod
    def of_minutes(minutes: int) -> Duration:
        return Duration(_require_int(minutes, "minutes") * 60 * _NANOS_PER_SECOND)

    @staticmethod
    def of_hours(hours: int) -> Duration:
        return Duration(_require_int(hours, "hours") * 3600 * _NANOS_PER_SECOND)

    @staticmethod
    def of_days(days: int) -> Duration:
        return Duration(_require_int(days, "days") * 86_400 * _NANOS_PER_SECOND)

    @staticmethod
    def from_timedelta(delta: _dt.timedelta) -> Duration:
        """The exact ``Duration`` of ``delta`` (timedelta has microsecond precision)."""
        if not isinstance(delta, _dt.timedelta):
            raise TypeError(f"expected datetime.timedelta, got {type(delta).__name__}")
        return Duration((delta // _US) * 1000)

    def to_nanos(self) -> int:
        return self._nanos

    def to_milliseconds(self) -> int:
        """Whole milliseconds, floored (as ``java.time.Duration.toMillis``)."""
        return self._nanos // _NANOS_PER_MILLI

    to_millis = to_milliseconds

    def get_seconds(self) -> int:
        return self._nanos // _NANOS_PER_SECOND

    def get_nano(self) -> int:
        return self._nanos % _NANOS_PER_SECOND

    def to_timedelta(self) -> _dt.timedelta:
        """The ``timedelta`` of this duration, truncated (floored) to microseconds."""
        return _dt.timedelta(microseconds=self._nanos // 1000)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and other._nanos == self._nanos

    def __lt__(self, other: Duration) -> bool:
        if not isinstance(other, Duration):
            return NotImplemented
        return self._nanos < other._nanos

    def __hash__(self) -> int:
        return self._nanos.__hash__()

    def __repr__(self) -> str:
        if self._nanos % _NANOS_PER_MILLI == 0:
            return f"Duration.of_millis({self._nanos // _NANOS_PER_MILLI})"
        return f"Duration.of_nanos({self._nanos})"

    def __reduce__(self) -> tuple[Any, ...]:
        return Duration, (self._nanos,)


@total_ordering
class Instant:
    """A point on the UTC time-line: ``seconds`` since the epoch plus ``nanos`` in [0, 1e9)."""

    __slots__ = ("seconds", "nanos")

    def __init__(self, seconds: int, nanos: int = 0) -> None:
        seconds = _require_int(seconds, "Instant seconds")
        nanos = _require_int(nanos, "Instant nanos")
        extra, nanos = divmod(nanos, _NANOS_PER_SECOND)
        self.seconds = seconds + extra
        self.nanos = nanos

    @staticmethod
    def of_epoch_milli(epoch_milli: int) -> Instant:
        secs, ms = divmod(_require_int(epoch_milli, "epoch_milli"), 1000)
        return Instant(secs, ms * _NANOS_PER_MILLI)

    @staticmethod
    def from_datetime(value: _dt.datetime) -> Instant:
        """The instant of a timezone-aware ``datetime`` (naive ones are rejected)."""
        if not isinstance(value, _dt.datetime) or value.tzinfo is None:
            raise ValueError(
                f"Instant.from_datetime expects a timezone-aware datetime, got {value!r}"
            )
        micros = (value - _EPOCH_UTC) // _US
        secs, us = divmod(micros, 1_000_000)
        return Instant(secs, us * 1000)

    def to_epoch_milli(self) -> int:
        return self.seconds * 1000 + self.nanos // _NANOS_PER_MILLI

    def to_datetime(self) -> _dt.datetime:
        """An aware UTC ``datetime`` (truncated to microseconds)."""
        return _EPOCH_UTC + _dt.timedelta(seconds=self.seconds, microseconds=self.nanos // 1000)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Instant)
            and self.seconds == other.seconds
            and self.nanos == other.nanos
        )

    def __lt__(self, other: Instant) -> bool:
        if not isinstance(other, Instant):
            return NotImplemented
        return (self.seconds, self.nanos) < (other.seconds, other.nanos)

    def __hash__(self) -> int:
        return (self.seconds, self.nanos).__hash__()

    def __repr__(self) -> str:
        return f"Instant<{self.seconds}, {self.nanos}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return Instant, (self.seconds, self.nanos)


def _ms_of_int(value: int) -> int:
    return value


def _ms_of_timedelta(value: _dt.timedelta) -> int:
    return value // _MS


def _ms_of_time(value: Time) -> int:
    return value.to_milliseconds()


def _ms_of_duration(value: Duration) -> int:
    return value.to_milliseconds()


_TO_MS: dict[type, Callable[[Any], int]] = {
    int: _ms_of_int,
    _dt.timedelta: _ms_of_timedelta,
    Time: _ms_of_time,
    Duration: _ms_of_duration,
}


def to_millis(value: Any, what: str = "time interval") -> int:
    """Integer milliseconds of ``value``.

    Accepts int milliseconds, :class:`datetime.timedelta`, :class:`Time` or
    :class:`Duration` (sub-millisecond parts are floored). Raises
    :class:`ConfigurationError` naming ``what`` for any other type (including
    ``bool`` and ``float``) and for negative amounts.
    """
    conv = _TO_MS.get(type(value))
    if conv is None:
        for t, f in _TO_MS.items():  # subclasses (e.g. pandas.Timedelta)
            if t is not int and isinstance(value, t):
                conv = f
                break
    if conv is None:
        raise ConfigurationError(
            f"{what} must be int milliseconds, datetime.timedelta, Time or Duration; "
            f"got {type(value).__name__} {value!r}"
        )
    ms = conv(value)
    if ms < 0:
        raise ConfigurationError(f"{what} must not be negative, got {value!r} ({ms} ms)")
    return ms
