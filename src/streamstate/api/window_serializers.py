"""Serializers of the built-in windows, as PyFlink's ``TimeWindowSerializer``,
``CountWindowSerializer`` and ``GlobalWindowSerializer``.

Flink's byte layouts: a ``TimeWindow`` is its start and end as two big-endian signed
64-bit integers, a ``CountWindow`` its id as one, a ``GlobalWindow`` one zero byte.
``serialize(element, stream=None)`` returns the bytes and, given a binary stream
(PyFlink's signature), also writes them to it; ``deserialize`` reads bytes or a stream.
"""

from __future__ import annotations

import struct
from typing import Any

from streamstate.api.window_base import CountWindow, GlobalWindow, TimeWindow
from streamstate.common.serializer import TypeSerializer

__all__ = ["CountWindowSerializer", "GlobalWindowSerializer", "TimeWindowSerializer"]

_TWO_LONGS = struct.Struct(">qq")
_LONG = struct.Struct(">q")


def _write(data: bytes, stream: Any) -> bytes:
    if stream is not None:
        stream.write(data)
    return data


def _read(stream: Any, n: int) -> bytes:
    data = stream.read(n) if hasattr(stream, "read") else bytes(stream)[:n]
    if len(data) != n:
        raise ValueError(f"expected {n} bytes of a serialized window, got {len(data)}")
    return bytes(data)


class TimeWindowSerializer(TypeSerializer):
    name = "time-window"

    def __init__(self) -> None:
        pass

    def serialize(self, element: TimeWindow, stream: Any = None) -> bytes:
        return _write(_TWO_LONGS.pack(element.start, element.end), stream)

    def deserialize(self, stream: Any) -> TimeWindow:
        start, end = _TWO_LONGS.unpack(_read(stream, _TWO_LONGS.size))
        return TimeWindow(start, end)


class CountWindowSerializer(TypeSerializer):
    name = "count-window"

    def __init__(self) -> None:
        pass

    def serialize(self, element: CountWindow, stream: Any = None) -> bytes:
        return _write(_LONG.pack(element.id), stream)

    def deserialize(self, stream: Any) -> CountWindow:
        (wid,) = _LONG.unpack(_read(stream, _LONG.size))
        return CountWindow(wid)


class GlobalWindowSerializer(TypeSerializer):
    name = "global-window"

    def __init__(self) -> None:
        pass

    def serialize(self, element: GlobalWindow, stream: Any = None) -> bytes:
        return _write(b"\x00", stream)

    def deserialize(self, stream: Any) -> GlobalWindow:
        _read(stream, 1)
        return GlobalWindow.get()
