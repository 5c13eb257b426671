"""From type information (or a checkpoint's serializer snapshot) to a serializer.

Serializers are found by *name* in one registry: a type info names its
serializer (``TypeInformation.serializer_name``) and gives the factory
arguments (``serializer_params()``); a :class:`TypeSerializerSnapshot` records
the same name plus the parameters the serializer reported. A factory receives
those parameters with every nested type info / nested snapshot already turned
into a serializer, so one factory serves both :func:`serializer_for` and
:func:`restore_serializer`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from streamstate.common.serializer import register_snapshot_resolver
from streamstate.common.typeinfo import TypeInformation
from streamstate.errors import ConfigurationError, StateMigrationError
from streamstate.runtime.serializers import basic, temporal
from streamstate.runtime.serializers.avro import AvroSerializer, resolve_avro
from streamstate.runtime.serializers.base import (
    PickleSerializer,
    TypeSerializer,
    TypeSerializerSnapshot,
)
from streamstate.runtime.serializers.composite import (
    NESTED_SNAPSHOT_KEY,
    ListSerializer,
    MapSerializer,
    PrimitiveArraySerializer,
    RowSerializer,
    TupleSerializer,
)
from streamstate.runtime.serializers.key import default_key_serializer
from streamstate.runtime.serializers.records import DataclassSerializer, resolve_record
from streamstate.runtime.serializers.ttl import TTL_SERIALIZER_NAME, TtlSerializer

__all__ = [
    "SerializerFactory",
    "register_serializer",
    "registered_serializer_names",
    "restore_serializer",
    "serializer_for",
]

#: builds a serializer from its params (nested serializers already built)
SerializerFactory = Callable[[dict[str, Any]], TypeSerializer]

_lock = threading.Lock()
_factories: dict[str, SerializerFactory] = {}
# readers of older format versions: (name, version) -> factory
_versioned: dict[tuple[str, int], SerializerFactory] = {}


def register_serializer(
    name: str, factory: SerializerFactory, *, version: int | None = None, replace: bool = False
) -> None:
    """Register ``factory`` as the serializer called ``name``.

    ``factory(params)`` must return a serializer whose ``name`` is ``name``.
    With ``version`` the factory only restores snapshots of that format
    version (a reader for data written by an older serializer). Registering
    an existing name raises ``ConfigurationError`` unless ``replace``.
    """
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"serializer names must be non-empty str, got {name!r}")
    if not callable(factory):
        raise ConfigurationError(f"serializer factory for {name!r} is not callable")
    with _lock:
        table: dict[Any, SerializerFactory] = _factories if version is None else _versioned
        key: Any = name if version is None else (name, version)
        if key in table and not replace:
            raise ConfigurationError(
                f"a serializer named {name!r} is already registered; pass replace=True"
            )
        table[key] = factory
        _serializer_for_cached.cache_clear()


def registered_serializer_names() -> list[str]:
    """Sorted names of the registered serializers."""
    return sorted(_factories)


def _build(name: str, params: dict[str, Any]) -> TypeSerializer:
    factory = _factories.get(name)
    if factory is None:
        raise ConfigurationError(
            f"no serializer is registered under the name {name!r}; register one with "
            f"streamstate.runtime.serializers.registry.register_serializer"
        )
    return factory(params)


def _resolve_type_infos(value: Any) -> Any:
    if isinstance(value, TypeInformation):
        return serializer_for(value)
    if isinstance(value, list | tuple):
        return [_resolve_type_infos(v) for v in value]
    if isinstance(value, dict):
        return {k: _resolve_type_infos(v) for k, v in value.items()}
    return value


@lru_cache(maxsize=1024)
def _serializer_for_cached(type_info: TypeInformation) -> TypeSerializer:
    params = _resolve_type_infos(type_info.serializer_params())
    return _build(type_info.serializer_name, params)


def serializer_for(type_info: TypeInformation | None) -> TypeSerializer:
    """The serializer for values described by ``type_info``.

    ``None`` (no declared type) and ``Types.PICKLED_BYTE_ARRAY()`` give a
    :class:`PickleSerializer`. Raises ``TypeError`` for anything that is not a
    ``TypeInformation`` and ``ConfigurationError`` if its serializer name is
    not registered.
    """
    if type_info is None:
        return PickleSerializer()
    if not isinstance(type_info, TypeInformation):
        raise TypeError(
            f"expected a TypeInformation (e.g. Types.LONG()) or None, got "
            f"{type(type_info).__name__} {type_info!r}"
        )
    try:
        return _serializer_for_cached(type_info)
    except TypeError as e:  # an unhashable user-defined type info: build without the cache
        if "unhashable" not in str(e):
            raise
    return _build(type_info.serializer_name, _resolve_type_infos(type_info.serializer_params()))


def _resolve_snapshots(value: Any) -> Any:
    if isinstance(value, dict):
        if NESTED_SNAPSHOT_KEY in value:
            return restore_serializer(
                TypeSerializerSnapshot(
                    value[NESTED_SNAPSHOT_KEY], int(value["version"]), dict(value["params"])
                )
            )
        return {k: _resolve_snapshots(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_resolve_snapshots(v) for v in value]
    return value


def restore_serializer(snapshot: TypeSerializerSnapshot) -> TypeSerializer:
    """Rebuild the serializer that wrote a checkpoint from its recorded snapshot.

    ``restore_serializer(s.snapshot_configuration()) == s`` for every
    registered serializer. Raises :class:`StateMigrationError` when the name
    is unknown or the snapshot's format version has no reader.
    """
    if isinstance(snapshot, dict):
        snapshot = TypeSerializerSnapshot.from_dict(snapshot)
    params = _resolve_snapshots(snapshot.params)
    legacy = _versioned.get((snapshot.name, snapshot.version))
    if legacy is not None:
        return legacy(params)
    try:
        serializer = _build(snapshot.name, params)
    except ConfigurationError as e:
        raise StateMigrationError(f"cannot restore serializer {snapshot.name!r}: {e}") from None
    if serializer.version != snapshot.version:
        raise StateMigrationError(
            f"state was written by serializer {snapshot.name!r} format version "
            f"{snapshot.version}, but this streamstate has version {serializer.version} and no "
            f"reader for version {snapshot.version}"
        )
    return serializer


def _no_params(cls: type[TypeSerializer]) -> SerializerFactory:
    def factory(params: dict[str, Any]) -> TypeSerializer:
        return cls()

    return factory


def _list_factory(name: str) -> SerializerFactory:
    def factory(params: dict[str, Any]) -> TypeSerializer:
        return ListSerializer(params["element"], name)

    return factory


def _register_builtins() -> None:
    for cls in (
        basic.BooleanSerializer,
        basic.ByteSerializer,
        basic.ShortSerializer,
        basic.IntSerializer,
        basic.LongSerializer,
        basic.FloatSerializer,
        basic.DoubleSerializer,
        basic.CharSerializer,
        basic.StringSerializer,
        basic.BigIntSerializer,
        basic.BigDecSerializer,
        temporal.SqlDateSerializer,
        temporal.SqlTimeSerializer,
        temporal.SqlTimestampSerializer,
        temporal.InstantSerializer,
        basic.BytesSerializer,
        PickleSerializer,
    ):
        register_serializer(cls.name, _no_params(cls))
    register_serializer("default_key", lambda params: default_key_serializer())
    register_serializer("row", lambda p: RowSerializer(p["fields"], p.get("names")))
    register_serializer("tuple", lambda p: TupleSerializer(p["fields"]))
    for name in ("list", "basic_array", "object_array"):
        register_serializer(name, _list_factory(name))
    register_serializer("primitive_array", lambda p: PrimitiveArraySerializer(p["element"]))
    register_serializer("map", lambda p: MapSerializer(p["key"], p["value"]))
    register_serializer(TTL_SERIALIZER_NAME, lambda p: TtlSerializer(p.get("user")))
    register_serializer(
        "dataclass",
        lambda p: DataclassSerializer(p["class"], p["names"], p["fields"], p.get("cls")),
    )
    register_serializer("avro", lambda p: AvroSerializer(p["schema"]))
    register_snapshot_resolver("avro", resolve_avro)
    register_snapshot_resolver("row", resolve_record)
    register_snapshot_resolver("dataclass", resolve_record)


_register_builtins()
