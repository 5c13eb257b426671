"""The public serializer contract (PyFlink's ``pyflink.common.serializer``).

A :class:`TypeSerializer` turns one value into bytes and back; it is immutable
and picklable. :meth:`TypeSerializer.snapshot_configuration` returns a
:class:`TypeSerializerSnapshot` (name, format version, JSON-compatible
parameters) that every checkpoint and savepoint records for each state's key,
namespace and value serializer. On restore,
:meth:`TypeSerializerSnapshot.resolve_schema_compatibility` compares the
recorded snapshot with the serializer the restored job declares and answers
with a :class:`TypeSerializerSchemaCompatibility`:

* same name, version and parameters (nested serializers compared
  recursively) -> ``compatible_as_is``;
* same name, older recorded version -> ``compatible_after_migration``
  (read with the old serializer, rewrite with the new one);
* pickle on either side -> ``compatible_after_migration`` (pickle reads back
  any value; the new serializer reports values it cannot take);
* TTL on one side only (the ``"ttl"`` serializer) -> ``incompatible``, as the
  stored form differs;
* anything else (another name, a newer recorded version, different
  non-serializer parameters such as row field names or arity) ->
  ``incompatible``.

A composite is as compatible as its least compatible nested serializer.
Custom serializers subclass :class:`TypeSerializer`, give it a unique
``name`` and register a factory with
``streamstate.runtime.serializers.registry.register_serializer``; a
``TypeInformation`` whose ``serializer_name`` is that name makes a state
descriptor use it.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "TypeSerializer",
    "TypeSerializerSchemaCompatibility",
    "TypeSerializerSnapshot",
]

_LEN = struct.Struct(">I")
#: key under which a nested serializer's snapshot records its name
NESTED_SNAPSHOT_KEY = "$serializer"
_PICKLE = "pickle"
_TTL = "ttl"


class TypeSerializerSchemaCompatibility(Enum):
    """Outcome of :meth:`TypeSerializerSnapshot.resolve_schema_compatibility`, best first.

    Flink's static factories are the lower-case class methods
    (``TypeSerializerSchemaCompatibility.compatible_as_is()``)."""

    COMPATIBLE_AS_IS = 0
    COMPATIBLE_WITH_RECONFIGURED_SERIALIZER = 1
    COMPATIBLE_AFTER_MIGRATION = 2
    INCOMPATIBLE = 3

    @classmethod
    def compatible_as_is(cls) -> TypeSerializerSchemaCompatibility:
        return cls.COMPATIBLE_AS_IS

    @classmethod
    def compatible_with_reconfigured_serializer(cls) -> TypeSerializerSchemaCompatibility:
        return cls.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER

    @classmethod
    def compatible_after_migration(cls) -> TypeSerializerSchemaCompatibility:
        return cls.COMPATIBLE_AFTER_MIGRATION

    @classmethod
    def incompatible(cls) -> TypeSerializerSchemaCompatibility:
        return cls.INCOMPATIBLE

    def is_compatible_as_is(self) -> bool:
        return self is TypeSerializerSchemaCompatibility.COMPATIBLE_AS_IS

    def is_compatible_with_reconfigured_serializer(self) -> bool:
        return self is TypeSerializerSchemaCompatibility.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER

    def is_compatible_after_migration(self) -> bool:
        return self is TypeSerializerSchemaCompatibility.COMPATIBLE_AFTER_MIGRATION

    def is_incompatible(self) -> bool:
        return self is TypeSerializerSchemaCompatibility.INCOMPATIBLE


_Compat = TypeSerializerSchemaCompatibility


@dataclass(frozen=True)
class TypeSerializerSnapshot:
    """What a checkpoint records about the serializer that wrote a state.

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

    def get_current_version(self) -> int:
        """The recorded serializer's format version (Flink's ``getCurrentVersion``)."""
        return self.version

    def resolve_schema_compatibility(
        self, new_serializer: TypeSerializer
    ) -> TypeSerializerSchemaCompatibility:
        """How state written under this snapshot can be read by ``new_serializer``."""
        return _compare(self, new_serializer.snapshot_configuration())


def _worst(a: _Compat, b: _Compat) -> _Compat:
    return a if a.value >= b.value else b


def _compare(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot) -> _Compat:
    if old.name != new.name:
        if old.name == _TTL or new.name == _TTL:
            return _Compat.INCOMPATIBLE
        if old.name == _PICKLE or new.name == _PICKLE:
            return _Compat.COMPATIBLE_AFTER_MIGRATION
        return _Compat.INCOMPATIBLE
    if old.version > new.version:
        return _Compat.INCOMPATIBLE
    params = _compare_params(old.params, new.params)
    if old.version < new.version:
        return _worst(params, _Compat.COMPATIBLE_AFTER_MIGRATION)
    return params


def _as_snapshot(d: dict[str, Any]) -> TypeSerializerSnapshot:
    return TypeSerializerSnapshot(d[NESTED_SNAPSHOT_KEY], int(d["version"]), d.get("params", {}))


def _compare_params(old: Any, new: Any) -> _Compat:
    if isinstance(old, dict) and isinstance(new, dict):
        if NESTED_SNAPSHOT_KEY in old and NESTED_SNAPSHOT_KEY in new:
            return _compare(_as_snapshot(old), _as_snapshot(new))
        if old.keys() != new.keys():
            return _Compat.INCOMPATIBLE
        result = _Compat.COMPATIBLE_AS_IS
        for k in old:
            result = _worst(result, _compare_params(old[k], new[k]))
        return result
    if isinstance(old, list | tuple) and isinstance(new, list | tuple):
        if len(old) != len(new):
            return _Compat.INCOMPATIBLE
        result = _Compat.COMPATIBLE_AS_IS
        for o, n in zip(old, new, strict=True):
            result = _worst(result, _compare_params(o, n))
        return result
    return _Compat.COMPATIBLE_AS_IS if old == new else _Compat.INCOMPATIBLE


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

    def duplicate(self) -> TypeSerializer:
        """A serializer usable from another thread: serializers are immutable, so ``self``;
        a subclass holding mutable buffers returns a fresh copy."""
        return self

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
        """The snapshot a checkpoint records: ``name``, ``version`` and ``_params()``."""
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
