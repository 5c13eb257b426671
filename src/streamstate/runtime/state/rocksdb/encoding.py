"""Byte encodings of the RocksDB backend's values and keys, shared by its modules.

List state values are ``u32 length`` + bytes per element; a map entry's key ends with the
``u32`` length of its user key (so a prefix scan can tell where the user key starts).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from streamstate.errors import StateSerializationError

__all__ = [
    "MAX_VALUE_BYTES",
    "MISSING",
    "frame_elements",
    "map_key_matches",
    "too_large",
    "unframe_elements",
]

#: the largest serialized key or value a state accepts (bytes)
MAX_VALUE_BYTES = 2**31 - 1

_U32 = struct.Struct(">I")
_pack_u32 = _U32.pack
#: "absent" marker of ``StateColumn.read`` (an entry may hold ``None`` nowhere, but a
#: marker keeps "no entry" apart from any stored object)
MISSING: Any = object()


def too_large(state: str, operator: str, value: Any, size: int) -> StateSerializationError:
    return StateSerializationError(
        state,
        operator,
        type(value).__qualname__,
        f"its serialized form has {size} bytes, more than the {MAX_VALUE_BYTES} bytes "
        f"(2^31 - 1) a RocksDB state value may have; split it (e.g. use MapState or ListState)",
    )


def frame_elements(ser: Any, values: Iterable[Any]) -> bytes:
    """The list-state encoding of ``values``: ``u32 length`` + bytes, per element."""
    parts: list[bytes] = []
    for v in values:
        b = ser.serialize(v)
        parts.append(_pack_u32(len(b)))
        parts.append(b)
    return b"".join(parts)


def unframe_elements(ser: Any, data: bytes) -> list[Any]:
    """Inverse of :func:`frame_elements`."""
    out: list[Any] = []
    mv = memoryview(data)
    pos, n = 0, len(data)
    loads = ser.deserialize
    while pos < n:
        (ln,) = _U32.unpack_from(data, pos)
        pos += 4
        out.append(loads(bytes(mv[pos : pos + ln])))
        pos += ln
    return out


def map_key_matches(rk: bytes, prefix_len: int) -> int:
    """The user key's start in map entry key ``rk`` if it belongs to a prefix of that length.

    Returns ``-1`` when the entry belongs to another (longer) key sharing the prefix.
    """
    (ulen,) = _U32.unpack_from(rk, len(rk) - 4)
    return prefix_len if len(rk) - 4 - ulen == prefix_len else -1
