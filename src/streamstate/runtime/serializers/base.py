"""The serializer contract every state key, namespace and value goes through.

A :class:`TypeSerializer` turns one Python value into bytes and back. It is
stateless and picklable. ``serialize_many`` / ``deserialize_many`` are the bulk
paths used by snapshots; the default implementation frames single values, and
serializers with a faster vectorised form override both (they must stay
inverse to each other). ``snapshot_configuration`` names the serializer and
its version so a checkpoint can later be checked for compatibility.
"""

from __future__ import annotations

import pickle
import re
import struct
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "PickleSerializer",
    "TypeSerializer",
    "TypeSerializerSnapshot",
]

_LEN = struct.Struct(">I")
PICKLE_PROTOCOL = 5


@dataclass(frozen=True)
class TypeSerializerSnapshot:
    """What a checkpoint records about the serializer that wrote it.

    ``name`` is the registry name, ``version`` the serializer's format version,
    ``params`` any nested configuration (e.g. field serializers of a row),
    JSON-compatible.
    """

    name: str
    version: int
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "params": self.params}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> TypeSerializerSnapshot:
        return TypeSerializerSnapshot(d["name"], int(d["version"]), dict(d.get("params", {})))


class TypeSerializer(ABC):
    """Serializes values of one type. Implementations are immutable and picklable."""

    #: registry name, recorded in checkpoints
    name: str = ""
    #: bump when the byte format changes
    version: int = 1

    @abstractmethod
    def serialize(self, value: Any) -> bytes:
        """Bytes for ``value``; raises ``TypeError``/``ValueError`` if it is not of this type."""

    @abstractmethod
    def deserialize(self, data: bytes) -> Any:
        """Inverse of :meth:`serialize`."""

    def serialize_many(self, values: Sequence[Any]) -> bytes:
        """One blob for many values; inverse of :meth:`deserialize_many`."""
        parts: list[bytes] = []
        for v in values:
            b = self.serialize(v)
            parts.append(_LEN.pack(len(b)))
            parts.append(b)
        return b"".join(parts)

    def deserialize_many(self, data: bytes) -> list[Any]:
        out: list[Any] = []
        pos, n = 0, len(data)
        mv = memoryview(data)
        while pos < n:
            (ln,) = _LEN.unpack_from(data, pos)
            pos += 4
            out.append(self.deserialize(bytes(mv[pos : pos + ln])))
            pos += ln
        return out

    def snapshot_configuration(self) -> TypeSerializerSnapshot:
        return TypeSerializerSnapshot(self.name, self.version, self._params())

    def _params(self) -> dict[str, Any]:
        return {}

    def __eq__(self, other: object) -> bool:
        return (
            type(self) is type(other)
            and self.snapshot_configuration()
            == getattr(other, "snapshot_configuration", lambda: None)()
        )

    def __hash__(self) -> int:  # serializers are used as dict keys in caches
        return id(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


_dumps = pickle.dumps
#: finds a reference to the job script's module in a pickle (faster than ``in`` on the
#: short pickles of state values)
_refers_to_main = re.compile(b"__main__").search


def dumps_portable(
    obj: Any, protocol: int = PICKLE_PROTOCOL, data: bytes | None = None, strict: bool = False
) -> bytes:
    """Pickle ``obj`` so any process of the job can load it: the C pickler, unless the
    value refers to classes or functions of the job script (``__main__``, which other
    processes do not have; PyFlink ships them with cloudpickle too), then cloudpickle,
    which ships them by value. The output loads with ``pickle.loads``. ``data``: the C
    pickler's output when the caller already has it. ``strict`` (state values and keys):
    anything else the C pickler refuses (a lambda, a lock) still raises, so that state
    never holds code by value by accident."""
    if data is None:
        try:
            data = pickle.dumps(obj, protocol=protocol)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            if strict and "__main__" not in str(e):
                raise
            data = None
    if data is not None and _refers_to_main(data) is None:
        return data
    import cloudpickle

    return cloudpickle.dumps(obj, protocol=protocol)  # type: ignore[no-any-return]  # cloudpickle is untyped


class PickleSerializer(TypeSerializer):
    """Any picklable Python value (``Types.PICKLED_BYTE_ARRAY()`` or no type info)."""

    name = "pickle"
    version = 1

    def serialize(self, value: Any) -> bytes:
        # the hot path of RocksDB writes: the C pickler inline, the rest out of line
        try:
            data = _dumps(value, PICKLE_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError):
            return dumps_portable(value, strict=True)
        return data if _refers_to_main(data) is None else dumps_portable(value, data=data)

    def deserialize(self, data: bytes) -> Any:
        return pickle.loads(data)

    def serialize_many(self, values: Sequence[Any]) -> bytes:
        # one pickle call for the whole batch: an order of magnitude faster than framing
        return dumps_portable(list(values), strict=True)

    def deserialize_many(self, data: bytes) -> list[Any]:
        return list(pickle.loads(data)) if data else []


def check_all(serializer: TypeSerializer, values: Iterable[Any]) -> None:
    """Raise the first serialization error among ``values`` (used to report precise errors)."""
    for v in values:
        serializer.serialize(v)
