"""The serializer contract every state key, namespace and value goes through.

The contract itself is public in :mod:`streamstate.common.serializer` and
re-exported here. A :class:`TypeSerializer` turns one Python value into bytes and back. It is
stateless and picklable. ``serialize_many`` / ``deserialize_many`` are the bulk
paths used by snapshots; the default implementation frames single values, and
serializers with a faster vectorised form override both (they must stay
inverse to each other). ``snapshot_configuration`` names the serializer and
its version so a checkpoint can later be checked for compatibility.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from streamstate.common.serializer import TypeSerializer, TypeSerializerSnapshot

__all__ = [
    "ExactValues",
    "FixedWidthBytes",
    "MigratesBytes",
    "PickleSerializer",
    "TypeSerializer",
    "TypeSerializerSnapshot",
    "exact_types",
    "fixed_width",
]

PICKLE_PROTOCOL = 5


@runtime_checkable
class MigratesBytes(Protocol):
    """A serializer that can rewrite another serializer's bytes into its own without
    building the objects (records: rows, dataclasses); a store of bytes (RocksDB) asks it
    first when it migrates state, and builds objects only where it answers ``None``."""

    def migrate_bytes(self, data: bytes, old: TypeSerializer) -> bytes | None: ...


@runtime_checkable
class FixedWidthBytes(Protocol):
    """A serializer that writes every value in the same number of bytes
    (``serialize_many``: the values back to back), so the i-th value of a blob is read,
    or a key's bytes found, without decoding the rest (queryable state searches the
    state-version files by them: ``format/keyed_index.py``)."""

    #: bytes of every value
    fixed_width: int
    #: equal values serialize to equal bytes and unequal ones to unequal bytes (not so for
    #: floats: ``0.0 == -0.0``, ``nan != nan``), so a key is found by its bytes
    canonical_bytes: bool


@runtime_checkable
class ExactValues(Protocol):
    """A serializer whose values of exactly the types ``exact_types`` (not subclasses)
    are immutable and come back from ``deserialize(serialize(value))`` equal and of the
    same type, so a cache of decoded values may hand the written object itself to the
    next reader (the RocksDB backend's in-memory layer, ``state/rocksdb/buffered.py``)."""

    #: the types whose values round-trip exactly (``()``: none)
    exact_types: tuple[type, ...]


def exact_types(serializer: Any) -> tuple[type, ...]:
    """The types whose values ``serializer`` round-trips exactly (see :class:`ExactValues`)."""
    return serializer.exact_types if isinstance(serializer, ExactValues) else ()


def fixed_width(serializer: Any) -> int:
    """The width of every value ``serializer`` writes, 0 when they differ in width."""
    return serializer.fixed_width if isinstance(serializer, FixedWidthBytes) else 0


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


def dumps_unshared(obj: Any, protocol: int = PICKLE_PROTOCOL) -> bytes:
    """Pickle ``obj`` without the pickler's memo: every reference is written out, so shared
    objects load as copies (as a Flink serializer copies each record) and a tree of many
    small objects pickles about ten times faster. Cyclic data, and anything the C pickler
    refuses (classes of the job script), goes through :func:`dumps_portable`."""
    parts = _Parts()
    p = pickle.Pickler(parts, protocol=protocol)
    p.fast = True  # no memo (deprecated flag, still supported by CPython's pickler)
    try:
        p.dump(obj)
    except (ValueError, RecursionError):
        return dumps_portable(obj, protocol)  # a cycle: fast mode refuses it
    except (pickle.PicklingError, AttributeError, TypeError):
        return dumps_portable(obj, protocol)  # classes of the job script: by value
    return dumps_portable(obj, protocol, b"".join(parts))


class _Parts(list):  # type: ignore[type-arg]  # of bytes
    """A pickler's file that keeps the frames it writes, joined once at the end: a
    ``BytesIO`` copies its buffer as it grows and again in ``getvalue`` (a large chunk
    pickles ~20% faster this way)."""

    __slots__ = ()
    write = list.append


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
