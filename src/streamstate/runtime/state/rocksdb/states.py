"""Column families and state handles of the RocksDB keyed state backend.

Storage layout (one column family per state, raw bytes, no WAL)::

    value / reducing / aggregating:  kg(u16 BE) + key + ns  ->  value bytes
    list:                            kg(u16 BE) + key + ns  ->  frame(elem) frame(elem) ...
    map:       kg(u16 BE) + key + ns + user key + u32(len(user key))  ->  value bytes

``key`` is the backend's key serializer's bytes, ``ns`` the namespace
serializer's. The void namespace is empty bytes: its entries (all state that
is not window state) live in the state's own column family, exactly as
``kg + key``. Every other namespace (a window) lives in a second column family
of the state (``columns.NS_CF_SUFFIX``), with ``ns`` followed by its length
(``u32``) so a key decodes on its own whatever the key serializer; it is
created on the first access in a namespace. In both, a key group is a
contiguous key range.

Window state: ``set_current_namespace`` binds a handle to a column family and
a key suffix (the namespace's bytes are cached per column), and
``merge_namespaces`` (list, reducing, aggregating state) merges the current
key's values of several namespaces into one, as the heap backend does (lists
are concatenated as stored bytes, without deserializing elements).

List state is stored as one value: the elements framed (``u32 length`` +
element bytes) one after the other, so ``add``/``add_all`` append bytes to the
stored value (one read and one write, no merge operator, existing elements are
never deserialized). Map state keeps one entry per user key; the trailing
user-key length makes every RocksDB key decodable on its own and different
(key, user key) pairs never collide, even when the key serializer is not
prefix-free (``"a"`` + ``"bX"`` vs ``"ab"`` + ``"X"``). A per-key prefix scan
checks that length, so entries of a longer key sharing the prefix are skipped.

Unlike the heap backend, reads return *copies* (deserialized on every access)
and writes serialize at once: a value the state's serializer cannot handle
raises ``StateSerializationError`` from ``update``/``add``/``put`` itself, and a
serialized key or value longer than :data:`MAX_VALUE_BYTES` (2^31 - 1, the
limit RocksDB's JNI layer has in Flink) raises it too. Every mutation records
``dirty[key] = kgi`` exactly as the heap backend does, for delta snapshots.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from streamstate.api.state import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    StateDescriptor,
    ValueState,
)
from streamstate.errors import (
    KeySerializationError,
    StateAccessError,
    StateSerializationError,
)
from streamstate.runtime.state.base import (
    checked_list_values,
    state_not_mergeable_error,
    state_without_key_error,
)
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.rocksdb.encoding import (
    MAX_VALUE_BYTES,
    MISSING,
    map_key_matches,
    too_large,
    unframe_elements,
)

if TYPE_CHECKING:
    from streamstate.runtime.state.rocksdb.backend import RocksDBKeyedStateBackend

__all__ = [
    "STATE_CLASSES",
    "RocksDBAggregatingState",
    "RocksDBListState",
    "RocksDBMapState",
    "RocksDBReducingState",
    "RocksDBValueState",
]

_MISSING = MISSING
_pack_u32 = struct.Struct(">I").pack


class _RocksState:
    """Shared plumbing: the column family's bound get/put/delete and the dirty dict."""

    def __init__(
        self, backend: RocksDBKeyedStateBackend, column: Any, descriptor: StateDescriptor
    ) -> None:
        self._backend = backend
        self._col = column
        self._name = column.name
        self._descriptor = descriptor
        self._released = False
        self._bind(column.cf)
        sers = column.serializers
        self._dumps = sers.value.serialize
        self._loads = sers.value.deserialize
        self._namespace: Any = VOID_NAMESPACE
        #: what follows kg + key in this handle's RocksDB keys (b"": void namespace)
        self._nsb = b""
        self._dirty = column.dirty[VOID_NAMESPACE]
        column.handles.append(self)

    def _bind(self, cf: Any) -> None:
        self._get = cf.get
        self._put = cf.put
        self._delete = cf.delete
        self._iter = cf.iter

    def release(self) -> None:
        """Drop this handle's references to the column family (the backend is disposed).

        RocksDB closes a database only when the last column family handle is gone;
        a handle kept alive by user code would otherwise close it later, after
        its directory was deleted, where the failing shutdown flush stalls ~1 s.
        """

        def disposed(*_a: Any, **_k: Any) -> NoReturn:
            raise StateAccessError(
                f"state {self._name!r}: the keyed state backend of operator "
                f"{self._backend.operator_name!r} is disposed"
            )

        self._get = self._put = self._delete = self._iter = disposed
        self._released = True

    #: methods with a void-namespace fast path, replaced per instance while the
    #: handle is in another namespace (so the void path pays nothing for windows)
    _VOID_FAST: tuple[str, ...] = ()

    def set_current_namespace(self, namespace: Any) -> None:
        """Scope the handle to ``namespace`` (the void namespace by default)."""
        if namespace is self._namespace:
            return
        col = self._col
        if self._released:
            self._get(b"")  # raises: the backend is disposed
        nsb = col.ns_suffix(namespace)
        self._bind(col.cf_for(namespace))
        d = self.__dict__
        if namespace is VOID_NAMESPACE:
            for m in self._VOID_FAST:
                d.pop(m, None)
        elif not self._nsb:
            for m in self._VOID_FAST:
                d[m] = getattr(self, "_ns_" + m)
        self._namespace = namespace
        self._nsb = nsb
        self._dirty = col.dirty_of(namespace)

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Merge the current key's values in ``sources`` into ``target`` and remove them.

        For list, reducing and aggregating state (Flink's ``InternalMergingState``):
        lists are concatenated, reduced values reduced, accumulators merged with
        the aggregate function's ``merge``. Used when session windows merge.
        """
        col = self._col
        if col.kind == "map":  # one RocksDB entry per user key: never merged (as Flink)
            self._merge_stored(b"", b"")
        b = self._backend
        base = b._kb or self._base_kb()
        key, kgi = b._key, b._kgi
        merged: Any = None
        for ns in sources:
            if ns == target:
                continue
            cf = col.cf_for(ns)
            rk = base + col.ns_suffix(ns)
            data = cf.get(rk)
            if data is None:
                continue
            try:
                cf.delete(rk)
            except Exception as e:
                raise b._io_error("write", e) from e
            col.dirty_of(ns)[key] = kgi
            merged = data if merged is None else self._merge_stored(merged, data)
        if merged is None:
            return
        cf = col.cf_for(target)
        rk = base + col.ns_suffix(target)
        cur = cf.get(rk)
        data = merged if cur is None else self._merge_stored(cur, merged)
        if len(data) > MAX_VALUE_BYTES:
            raise too_large(self._name, b.operator_name, data, len(data))
        try:
            cf.put(rk, data)
        except Exception as e:
            raise b._io_error("write", e) from e
        col.dirty_of(target)[key] = kgi

    def _merge_stored(self, a: bytes, b: bytes) -> bytes:
        """The stored bytes of two stored values merged (merging state kinds override)."""
        raise state_not_mergeable_error(self._name, self._col.kind)

    def _no_key(self) -> NoReturn:
        raise state_without_key_error(self._name, self._backend.operator_name) from None

    def _base_kb(self) -> bytes:
        """Key group + key bytes of the current key, serialized once per key."""
        kb = self._backend._kb
        if kb is None:
            kb = self._backend._serialize_current_key(self._name)
            if kb is None:
                self._no_key()
        return kb

    def _kb(self) -> bytes:
        """RocksDB key prefix of the current key in the current namespace."""
        kb = self._backend._kb or self._base_kb()
        return kb + self._nsb if self._nsb else kb

    def _ser(self, value: Any, dumps: Any = None) -> bytes:
        try:
            data = (dumps or self._dumps)(value)
        except Exception as e:
            raise StateSerializationError(
                self._name,
                self._backend.operator_name,
                type(value).__qualname__,
                f"{type(e).__name__}: {e}",
            ) from e
        if len(data) > MAX_VALUE_BYTES:
            raise too_large(self._name, self._backend.operator_name, value, len(data))
        return data

    def _write(self, kb: bytes, data: bytes) -> None:
        try:
            self._put(kb, data)
        except Exception as e:
            raise self._backend._io_error("write", e) from e

    def _remove(self, kb: bytes) -> None:
        try:
            self._delete(kb)
        except Exception as e:
            raise self._backend._io_error("write", e) from e

    def _store_folded(self, kb: bytes, had: bool, obj: Any) -> None:
        """Store the result ``obj`` of folding values into the entry at ``kb`` (``None``:
        remove the entry, if there ``had`` been one) and mark the key dirty."""
        if obj is None:
            if not had:
                return
            self._remove(kb)
        else:
            self._write(kb, self._ser(obj))
        b = self._backend
        self._dirty[b._key] = b._kgi

    def clear(self) -> None:
        kb = self._kb()
        if self._get(kb) is not None:
            self._remove(kb)
            b = self._backend
            self._dirty[b._key] = b._kgi

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"


class RocksDBValueState(_RocksState, ValueState):
    """``value()`` is a fresh copy or ``None``; ``update(None)`` removes the entry."""

    _VOID_FAST = ("value", "update")

    def _ns_value(self) -> Any:
        data = self._get(self._kb())
        return None if data is None else self._loads(data)

    def _ns_update(self, value: Any) -> None:
        kb = self._kb()
        if value is None:
            self._remove(kb)
        else:
            self._write(kb, self._ser(value))
        b = self._backend
        self._dirty[b._key] = b._kgi

    # value()/update(): the void namespace's hot path (replaced per instance while
    # the handle is in a window: see _VOID_FAST), so the key prefix is the key's alone
    def value(self) -> Any:
        kb = self._backend._kb or self._base_kb()
        data = self._get(kb)
        return None if data is None else self._loads(data)

    def update(self, value: Any) -> None:
        b = self._backend
        kb = b._kb or self._base_kb()
        if value is None:
            self._remove(kb)
        else:
            # the common case inlined (hot path): serialize, check the size, put
            try:
                data = self._dumps(value)
            except Exception:  # noqa: BLE001 - any serializer error: the slow path re-raises it typed
                data = self._ser(value)  # raises the typed error
            if len(data) > MAX_VALUE_BYTES:
                raise too_large(self._name, b.operator_name, value, len(data))
            try:
                self._put(kb, data)
            except Exception as e:
                raise b._io_error("write", e) from e
        self._dirty[b._key] = b._kgi


class RocksDBListState(_RocksState, ListState):
    """``get()`` is a new list of copies; ``add`` appends bytes; ``None`` elements raise."""

    def _merge_stored(self, a: bytes, b: bytes) -> bytes:
        return a + b  # framed elements: concatenation is the merged list

    def get(self) -> Iterable[Any]:
        data = self._get(self._kb())
        return [] if data is None else unframe_elements(self._col.serializers.value, data)

    def _frames(self, values: list[Any]) -> bytes:
        parts: list[bytes] = []
        for v in values:
            b = self._ser(v)
            parts.append(_pack_u32(len(b)))
            parts.append(b)
        return b"".join(parts)

    def _append(self, values: list[Any]) -> None:
        kb = self._kb()
        add = self._frames(values)
        cur = self._get(kb)
        data = add if cur is None else cur + add
        if len(data) > MAX_VALUE_BYTES:
            raise too_large(self._name, self._backend.operator_name, values, len(data))
        self._write(kb, data)
        b = self._backend
        self._dirty[b._key] = b._kgi

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"You cannot add None to ListState {self._name!r}.")
        self._append([value])

    def _checked(self, values: Any, what: str) -> list[Any]:
        return checked_list_values(values, what, self._name)

    def update(self, values: list[Any]) -> None:
        lst = self._checked(values, "update")
        kb = self._kb()
        if lst:
            data = self._frames(lst)
            if len(data) > MAX_VALUE_BYTES:
                raise too_large(self._name, self._backend.operator_name, values, len(data))
            self._write(kb, data)
        elif self._get(kb) is None:
            return
        else:
            self._remove(kb)
        b = self._backend
        self._dirty[b._key] = b._kgi

    def add_all(self, values: list[Any]) -> None:
        lst = self._checked(values, "add to")
        if lst:
            self._append(lst)


class RocksDBMapState(_RocksState, MapState):
    """One RocksDB entry per user key; removing the last mapping leaves no entry."""

    def __init__(
        self, backend: RocksDBKeyedStateBackend, column: Any, descriptor: StateDescriptor
    ) -> None:
        super().__init__(backend, column, descriptor)
        self._uk_dumps = column.serializers.user_key.serialize
        self._uk_loads = column.serializers.user_key.deserialize

    def _user_key_error(self, key: Any) -> KeySerializationError:
        return KeySerializationError(
            f"MapState {self._name!r}: a user key of type {type(key).__name__!r} is not "
            f"hashable; use a hashable key such as a tuple"
        )

    def _entry_key(self, key: Any) -> bytes:
        try:
            hash(key)  # hashability probe only; the stored key is the serialized form
        except TypeError:
            raise self._user_key_error(key) from None
        ukb = self._ser(key, self._uk_dumps)
        return self._kb() + ukb + _pack_u32(len(ukb))

    def _scan(self) -> Iterator[tuple[bytes, int, bytes]]:
        """``(rocksdb key, user key start, value bytes)`` of the current key's entries."""
        kb = self._kb()
        n = len(kb)
        it = self._iter()
        it.seek(kb)
        while it.valid():
            rk = it.key()
            if not rk.startswith(kb):
                break
            if map_key_matches(rk, n) >= 0:
                yield rk, n, it.value()
            it.next()

    def get(self, key: Any) -> Any:
        data = self._get(self._entry_key(key))
        return None if data is None else self._loads(data)

    def put(self, key: Any, value: Any) -> None:
        self._write(self._entry_key(key), self._ser(value))
        b = self._backend
        self._dirty[b._key] = b._kgi

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        if not dict_value:
            return
        entries = [(self._entry_key(k), self._ser(v)) for k, v in dict_value.items()]
        for rk, data in entries:
            self._write(rk, data)
        b = self._backend
        self._dirty[b._key] = b._kgi

    def remove(self, key: Any) -> None:
        rk = self._entry_key(key)
        if self._get(rk) is None:
            return
        self._remove(rk)
        b = self._backend
        self._dirty[b._key] = b._kgi

    def contains(self, key: Any) -> bool:
        return self._get(self._entry_key(key)) is not None

    def _user_key(self, rk: bytes, start: int) -> Any:
        return self._uk_loads(rk[start : len(rk) - 4])

    def items(self) -> Iterable[tuple[Any, Any]]:
        return [(self._user_key(rk, s), self._loads(v)) for rk, s, v in self._scan()]

    def keys(self) -> Iterable[Any]:
        return [self._user_key(rk, s) for rk, s, _ in self._scan()]

    def values(self) -> Iterable[Any]:
        return [self._loads(v) for _, _, v in self._scan()]

    def is_empty(self) -> bool:
        return next(self._scan(), None) is None

    def clear(self) -> None:
        found = [rk for rk, _, _ in self._scan()]
        if not found:
            return
        for rk in found:
            self._remove(rk)
        b = self._backend
        self._dirty[b._key] = b._kgi


class RocksDBReducingState(_RocksState, ReducingState):
    """``add(v)`` stores ``reduce(current, v)``; ``add(None)`` clears (as the heap backend)."""

    def __init__(
        self, backend: RocksDBKeyedStateBackend, column: Any, descriptor: StateDescriptor
    ) -> None:
        super().__init__(backend, column, descriptor)
        self._reduce = descriptor.get_reduce_function().reduce  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass

    def _merge_stored(self, a: bytes, b: bytes) -> bytes:
        return self._ser(self._reduce(self._loads(a), self._loads(b)))

    def add_many(self, values: list[Any]) -> None:
        """``add`` of every value in order, with one read and one write."""
        kb = self._kb()
        data = self._get(kb)
        cur = None if data is None else self._loads(data)
        for value in values:
            if value is None:
                cur = None
            else:
                cur = value if cur is None else self._reduce(cur, value)
        self._store_folded(kb, data is not None, cur)

    def get(self) -> Any:
        data = self._get(self._kb())
        return None if data is None else self._loads(data)

    def add(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        kb = self._kb()
        data = self._get(kb)
        new = value if data is None else self._reduce(self._loads(data), value)
        if new is None:
            self._remove(kb)
        else:
            self._write(kb, self._ser(new))
        b = self._backend
        self._dirty[b._key] = b._kgi


class RocksDBAggregatingState(_RocksState, AggregatingState):
    """Stores the accumulator; ``get()`` is ``get_result(acc)`` or ``None``; ``add(None)`` clears."""

    def __init__(
        self, backend: RocksDBKeyedStateBackend, column: Any, descriptor: StateDescriptor
    ) -> None:
        super().__init__(backend, column, descriptor)
        self._agg = descriptor.get_agg_function()  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass

    def _merge_stored(self, a: bytes, b: bytes) -> bytes:
        return self._ser(self._agg.merge(self._loads(a), self._loads(b)))

    def add_many(self, values: list[Any]) -> None:
        """``add`` of every value in order, with one read and one write."""
        kb = self._kb()
        data = self._get(kb)
        acc = None if data is None else self._loads(data)
        agg = self._agg
        for value in values:
            if value is None:
                acc = None
                continue
            acc = agg.add(value, agg.create_accumulator() if acc is None else acc)
        self._store_folded(kb, data is not None, acc)

    def get(self) -> Any:
        data = self._get(self._kb())
        return None if data is None else self._agg.get_result(self._loads(data))

    def add(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        kb = self._kb()
        data = self._get(kb)
        acc = self._agg.create_accumulator() if data is None else self._loads(data)
        acc = self._agg.add(value, acc)
        if acc is None:
            self._remove(kb)
        else:
            self._write(kb, self._ser(acc))
        b = self._backend
        self._dirty[b._key] = b._kgi


#: state kind -> handle class
STATE_CLASSES: dict[str, type[_RocksState]] = {
    "value": RocksDBValueState,
    "list": RocksDBListState,
    "map": RocksDBMapState,
    "reducing": RocksDBReducingState,
    "aggregating": RocksDBAggregatingState,
}
