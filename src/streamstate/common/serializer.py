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
Records compare by field name (rows, dataclasses, Avro records): a field added,
removed or moved -> ``compatible_after_migration``; a field whose type changed
-> ``incompatible`` unless :func:`register_type_migration` declared how to
convert it. Migration is eager: each restored value goes through
:meth:`TypeSerializer.migrate` of the new serializer (``migrate_value``).

Custom serializers subclass :class:`TypeSerializer`, give it a unique
``name`` and register a factory with
``streamstate.runtime.serializers.registry.register_serializer``; a
``TypeInformation`` whose ``serializer_name`` is that name makes a state
descriptor use it.
"""

from __future__ import annotations

import struct
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

__all__ = [
    "TypeSerializer",
    "TypeSerializerSchemaCompatibility",
    "TypeSerializerSnapshot",
    "VersionedState",
    "register_type_migration",
]

_LEN = struct.Struct(">I")
#: key under which a nested serializer's snapshot records its name
NESTED_SNAPSHOT_KEY = "$serializer"
_PICKLE = "pickle"
_TTL = "ttl"


#: the type a serializer reads and writes (``TypeSerializer[TimeWindow]``, as PyFlink's)
T = TypeVar("T")


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


#: reads two snapshots of one serializer name: (compatibility, what changed / why not)
SnapshotResolver = Callable[
    [TypeSerializerSnapshot, TypeSerializerSnapshot], tuple[_Compat, list[str]]
]
_lock = threading.Lock()
#: serializer name -> resolver comparing two of its snapshots (records: by field name)
_RESOLVERS: dict[str, SnapshotResolver] = {}
#: (old serializer name, new serializer name) -> conversion of one value
_MIGRATIONS: dict[tuple[str, str], Callable[[Any], Any]] = {}


def register_snapshot_resolver(name: str, resolver: SnapshotResolver) -> None:
    """Compare snapshots of serializer ``name`` with ``resolver`` instead of by params
    (used by record serializers, whose fields match by name)."""
    with _lock:
        _RESOLVERS[name] = resolver


def _serializer_name(t: Any) -> str:
    name = t if isinstance(t, str) else getattr(t, "serializer_name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(
            f"expected a TypeInformation (e.g. Types.LONG()) or a serializer name, got {t!r}"
        )
    return name


def register_type_migration(old_type: Any, new_type: Any, convert: Callable[[Any], Any]) -> None:
    """Declare how a value of ``old_type`` becomes one of ``new_type`` on restore.

    ``old_type`` / ``new_type``: type informations (``Types.LONG()``) or serializer
    names. Without a registered migration a state (or a row / dataclass / Avro
    field) whose type changed is ``incompatible``; with one it is
    ``compatible_after_migration`` and every restored value goes through
    ``convert`` once (``None`` stays ``None``). Register it in a module the job
    imports on every worker (module level of the job script works).
    """
    if not callable(convert):
        raise TypeError(f"convert must be callable, got {convert!r}")
    with _lock:
        _MIGRATIONS[(_serializer_name(old_type), _serializer_name(new_type))] = convert


def registered_type_migration(old_name: str, new_name: str) -> Callable[[Any], Any] | None:
    """The conversion registered for ``old_name`` -> ``new_name`` serializers, if any."""
    return _MIGRATIONS.get((old_name, new_name))


def compare_snapshots(
    old: TypeSerializerSnapshot, new: TypeSerializerSnapshot
) -> tuple[_Compat, list[str]]:
    """The compatibility of state written under ``old`` with serializer ``new``, and
    what changed (or why it cannot be read), one phrase per change."""
    if old.name != new.name:
        if (old.name, new.name) in _MIGRATIONS:
            return _Compat.COMPATIBLE_AFTER_MIGRATION, [
                f"{old.name} -> {new.name} (registered migration)"
            ]
        if old.name == _TTL or new.name == _TTL:  # TTL switched on or off: (un)wrap values
            if old.name == _TTL:
                result, why = compare_snapshots(as_snapshot(old.params["user"]), new)
                why.insert(0, "state TTL disabled")
            else:
                result, why = compare_snapshots(old, as_snapshot(new.params["user"]))
                why.insert(0, "state TTL enabled")
            return _worst(result, _Compat.COMPATIBLE_AFTER_MIGRATION), why
        if old.name == _PICKLE or new.name == _PICKLE:
            return _Compat.COMPATIBLE_AFTER_MIGRATION, [f"{old.name} -> {new.name}"]
        return _Compat.INCOMPATIBLE, [
            f"type changed from {old.name} to {new.name} and no migration is registered "
            f"(streamstate.common.serializer.register_type_migration)"
        ]
    if old.version > new.version:
        return _Compat.INCOMPATIBLE, [
            f"{old.name} was written by format version {old.version}, newer than this "
            f"serializer's {new.version}"
        ]
    reasons: list[str] = []
    resolver = _RESOLVERS.get(old.name)
    if resolver is not None:
        result, reasons = resolver(old, new)
    else:
        result = _compare_params(old.params, new.params, reasons)
        if result.is_incompatible() and not reasons:
            reasons.append(f"{old.name} parameters changed: {old.params} -> {new.params}")
    if old.version < new.version:
        reasons.append(f"{old.name} format version {old.version} -> {new.version}")
        result = _worst(result, _Compat.COMPATIBLE_AFTER_MIGRATION)
    return result, reasons


def _compare(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot) -> _Compat:
    return compare_snapshots(old, new)[0]


def as_snapshot(d: dict[str, Any]) -> TypeSerializerSnapshot:
    """The snapshot of a nested serializer (its ``nested_snapshot`` form in params)."""
    return TypeSerializerSnapshot(d[NESTED_SNAPSHOT_KEY], int(d["version"]), d.get("params", {}))


def _compare_params(old: Any, new: Any, reasons: list[str]) -> _Compat:
    if isinstance(old, dict) and isinstance(new, dict):
        if NESTED_SNAPSHOT_KEY in old and NESTED_SNAPSHOT_KEY in new:
            result, why = compare_snapshots(as_snapshot(old), as_snapshot(new))
            reasons.extend(why)
            return result
        if old.keys() != new.keys():
            return _Compat.INCOMPATIBLE
        result = _Compat.COMPATIBLE_AS_IS
        for k in old:
            result = _worst(result, _compare_params(old[k], new[k], reasons))
        return result
    if isinstance(old, list | tuple) and isinstance(new, list | tuple):
        if len(old) != len(new):
            return _Compat.INCOMPATIBLE
        result = _Compat.COMPATIBLE_AS_IS
        for o, n in zip(old, new, strict=True):
            result = _worst(result, _compare_params(o, n, reasons))
        return result
    return _Compat.COMPATIBLE_AS_IS if old == new else _Compat.INCOMPATIBLE


def migrate_value(old: TypeSerializer, new: TypeSerializer, value: Any) -> Any:
    """``value``, read with ``old``, in the form ``new`` writes: a registered type
    migration if the serializer changed, else ``new.migrate(value, old)``."""
    if value is None:
        return None
    if old.name == _TTL and new.name != _TTL:  # TTL disabled: the user value of a TtlValue
        return migrate_value(old.user, new, value[0])  # type: ignore[attr-defined]  # the TTL serializer wraps a user serializer
    if old.name != new.name:
        convert = _MIGRATIONS.get((old.name, new.name))
        if convert is not None:
            return convert(value)
    return new.migrate(value, old)


class TypeSerializer(ABC, Generic[T]):
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

    def migrate(self, value: Any, old: TypeSerializer) -> Any:
        """``value`` as read by ``old`` (the serializer that wrote a restored state),
        converted to what this serializer writes (schema evolution, called once per
        restored value when the serializers differ). The default returns ``value``;
        record serializers map fields by name, containers migrate their elements."""
        return value

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


class VersionedState:
    """The upgrade hook of pickle-based state (no type information, or
    ``Types.PICKLED_BYTE_ARRAY()``): a mixin for classes whose instances live in state
    and whose attributes change between versions of a job.

    Set ``__state_version__`` (an int, bumped with every change) and override
    :meth:`upgrade_state`. Pickling records the version with the attributes
    (``__getstate__``); unpickling state written by an older version calls
    ``upgrade_state(attributes, from_version)`` once per older version, in order,
    before the attributes are set (``__setstate__``); state of a *newer* version than
    the class raises ``ValueError``. Classes with their own ``__getstate__`` /
    ``__setstate__`` follow the same pattern: put a version into what ``__getstate__``
    returns and convert in ``__setstate__``. The upgrade runs when a value is
    unpickled: at restore on the heap backend, at its first read on RocksDB, and the
    value is written in the new form by the next write or snapshot.
    """

    __state_version__: int = 1

    def __getstate__(self) -> dict[str, Any]:
        return {"__state_version__": type(self).__state_version__, **self.__dict__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        version = int(state.pop("__state_version__", 0))
        current = type(self).__state_version__
        if version > current:
            raise ValueError(
                f"{type(self).__qualname__} state of version {version} is newer than the class "
                f"(version {current}); run the newer job version or restore an older checkpoint"
            )
        while version < current:
            state = type(self).upgrade_state(state, version)
            version += 1
        self.__dict__.update(state)

    @classmethod
    def upgrade_state(cls, state: dict[str, Any], from_version: int) -> dict[str, Any]:
        """The attributes of version ``from_version + 1`` from those of ``from_version``
        (default: unchanged; attributes added later then fall back to class attributes)."""
        return state
