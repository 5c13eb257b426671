"""The RocksDB backend's state access: the current key's entry as RocksDB keys and bytes.

A :class:`RocksDBAccess` serializes the current key once per key (cached in
``CurrentKey.key_bytes`` until the key changes) and reads and writes the column family
of its namespace through bound ``get``/``put``/``delete`` (layout: ``columns.py``).
Reads return *copies* (deserialized on every access) and writes serialize at once: a
value the state's serializer cannot handle raises ``StateSerializationError`` from the
write itself, and so does a serialized key or value longer than
:data:`~streamstate.runtime.state.rocksdb.encoding.MAX_VALUE_BYTES` (2^31 - 1, the limit
RocksDB's JNI layer has in Flink). Every write records ``dirty[key] = key group index``
for delta snapshots.

A value or reducing state whose value serializer round-trips its values exactly
(``ExactValues``: ``Types.LONG()``, ``Types.STRING()``, ...) reads the decoded object the
column family's layer keeps (``buffered.py``) instead of decoding the bytes; a write
still serializes at once (and fails, typed, at once).

Window state: ``set_namespace`` binds the access to a column family and a key suffix
(the namespace's bytes, cached per column). ``get``/``put`` of the void namespace, the
hot path, add nothing for windows: while the access is in another namespace, instance
attributes replace them with the namespaced versions.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from streamstate.errors import StateAccessError, StateSerializationError
from streamstate.runtime.serializers.base import exact_types
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.rocksdb.encoding import (
    MAX_VALUE_BYTES,
    map_key_matches,
    too_large,
    unframe_elements,
)
from streamstate.runtime.state.store import StateAccess, raise_without_key, user_key_error

if TYPE_CHECKING:
    from streamstate.runtime.state.rocksdb.columns import StateColumn

__all__ = ["RocksDBAccess"]

_pack_u32 = struct.Struct(">I").pack
#: absent from a dict (no stored object is this)
_UNKNOWN = object()

#: serialized str/int keys an access remembers before it forgets them all
_KNOWN_KEYS_MAX = 65_536

#: methods with a void-namespace fast path, replaced per instance while the access is in
#: another namespace (so the void path pays nothing for windows)
_VOID_FAST = ("get", "put")


class RocksDBAccess(StateAccess):
    """The current key's entry of one :class:`StateColumn` in one namespace."""

    def __init__(self, column: StateColumn) -> None:
        self._column = column
        self._name = column.name
        self._current = column.current
        self._bind(column.cf)
        sers = column.serializers
        self._encode_value = sers.value.serialize
        self._decode_value = sers.value.deserialize
        #: the stored object's bytes: the value's, or the list's framed elements
        self._encode: Any = self._frames if column.kind == "list" else self._encode_value
        self._decode: Any = self._unframe if column.kind == "list" else self._decode_value
        #: the value types whose decoded objects the void column family's layer keeps
        self._exact_types = () if column.kind in ("list", "map") else exact_types(sers.value)
        #: the void column family's layer, and its dicts (its put_object, inlined in put)
        self._layer = column.cf
        self._objects: dict[bytes, Any] = column.cf.objects
        self._entries: dict[bytes, bytes | None] = column.cf.entries
        self._changed_keys: set[bytes] = column.cf.changed
        if sers.user_key is not None:
            self._encode_user_key = sers.user_key.serialize
            self._decode_user_key = sers.user_key.deserialize
        self.namespace: Any = VOID_NAMESPACE
        #: what follows kg + key in this access's RocksDB keys (b"": void namespace)
        self._namespace_suffix = b""
        self._dirty = column.dirty[VOID_NAMESPACE]
        self._released = False
        #: str key -> (key group index, key bytes); ints apart (1 == True, other bytes)
        self._known_str_keys: dict[str, tuple[int, bytes]] = {}
        self._known_int_keys: dict[int, tuple[int, bytes]] = {}

    def _bind(self, cf: Any) -> None:
        self._get = cf.get
        self._put = cf.put
        self._put_object = cf.put_object
        self._delete = cf.delete
        self._iter = cf.iter

    def release(self) -> None:
        """Drop this access's references to the column family (the backend is disposed).

        RocksDB closes a database only when the last column family handle is gone;
        a handle kept alive by user code would otherwise close it later, after
        its directory was deleted, where the failing shutdown flush stalls ~1 s.
        """
        operator_name = self._column.operator_name

        def disposed(*_a: Any, **_k: Any) -> NoReturn:
            raise StateAccessError(
                f"state {self._name!r}: the keyed state backend of operator "
                f"{operator_name!r} is disposed"
            )

        self._get = self._put = self._put_object = self._delete = self._iter = disposed
        self._exact_types = ()  # the void fast paths go through the disposed methods
        self._released = True

    def set_namespace(self, namespace: Any) -> None:
        if namespace is self.namespace:
            return
        column = self._column
        if self._released:
            self._get(b"")  # raises: the backend is disposed
        suffix = column.ns_suffix(namespace)
        self._bind(column.cf_for(namespace))
        attributes = self.__dict__
        if namespace is VOID_NAMESPACE:
            for method in _VOID_FAST:
                attributes.pop(method, None)
        elif not self._namespace_suffix:
            for method in _VOID_FAST:
                attributes[method] = getattr(self, "_namespaced_" + method)
        self.namespace = namespace
        self._namespace_suffix = suffix
        self._dirty = column.dirty_of(namespace)

    def keep_dirty(self) -> None:
        """The column forgot its changes: keep this namespace's (emptied) dirty set."""
        self._dirty.clear()
        self._column.dirty[self.namespace] = self._dirty

    # ---------------------------------------------------------------- keys and bytes
    def _no_key(self) -> NoReturn:
        raise_without_key(self._name, self._column.operator_name)

    def _key_bytes(self) -> bytes:
        """Key group + key bytes of the current key, serialized once per key (and
        remembered per str or int key: a keyed stream meets its keys again and again)."""
        current = self._current
        key_bytes = current.key_bytes
        if key_bytes is not None:
            return key_bytes
        kgi = current.key_group_index
        key = current.key
        key_type = type(key)
        known = (
            self._known_str_keys
            if key_type is str
            else self._known_int_keys
            if key_type is int
            else None
        )
        if known is not None:
            hit = known.get(key)
            if hit is not None and hit[0] == kgi:
                current.key_bytes = hit[1]
                return hit[1]
        if kgi >= self._column.size:
            self._no_key()
        try:
            key_bytes = self._column.key_group_prefixes[
                kgi
            ] + self._column.serializers.key.serialize(current.key)
        except Exception as e:
            raise StateSerializationError(
                self._name,
                self._column.operator_name,
                type(current.key).__qualname__,
                f"the key cannot be serialized ({type(e).__name__}: {e})",
            ) from e
        if len(key_bytes) > MAX_VALUE_BYTES:
            raise StateSerializationError(
                self._name,
                self._column.operator_name,
                type(current.key).__qualname__,
                f"the serialized key has {len(key_bytes)} bytes, more than {MAX_VALUE_BYTES}",
            )
        current.key_bytes = key_bytes
        if known is not None:
            if len(known) >= _KNOWN_KEYS_MAX:
                known.clear()
            known[key] = (kgi, key_bytes)
        return key_bytes

    def _prefix(self) -> bytes:
        """RocksDB key prefix of the current key in the current namespace."""
        key_bytes = self._key_bytes()
        return key_bytes + self._namespace_suffix if self._namespace_suffix else key_bytes

    def _serialized(self, value: Any, dumps: Any) -> bytes:
        try:
            data: bytes = dumps(value)
        except Exception as e:
            raise StateSerializationError(
                self._name,
                self._column.operator_name,
                type(value).__qualname__,
                f"{type(e).__name__}: {e}",
            ) from e
        if len(data) > MAX_VALUE_BYTES:
            raise too_large(self._name, self._column.operator_name, value, len(data))
        return data

    def _write(self, rk: bytes, data: bytes) -> None:
        try:
            self._put(rk, data)
        except Exception as e:
            raise self._column.database.io_error("write", e) from e

    def _remove(self, rk: bytes) -> None:
        try:
            self._delete(rk)
        except Exception as e:
            raise self._column.database.io_error("write", e) from e

    def _changed(self) -> None:
        current = self._current
        self._dirty[current.key] = current.key_group_index

    # ---------------------------------------------------------------- value, list (HOT PATH)
    def get(self) -> Any:
        current = self._current
        key_bytes = current.key_bytes
        if key_bytes is None:
            # a str key met before: its remembered bytes (``_key_bytes``, inlined)
            key = current.key
            hit = self._known_str_keys.get(key) if type(key) is str else None
            if hit is not None and hit[0] == current.key_group_index:
                key_bytes = current.key_bytes = hit[1]
            else:
                key_bytes = self._key_bytes()
        if self._exact_types:
            obj = self._objects.get(key_bytes, _UNKNOWN)
            if obj is not _UNKNOWN:
                return obj
            data = self._get(key_bytes)
            if data is None:
                return None
            obj = self._decode(data)
            if type(obj) in self._exact_types:
                self._objects[key_bytes] = obj  # the layer holds key_bytes now (just read)
            return obj
        data = self._get(key_bytes)
        return None if data is None else self._decode(data)

    def put(self, value: Any) -> None:
        current = self._current
        key_bytes = current.key_bytes
        if key_bytes is None:
            key_bytes = self._key_bytes()
        if value is None:
            self._remove(key_bytes)
        else:
            # the common case inlined: serialize, check the size, put
            try:
                data = self._encode(value)
            except StateSerializationError:
                raise
            except Exception:  # noqa: BLE001 - any serializer error: the slow path re-raises it typed
                data = self._serialized(value, self._encode)  # raises the typed error
            if len(data) > MAX_VALUE_BYTES:
                raise too_large(self._name, self._column.operator_name, value, len(data))
            if type(value) in self._exact_types:
                # the layer's put_object inlined: bytes, changed, decoded object
                entries = self._entries
                entries[key_bytes] = data
                self._changed_keys.add(key_bytes)
                self._objects[key_bytes] = value
                if len(entries) > self._layer.limit:
                    self._put_object(key_bytes, data, value)  # flushes and forgets, typed
            else:
                try:
                    self._put(key_bytes, data)
                except Exception as e:
                    raise self._column.database.io_error("write", e) from e
        self._dirty[current.key] = current.key_group_index

    def _namespaced_get(self) -> Any:
        data = self._get(self._prefix())
        return None if data is None else self._decode(data)

    def _namespaced_put(self, value: Any) -> None:
        prefix = self._prefix()
        if value is None:
            self._remove(prefix)
        else:
            self._write(prefix, self._serialized(value, self._encode))
        self._changed()

    def clear(self) -> None:
        if self._column.kind == "map":
            found = [rk for rk, _, _ in self._scan()]
            if not found:
                return
            for rk in found:
                self._remove(rk)
            self._changed()
            return
        prefix = self._prefix()
        if self._get(prefix) is not None:
            self._remove(prefix)
            self._changed()

    def _frames(self, elements: list[Any]) -> bytes:
        """List state's stored form of ``elements``: ``u32 length`` + bytes, per element."""
        parts: list[bytes] = []
        for element in elements:
            data = self._serialized(element, self._encode_value)
            parts.append(_pack_u32(len(data)))
            parts.append(data)
        return b"".join(parts)

    def _unframe(self, data: bytes) -> list[Any]:
        return unframe_elements(self._column.serializers.value, data)

    def append(self, elements: list[Any]) -> None:
        prefix = self._prefix()
        added = self._frames(elements)
        stored = self._get(prefix)
        data = added if stored is None else stored + added
        if len(data) > MAX_VALUE_BYTES:
            raise too_large(self._name, self._column.operator_name, elements, len(data))
        self._write(prefix, data)
        self._changed()

    # ---------------------------------------------------------------- map state
    def _entry_key(self, user_key: Any) -> bytes:
        try:
            hash(user_key)  # hashability probe only; the stored key is the serialized form
        except TypeError:
            raise user_key_error(self._name, user_key) from None
        user_key_bytes = self._serialized(user_key, self._encode_user_key)
        return self._prefix() + user_key_bytes + _pack_u32(len(user_key_bytes))

    def _scan(self) -> Iterator[tuple[bytes, int, bytes]]:
        """``(rocksdb key, user key start, value bytes)`` of the current key's entries."""
        prefix = self._prefix()
        n = len(prefix)
        it = self._iter()
        it.seek(prefix)
        while it.valid():
            rk = it.key()
            if not rk.startswith(prefix):
                break
            if map_key_matches(rk, n) >= 0:
                yield rk, n, it.value()
            it.next()

    def _user_key(self, rk: bytes, start: int) -> Any:
        return self._decode_user_key(rk[start : len(rk) - 4])

    def get_item(self, key: Any) -> Any:
        data = self._get(self._entry_key(key))
        return None if data is None else self._decode_value(data)

    def put_item(self, key: Any, value: Any) -> None:
        self._write(self._entry_key(key), self._serialized(value, self._encode_value))
        self._changed()

    def put_items(self, items: dict[Any, Any]) -> None:
        entries = [
            (self._entry_key(k), self._serialized(v, self._encode_value)) for k, v in items.items()
        ]
        for rk, data in entries:
            self._write(rk, data)
        self._changed()

    def remove_item(self, user_key: Any) -> None:
        rk = self._entry_key(user_key)
        if self._get(rk) is None:
            return
        self._remove(rk)
        self._changed()

    def contains_item(self, user_key: Any) -> bool:
        return self._get(self._entry_key(user_key)) is not None

    def items(self) -> list[tuple[Any, Any]]:
        return [(self._user_key(rk, s), self._decode_value(v)) for rk, s, v in self._scan()]

    def is_empty(self) -> bool:
        return next(self._scan(), None) is None

    def __repr__(self) -> str:
        return f"RocksDBAccess({self._name!r}, {self.namespace!r})"
