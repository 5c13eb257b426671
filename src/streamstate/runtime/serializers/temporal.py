"""Serializers of dates and times (``Types.SQL_DATE()``, ``SQL_TIME``, ``SQL_TIMESTAMP``,
``INSTANT``), fixed width, in the same wire conventions as ``basic.py``."""

from __future__ import annotations

import datetime as _dt
import struct
from typing import Any

from streamstate.common.time import Instant
from streamstate.runtime.serializers.basic import FieldSerializer, type_error

__all__ = [
    "InstantSerializer",
    "SqlDateSerializer",
    "SqlTimeSerializer",
    "SqlTimestampSerializer",
]


_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_EPOCH = _dt.datetime(1970, 1, 1)
_US = _dt.timedelta(microseconds=1)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_INSTANT = struct.Struct(">qI")


class SqlDateSerializer(FieldSerializer):
    """``Types.SQL_DATE()``: ``datetime.date`` (a ``datetime`` is rejected, not truncated)."""

    name, type_name, expected = "sql_date", "SQL_DATE", "datetime.date"

    def write(self, value: Any, out: bytearray) -> None:
        if not isinstance(value, _dt.date) or isinstance(value, _dt.datetime):
            raise type_error(self, value)
        out += _I32.pack(value.toordinal() - _EPOCH_ORDINAL)

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        return _dt.date.fromordinal(_I32.unpack_from(data, pos)[0] + _EPOCH_ORDINAL), pos + 4


class SqlTimeSerializer(FieldSerializer):
    """``Types.SQL_TIME()``: naive ``datetime.time``, to the microsecond."""

    name, type_name, expected = "sql_time", "SQL_TIME", "a naive datetime.time"

    def write(self, value: Any, out: bytearray) -> None:
        if not isinstance(value, _dt.time) or value.tzinfo is not None:
            raise type_error(self, value)
        micros = (
            (value.hour * 60 + value.minute) * 60 + value.second
        ) * 1_000_000 + value.microsecond
        out += _I64.pack(micros)

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        micros = _I64.unpack_from(data, pos)[0]
        secs, us = divmod(micros, 1_000_000)
        mins, s = divmod(secs, 60)
        h, m = divmod(mins, 60)
        return _dt.time(h, m, s, us), pos + 8


class SqlTimestampSerializer(FieldSerializer):
    """``Types.SQL_TIMESTAMP()``: naive ``datetime.datetime``, to the microsecond.

    Timezone-aware datetimes are rejected: use ``Types.INSTANT()`` for them.
    """

    name, type_name = "sql_timestamp", "SQL_TIMESTAMP"
    expected = "a naive datetime.datetime (use Types.INSTANT() for aware ones)"

    def write(self, value: Any, out: bytearray) -> None:
        if not isinstance(value, _dt.datetime) or value.tzinfo is not None:
            raise type_error(self, value)
        out += _I64.pack((value - _EPOCH) // _US)

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        return _EPOCH + _dt.timedelta(microseconds=_I64.unpack_from(data, pos)[0]), pos + 8


class InstantSerializer(FieldSerializer):
    """``Types.INSTANT()``: :class:`~streamstate.common.time.Instant` values.

    A timezone-aware ``datetime`` is accepted and converted; values always
    deserialize as ``Instant``.
    """

    name, type_name = "instant", "INSTANT"
    expected = "streamstate.common.Instant (or an aware datetime.datetime)"

    def write(self, value: Any, out: bytearray) -> None:
        if not isinstance(value, Instant):
            if not isinstance(value, _dt.datetime) or value.tzinfo is None:
                raise type_error(self, value)
            value = Instant.from_datetime(value)
        try:
            out += _INSTANT.pack(value.seconds, value.nanos)
        except struct.error:
            raise ValueError(f"{value!r} is out of range for INSTANT") from None

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        secs, nanos = _INSTANT.unpack_from(data, pos)
        return Instant(secs, nanos), pos + 12
