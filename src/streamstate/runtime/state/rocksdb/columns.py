"""The RocksDB backend's side of the keyed-store contract: one state's column families.

Storage layout (one column family per state, raw bytes, no WAL)::

    value / reducing / aggregating:  kg(u16 BE) + key + ns  ->  value bytes
    list:                            kg(u16 BE) + key + ns  ->  frame(elem) frame(elem) ...
    map:       kg(u16 BE) + key + ns + user key + u32(len(user key))  ->  value bytes

``key`` is the backend's key serializer's bytes, ``ns`` the namespace serializer's. The
void namespace is empty bytes: its entries (all state that is not window state) live in
the state's own column family, exactly as ``kg + key``. Every other namespace (a window)
lives in a second column family of the state, named ``<state name>`` +
:data:`NS_CF_SUFFIX`, with ``ns`` followed by its length (``u32``) so a key decodes on
its own whatever the key serializer; it is created on the first access in a namespace.
In both, a key group is a contiguous key range.

List state is stored as one value: the elements framed (``u32 length`` + element bytes)
one after the other, so an append writes bytes after the stored value (one read and one
write, no merge operator, existing elements are never deserialized). Map state keeps one
entry per user key; the trailing user-key length makes every RocksDB key decodable on
its own and different (key, user key) pairs never collide, even when the key serializer
is not prefix-free (``"a"`` + ``"bX"`` vs ``"ab"`` + ``"X"``). A per-key prefix scan
checks that length, so entries of a longer key sharing the prefix are skipped.

A :class:`StateColumn` serves the bulk side of the contract (snapshots, deltas,
restores, listings) by scanning and writing its column families;
``rocksdb/access.py`` serves the per-record side.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any

from streamstate.errors import StateSerializationError
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.format.serializers import StateSerializers
from streamstate.runtime.state.rocksdb.access import RocksDBAccess
from streamstate.runtime.state.rocksdb.encoding import (
    MAX_VALUE_BYTES,
    frame_elements,
    map_key_matches,
    unframe_elements,
)
from streamstate.runtime.state.rocksdb.encoding import (
    MISSING as _MISSING,
)
from streamstate.runtime.state.store import CurrentKey, KeyedStore

__all__ = ["NS_CF_SUFFIX", "ColumnFamilies", "StateColumn"]

_KG = struct.Struct(">H")
_U32 = struct.Struct(">I")
#: name suffix of a state's namespaced column family (RocksDB rejects NUL in names)
NS_CF_SUFFIX = "\x1fnamespaces"
#: bound of the per-column cache of serialized namespaces (cleared when full)
_NS_CACHE_MAX = 4096


class ColumnFamilies:
    """What a column needs of its backend's database: column families and batched writes.

    ``open(cf name, state name)`` opens or creates a column family; ``write(cf, batch)``
    writes ``(key, value or None for delete)`` pairs; ``io_error(what, e)`` is the typed
    error of a failed database operation.
    """

    def __init__(
        self,
        open_cf: Callable[[str, str], Any],
        write: Callable[[Any, list[tuple[bytes, bytes | None]]], None],
        io_error: Callable[[str, BaseException], Exception],
    ) -> None:
        self.open = open_cf
        self.write = write
        self.io_error = io_error


class StateColumn(KeyedStore):
    """One state's column families (see the module docstring).

    ``serializers`` are the ones the stored bytes are written with; ``key_group_prefixes``
    are the ``u16`` prefixes of the backend's key groups, by key group index.
    """

    def __init__(
        self,
        name: str,
        kind: str,
        cf: Any,
        serializers: StateSerializers,
        *,
        current: CurrentKey,
        first_key_group: int,
        key_group_prefixes: list[bytes],
        operator_name: str,
        database: ColumnFamilies,
    ) -> None:
        super().__init__(name, kind, len(key_group_prefixes), serializers)
        self.cf = cf
        #: the column family of every non-void namespace (``None`` until first needed)
        self.ns_cf: Any = None
        self.current = current
        self.first_key_group = first_key_group
        self.key_group_prefixes = key_group_prefixes
        self.operator_name = operator_name
        self.database = database
        #: the accesses of this state's handles (released on dispose, re-bound on pruning)
        self.accesses: list[RocksDBAccess] = []
        self._ns_suffix: dict[Any, bytes] = {}

    @property
    def ns_cf_name(self) -> str:
        return self.name + NS_CF_SUFFIX

    def access(self) -> RocksDBAccess:
        access = RocksDBAccess(self)
        self.accesses.append(access)
        return access

    # ---------------------------------------------------------------- namespaces
    def ns_suffix(self, namespace: Any) -> bytes:
        """What follows ``kg + key`` in a RocksDB key of ``namespace``.

        Empty for the void namespace; else the namespace serializer's bytes and
        their length (``u32``), so every key of the namespaced column family
        decodes on its own (the key serializer need not be prefix-free).
        """
        if namespace is VOID_NAMESPACE:
            return b""
        cache: dict[Any, bytes] | None = self._ns_suffix
        try:
            suffix = cache.get(namespace)  # type: ignore[union-attr]  # the cache is set just above
        except TypeError:  # unhashable namespace: serialize every time
            suffix = None
            cache = None
        if suffix is None:
            try:
                namespace_bytes = self.serializers.namespace.serialize(namespace)
            except Exception as e:
                raise StateSerializationError(
                    self.name,
                    self.operator_name,
                    type(namespace).__qualname__,
                    f"the namespace cannot be serialized ({type(e).__name__}: {e})",
                ) from e
            suffix = namespace_bytes + _U32.pack(len(namespace_bytes))
            if cache is not None:
                if len(cache) >= _NS_CACHE_MAX:
                    cache.clear()
                cache[namespace] = suffix
        return suffix

    def cf_for(self, namespace: Any) -> Any:
        """The column family holding ``namespace`` (creates the namespaced one if needed)."""
        if namespace is VOID_NAMESPACE:
            return self.cf
        return self.ns_cf if self.ns_cf is not None else self.namespaced_cf()

    def namespaced_cf(self) -> Any:
        """The column family of the non-void namespaces (created on first use)."""
        if self.ns_cf is None:
            self.ns_cf = self.database.open(self.ns_cf_name, self.name)
        return self.ns_cf

    def decode_ns_prefix(self, prefix: bytes) -> tuple[Any, Any]:
        """``(key, namespace)`` of a namespaced column family's ``kg + key + ns + u32`` prefix."""
        (nlen,) = _U32.unpack_from(prefix, len(prefix) - 4)
        end = len(prefix) - 4 - nlen
        ns = self.serializers.namespace.deserialize(prefix[end : len(prefix) - 4])
        return self.serializers.key.deserialize(prefix[2:end]), ns

    # ---------------------------------------------------------------- encoding
    def encode(self, obj: Any) -> bytes:
        """Stored bytes of a value/list object (not map state)."""
        sers = self.serializers
        data = frame_elements(sers.value, obj) if self.kind == "list" else sers.value.serialize(obj)
        if len(data) > MAX_VALUE_BYTES:
            raise StateSerializationError(
                self.name,
                self.operator_name,
                type(obj).__qualname__,
                f"{len(data)} bytes is more than the {MAX_VALUE_BYTES} bytes a value may have",
            )
        return data

    def decode(self, data: bytes) -> Any:
        if self.kind == "list":
            return unframe_elements(self.serializers.value, data)
        return self.serializers.value.deserialize(data)

    def scan(self, lo: bytes, hi: bytes | None, cf: Any = None) -> Iterator[tuple[bytes, bytes]]:
        """``(RocksDB key, value)`` from ``lo`` up to ``hi`` (``None``: every key starting
        with ``lo``) in ``cf`` (default: the void namespace's)."""
        it = (self.cf if cf is None else cf).iter()
        it.seek(lo)
        while it.valid():
            rk = it.key()
            if hi is not None and rk >= hi:
                break
            if not rk.startswith(lo) and hi is None:
                break
            yield rk, it.value()
            it.next()

    def read(self, prefix: bytes, cf: Any = None) -> Any:
        """The stored object of RocksDB key prefix ``prefix`` (a dict for map state) or
        ``MISSING``. ``cf``: the column family (default: the void namespace's)."""
        cf = self.cf if cf is None else cf
        if self.kind != "map":
            data = cf.get(prefix)
            return _MISSING if data is None else self.decode(data)
        sers = self.serializers
        assert sers.user_key is not None  # map state always has a user-key serializer
        out = {}
        for rk, v in self.scan(prefix, None, cf):
            if map_key_matches(rk, len(prefix)) >= 0:
                out[sers.user_key.deserialize(rk[len(prefix) : len(rk) - 4])] = (
                    sers.value.deserialize(v)
                )
        return out if out else _MISSING

    def write(
        self, batch: list[tuple[bytes, bytes | None]], prefix: bytes, obj: Any, cf: Any
    ) -> None:
        """Add to ``batch`` what replaces the object at ``prefix`` of ``cf`` with ``obj``."""
        if self.kind != "map":
            batch.append((prefix, self.encode(obj)))
            return
        self.delete(batch, prefix, cf)
        sers = self.serializers
        assert sers.user_key is not None  # map state always has a user-key serializer
        for user_key, value in obj.items():
            user_key_bytes = sers.user_key.serialize(user_key)
            rk = prefix + user_key_bytes + _U32.pack(len(user_key_bytes))
            batch.append((rk, sers.value.serialize(value)))

    def delete(self, batch: list[tuple[bytes, bytes | None]], prefix: bytes, cf: Any) -> None:
        """Add to ``batch`` what removes the object at ``prefix`` of ``cf``."""
        if self.kind != "map":
            batch.append((prefix, None))
            return
        for rk, _ in self.scan(prefix, None, cf):
            if map_key_matches(rk, len(prefix)) >= 0:
                batch.append((rk, None))

    def apply(self, batch: list[tuple[bytes, bytes | None]], cf: Any = None) -> None:
        """Write ``batch`` into ``cf`` (default: the void namespace's), in order."""
        if batch:
            self.database.write(self.cf if cf is None else cf, batch)

    def prefix_of(self, rk: bytes) -> bytes:
        """The (key group, key, namespace) prefix of a stored RocksDB key."""
        if self.kind == "map":
            (ulen,) = _U32.unpack_from(rk, len(rk) - 4)
            return rk[: len(rk) - 4 - ulen]
        return rk

    def decode_key(self, rk: bytes) -> tuple[bytes, Any]:
        """``(prefix, key)`` of a stored RocksDB key of the void namespace."""
        prefix = self.prefix_of(rk)
        return prefix, self.serializers.key.deserialize(prefix[2:])

    def _key_prefix(self, kgi: int, key: Any, namespace: Any) -> bytes:
        try:
            key_bytes = self.serializers.key.serialize(key)
        except Exception as e:
            raise StateSerializationError(
                self.name, self.operator_name, type(key).__qualname__, str(e)
            ) from e
        return self.key_group_prefixes[kgi] + key_bytes + self.ns_suffix(namespace)

    def _key_group_bounds(self, kgi: int) -> tuple[bytes, bytes | None]:
        key_group = self.first_key_group + kgi
        return _KG.pack(key_group), _KG.pack(key_group + 1) if key_group < 0xFFFF else None

    # ---------------------------------------------------------------- the contract's bulk side
    def _grouped(
        self, rows: Iterator[tuple[bytes, bytes]], key_of: Callable[[bytes], Any]
    ) -> tuple[list[Any], list[Any]]:
        """``(keys, stored objects)`` of the rows of one namespace (``key_of(prefix)``)."""
        keys: list[Any] = []
        values: list[Any] = []
        if self.kind != "map":
            for rk, v in rows:
                keys.append(key_of(rk))
                values.append(self.decode(v))
            return keys, values
        sers = self.serializers
        assert sers.user_key is not None  # map state always has a user-key serializer
        mappings: dict[bytes, dict[Any, Any]] = {}
        for rk, v in rows:
            prefix = self.prefix_of(rk)
            mapping = mappings.get(prefix)
            if mapping is None:
                mapping = mappings[prefix] = {}
                keys.append(key_of(prefix))
                values.append(mapping)
            user_key = sers.user_key.deserialize(rk[len(prefix) : len(rk) - 4])
            mapping[user_key] = sers.value.deserialize(v)
        return keys, values

    def entries(self, kgi: int) -> Iterator[tuple[Any, list[Any], list[Any]]]:
        lo, hi = self._key_group_bounds(kgi)
        key_of = self.serializers.key.deserialize
        if self.kind == "map":
            keys, values = self._grouped(self.scan(lo, hi), lambda prefix: key_of(prefix[2:]))
        else:  # one entry a key: the key group's rows in one call, decoded in bulk
            rows = self.cf.items(lo, hi)
            keys = [key_of(rk[2:]) for rk, _ in rows]
            decode = self.decode if self.kind == "list" else self.serializers.value.deserialize
            values = [decode(v) for _, v in rows]
        if keys:
            yield VOID_NAMESPACE, keys, values
        if self.ns_cf is None:
            return
        # namespaced rows: split per namespace (a namespace's rows are not contiguous)
        per_namespace: dict[bytes, list[tuple[bytes, bytes]]] = {}
        for rk, v in self.scan(lo, hi, self.ns_cf):
            prefix = self.prefix_of(rk)
            (nlen,) = _U32.unpack_from(prefix, len(prefix) - 4)
            suffix = prefix[len(prefix) - 4 - nlen :]
            per_namespace.setdefault(suffix, []).append((rk, v))
        for suffix, rows in per_namespace.items():
            namespace = self.serializers.namespace.deserialize(suffix[:-4])

            def key_before(prefix: bytes, suffix_length: int = len(suffix)) -> Any:
                return key_of(prefix[2 : len(prefix) - suffix_length])

            keys, values = self._grouped(iter(rows), key_before)
            yield namespace, keys, values

    def lookup(
        self, kgi: int, namespace: Any, keys: list[Any]
    ) -> tuple[list[Any], list[Any], list[Any]]:
        cf = self.cf_for(namespace)
        present: list[Any] = []
        values: list[Any] = []
        absent: list[Any] = []
        for key in keys:
            obj = self.read(self._key_prefix(kgi, key, namespace), cf)
            if obj is _MISSING:
                absent.append(key)
            else:
                present.append(key)
                values.append(obj)
        return present, values, absent

    def load(self, kgi: int, namespace: Any, keys: list[Any], stored: list[Any]) -> None:
        cf = self.cf_for(namespace)
        batch: list[tuple[bytes, bytes | None]] = []
        for key, obj in zip(keys, stored, strict=True):
            self.write(batch, self._key_prefix(kgi, key, namespace), obj, cf)
        self.apply(batch, cf)

    def remove(self, kgi: int, namespace: Any, keys: list[Any]) -> None:
        cf = self.cf_for(namespace)
        batch: list[tuple[bytes, bytes | None]] = []
        for key in keys:
            self.delete(batch, self._key_prefix(kgi, key, namespace), cf)
        self.apply(batch, cf)

    def keys(self) -> list[Any]:
        seen: dict[bytes, Any] = {}
        for rk, _ in self.scan(b"", None):
            prefix, key = self.decode_key(rk)
            if prefix not in seen:
                seen[prefix] = key
        return list(seen.values())

    def keys_and_namespaces(self) -> list[tuple[Any, Any]]:
        """Every ``(key, namespace)`` with a value (void namespace first, then the windows
        of each key group), in key group order."""
        out = [(key, VOID_NAMESPACE) for key in self.keys()]
        if self.ns_cf is None:
            return out
        seen: set[bytes] = set()
        for rk, _ in self.scan(b"", None, self.ns_cf):
            prefix = self.prefix_of(rk)
            if prefix not in seen:
                seen.add(prefix)
                out.append(self.decode_ns_prefix(prefix))
        return out

    def clear_changes(self) -> None:
        """Forget the recorded changes; drops the dirty sets of non-void namespaces
        (windows come and go) except those accesses are bound to (kept, emptied)."""
        void = self.dirty[VOID_NAMESPACE]
        void.clear()
        if len(self.dirty) > 1:
            self.dirty = {VOID_NAMESPACE: void}
            for access in self.accesses:
                if access.namespace is not VOID_NAMESPACE:
                    access.keep_dirty()
        if len(self._ns_suffix) > 64:
            self._ns_suffix.clear()
