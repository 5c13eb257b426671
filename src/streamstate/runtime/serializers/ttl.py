"""The stored form of state with TTL: a user value plus its last access timestamp.

State with TTL stores :class:`TtlValue` ``(user_value, last_access_timestamp)``
objects where the state without TTL stores the user value: the whole value of
value/reducing/aggregating state, each element of list state, each value of
map state (so list elements and map entries expire independently), as Flink's
``TtlValue``.

:class:`TtlSerializer` (registry name ``"ttl"``) wraps the user value's
serializer. Its snapshot records the user serializer's snapshot nested, so a
checkpoint tells whether a state had TTL: restoring TTL state into a
descriptor without TTL, or the reverse, is a ``StateMigrationError``
(``serializers/compat.py``).

Encodings (big-endian). One value: ``i64 timestamp, u8 flags (1: user value is
None), user bytes``. Many values (``serialize_many``): ``u32 n, n x i64
timestamps, null bitmap of user values, user_serializer.serialize_many(non-null
user values)``.
"""

from __future__ import annotations

import struct
import sys
import time
from array import array
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NamedTuple

from streamstate.common.serializer import migrate_value
from streamstate.common.typeinfo import TypeInformation
from streamstate.runtime.serializers.base import PickleSerializer, TypeSerializer
from streamstate.runtime.serializers.composite import nested_snapshot

__all__ = [
    "MIGRATION_TIMESTAMP",
    "TTL_SERIALIZER_NAME",
    "TtlSerializer",
    "TtlTypeInfo",
    "TtlValue",
    "is_ttl_snapshot",
]

#: the TTL timestamp a value gets when TTL is enabled on restored state (the
#: migrating backend sets its TTL clock's time; unset: the wall clock)
MIGRATION_TIMESTAMP: ContextVar[int | None] = ContextVar("ttl_migration_timestamp", default=None)

#: registry name of :class:`TtlSerializer` (recorded in checkpoints)
TTL_SERIALIZER_NAME = "ttl"

_HEAD = struct.Struct(">qB")
_U32 = struct.Struct(">I")


class TtlValue(NamedTuple):
    """A user value with the time it was last written (or read, for ``OnReadAndWrite``)."""

    user_value: Any
    last_access_timestamp: int


@dataclass(frozen=True, repr=False)
class TtlTypeInfo(TypeInformation):
    """Type information of :class:`TtlValue` s of ``user`` values (``None``: pickled)."""

    user: TypeInformation | None = None

    @property
    def serializer_name(self) -> str:
        return TTL_SERIALIZER_NAME

    def serializer_params(self) -> dict[str, Any]:
        return {"user": self.user}

    def __repr__(self) -> str:
        return f"TtlTypeInfo({self.user!r})"


def _be_array(values: list[int]) -> bytes:
    a = array("q", values)
    if sys.byteorder == "little":
        a.byteswap()
    return a.tobytes()


def _from_be_array(blob: bytes | memoryview) -> list[int]:
    a = array("q")
    a.frombytes(bytes(blob))
    if sys.byteorder == "little":
        a.byteswap()
    return a.tolist()


class TtlSerializer(TypeSerializer):
    """Serializes :class:`TtlValue` with the user serializer ``user`` (see module docstring)."""

    name = TTL_SERIALIZER_NAME
    version = 1

    def __init__(self, user: TypeSerializer | None = None) -> None:
        self.user = PickleSerializer() if user is None else user
        if not isinstance(self.user, TypeSerializer):
            raise TypeError(f"the TTL user serializer must be a TypeSerializer, got {user!r}")

    def _params(self) -> dict[str, Any]:
        return {"user": nested_snapshot(self.user)}

    def migrate(self, value: Any, old: TypeSerializer) -> Any:
        if old.name == TTL_SERIALIZER_NAME:
            user, ts = self._check(value)
            return TtlValue(migrate_value(old.user, self.user, user), ts)  # type: ignore[attr-defined]  # a TTL serializer
        now = MIGRATION_TIMESTAMP.get()  # TTL enabled: the value was last accessed now
        if now is None:
            now = int(time.time() * 1000)
        return TtlValue(migrate_value(old, self.user, value), now)

    @staticmethod
    def _check(value: Any) -> tuple[Any, int]:
        if not isinstance(value, tuple) or len(value) != 2 or type(value[1]) is not int:
            raise TypeError(
                f"state with TTL stores TtlValue(user_value, timestamp) objects, got "
                f"{type(value).__name__} {value!r}"
            )
        return value[0], value[1]

    def serialize(self, value: Any) -> bytes:
        user, ts = self._check(value)
        if user is None:
            return _HEAD.pack(ts, 1)
        return _HEAD.pack(ts, 0) + self.user.serialize(user)

    def deserialize(self, data: bytes) -> Any:
        ts, flags = _HEAD.unpack_from(data, 0)
        if flags & 1:
            return TtlValue(None, ts)
        return TtlValue(self.user.deserialize(bytes(data[_HEAD.size :])), ts)

    def serialize_many(self, values: Sequence[Any]) -> bytes:
        n = len(values)
        stamps: list[int] = []
        users: list[Any] = []
        bits = bytearray((n + 7) >> 3)
        for i, v in enumerate(values):
            user, ts = self._check(v)
            stamps.append(ts)
            if user is None:
                bits[i >> 3] |= 1 << (i & 7)
            else:
                users.append(user)
        return b"".join(
            (_U32.pack(n), _be_array(stamps), bytes(bits), self.user.serialize_many(users))
        )

    def deserialize_many(self, data: bytes) -> list[Any]:
        if not data:
            return []
        (n,) = _U32.unpack_from(data, 0)
        pos = 4
        stamps = _from_be_array(memoryview(data)[pos : pos + 8 * n])
        pos += 8 * n
        nb = (n + 7) >> 3
        bits = data[pos : pos + nb]
        pos += nb
        if len(stamps) != n or len(bits) != nb:
            raise ValueError("TTL values blob is truncated")
        users = iter(self.user.deserialize_many(bytes(data[pos:])))
        out: list[Any] = []
        for i, ts in enumerate(stamps):
            if bits[i >> 3] & (1 << (i & 7)):
                out.append(TtlValue(None, ts))
            else:
                out.append(TtlValue(next(users), ts))
        if next(users, _END) is not _END:
            raise ValueError("TTL values blob has more user values than timestamps")
        return out

    def __repr__(self) -> str:
        return f"TtlSerializer({self.user!r})"


_END: Any = object()


def is_ttl_snapshot(snapshot: Any) -> bool:
    """Whether a serializer snapshot (object or ``to_dict()`` form) is a TTL serializer's."""
    name = snapshot.get("name") if isinstance(snapshot, dict) else getattr(snapshot, "name", None)
    return name == TTL_SERIALIZER_NAME
