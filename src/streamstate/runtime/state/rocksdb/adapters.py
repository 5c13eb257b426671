"""Adapters that let the shared keyed formats (``runtime/state/format/keyed.py``) read and
write RocksDB columns as if they were heap tables: per key group ``(keys, values)`` views
for the snapshot writer, dirty-value views for deltas, and sinks for restores."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamstate.errors import StateSerializationError
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.rocksdb.encoding import _KG_PACK
from streamstate.runtime.state.rocksdb.encoding import MISSING as _MISSING

__all__ = ["DirtyValues", "Entries", "Sinks"]


class Entries:
    """``(keys, values)`` of one key group, shaped as the dict the heap writer iterates."""

    __slots__ = ("keys", "vals")

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self.vals: list[Any] = []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys)

    def values(self) -> list[Any]:
        return self.vals

    def __bool__(self) -> bool:
        return bool(self.keys)


class DirtyValues:
    """``namespaces[ns][kgi]`` for the heap delta writer: current objects of dirty keys."""

    def __init__(self, col: Any, namespace: Any = VOID_NAMESPACE) -> None:
        self.col = col
        self.namespace = namespace

    def __getitem__(self, kgi: int) -> _KgView:
        return _KgView(self.col, kgi, self.namespace)


class _KgView:
    __slots__ = ("col", "prefix", "cache", "suffix", "cf")

    def __init__(self, col: Any, kgi: int, namespace: Any) -> None:
        self.col = col
        self.prefix = _KG_PACK(col.backend._start + kgi)
        self.suffix = col.ns_suffix(namespace)
        self.cf = col.cf_for(namespace)
        self.cache: dict[Any, Any] = {}

    def _get(self, key: Any) -> Any:
        v = self.cache.get(key, _MISSING)
        if v is _MISSING:
            try:
                kb = self.prefix + self.col.serializers.key.serialize(key) + self.suffix
            except Exception as e:
                raise StateSerializationError(
                    self.col.name, self.col.backend.operator_name, type(key).__qualname__, str(e)
                ) from e
            v = self.cache[key] = self.col.read(kb, self.cf)
        return v

    def __contains__(self, key: Any) -> bool:
        return self._get(key) is not _MISSING

    def __getitem__(self, key: Any) -> Any:
        v = self._get(key)
        if v is _MISSING:
            raise KeyError(key)
        return v


class Sinks:
    __slots__ = ("col", "namespace")

    def __init__(self, col: Any, namespace: Any = VOID_NAMESPACE) -> None:
        self.col = col
        self.namespace = namespace

    def __getitem__(self, kgi: int) -> _KgSink:
        return _KgSink(self.col, kgi, self.namespace)


class _KgSink:
    """Writes restored/replayed ``{key: object}`` of one key group and namespace into RocksDB."""

    __slots__ = ("col", "prefix", "suffix", "cf")

    def __init__(self, col: Any, kgi: int, namespace: Any) -> None:
        self.col = col
        self.prefix = _KG_PACK(col.backend._start + kgi)
        self.suffix = col.ns_suffix(namespace)
        self.cf = col.cf_for(namespace)

    def _kb(self, key: Any) -> bytes:
        return self.prefix + self.col.serializers.key.serialize(key) + self.suffix

    def update(self, pairs: Any) -> None:
        batch: list[tuple[bytes, bytes | None]] = []
        for key, obj in pairs:
            self.col.write(batch, self._kb(key), obj, self.cf)
        self.col.backend._apply(self.col, batch, self.cf)

    def pop(self, key: Any, default: Any = None) -> Any:
        batch: list[tuple[bytes, bytes | None]] = []
        self.col.delete(batch, self._kb(key), self.cf)
        self.col.backend._apply(self.col, batch, self.cf)
        return default
