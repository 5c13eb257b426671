"""The heap backend's side of the keyed-store contract: stored objects in Python dicts.

A :class:`HeapStore` holds one state's objects: per namespace, a list indexed by key
group index of plain dicts ``{key: stored object}``. The stored object is the state's
value itself (a value, a list of elements, a dict for map state, a reduced value or an
accumulator): nothing is serialized on access. A :class:`HeapAccess` keeps the list of
its namespace, so reading the current key's entry is ``dicts[key_group_index].get(key)``.

Delta tracking is one dict per namespace, ``dirty[key] = key group index``, written on
every mutation (a key belongs to exactly one key group). At delta time an entry still
present is written as a put, an absent one as a tombstone, except in a namespace an
access created since the last delta (``KeyedStore.born``): it had no entries to remove.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn

from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.format.serializers import StateSerializers
from streamstate.runtime.state.store import (
    CurrentKey,
    KeyedStore,
    StateAccess,
    raise_without_key,
    user_key_error,
)

__all__ = ["HeapAccess", "HeapStore"]

_MISSING: Any = object()


class HeapStore(KeyedStore):
    """All objects of one state for the key groups of one heap backend."""

    def __init__(
        self,
        name: str,
        kind: str,
        size: int,
        serializers: StateSerializers,
        current: CurrentKey,
        operator_name: str,
    ) -> None:
        super().__init__(name, kind, size, serializers)
        self.current = current
        self.operator_name = operator_name
        #: namespace -> [ {key: stored object} per key group ]
        self.namespaces: dict[Any, list[dict[Any, Any]]] = {}
        #: the accesses of this state's handles (rebound when their namespace is pruned)
        self.accesses: list[HeapAccess] = []
        self.maps(VOID_NAMESPACE)

    def maps(self, namespace: Any) -> list[dict[Any, Any]]:
        """The per-key-group dicts of ``namespace`` (created empty on first use)."""
        maps = self.namespaces.get(namespace)
        if maps is None:
            maps = self.namespaces[namespace] = [{} for _ in range(self.size)]
            self.dirty_of(namespace)
        return maps

    def access(self) -> HeapAccess:
        access = HeapAccess(self)
        self.accesses.append(access)
        return access

    def entries(self, kgi: int) -> Iterator[tuple[Any, list[Any], list[Any]]]:
        for namespace, maps in self.namespaces.items():
            entries = maps[kgi]
            if entries:
                yield namespace, list(entries), list(entries.values())

    def lookup(
        self, kgi: int, namespace: Any, keys: list[Any]
    ) -> tuple[list[Any], list[Any], list[Any]]:
        entries = self.maps(namespace)[kgi]
        present = [k for k in keys if k in entries]
        return present, [entries[k] for k in present], [k for k in keys if k not in entries]

    def holds_entries(self, namespace: Any) -> bool:
        maps = self.namespaces.get(namespace)
        return maps is not None and any(maps)

    def load(self, kgi: int, namespace: Any, keys: list[Any], stored: list[Any]) -> None:
        self.born.discard(namespace)  # restored entries are the base's
        self.maps(namespace)[kgi].update(zip(keys, stored, strict=True))

    def remove(self, kgi: int, namespace: Any, keys: list[Any]) -> None:
        self.born.discard(namespace)
        entries = self.maps(namespace)[kgi]
        for key in keys:
            entries.pop(key, None)

    def keys(self) -> list[Any]:
        out: list[Any] = []
        for entries in self.namespaces[VOID_NAMESPACE]:
            if entries:
                out.extend(entries)
        return out

    def keys_and_namespaces(self) -> list[tuple[Any, Any]]:
        out: list[tuple[Any, Any]] = []
        for kgi in range(self.size):
            for namespace, maps in self.namespaces.items():
                out.extend((key, namespace) for key in maps[kgi])
        return out

    def clear_changes(self) -> None:
        """Forget all changes; also drops the namespaces other than the void one that hold
        no entry any more (windows that were purged), so per-window state does not leave
        an empty namespace behind for every window ever used. An access whose namespace
        was dropped is rebound (re-creating just that namespace)."""
        for dirty in self.dirty.values():
            dirty.clear()
        # before the rebinding below, which creates the dropped (empty) namespaces anew
        self.born.clear()
        if len(self.namespaces) > 1:
            empty = [
                namespace
                for namespace, maps in self.namespaces.items()
                if namespace is not VOID_NAMESPACE and not any(maps)
            ]
            for namespace in empty:
                del self.namespaces[namespace]
                del self.dirty[namespace]
            if empty:
                for access in self.accesses:
                    if access.namespace not in self.namespaces:
                        access.set_namespace(access.namespace)

    def clear_all(self) -> None:
        self.namespaces.clear()
        self.dirty.clear()
        self.born.clear()
        self.accesses.clear()
        self.maps(VOID_NAMESPACE)

    def __len__(self) -> int:
        """Number of (namespace, key) entries."""
        return sum(len(m) for maps in self.namespaces.values() for m in maps)


class HeapAccess(StateAccess):
    """The current key's entry in one namespace of a :class:`HeapStore` (HOT PATH)."""

    __slots__ = ("_store", "_current", "_maps", "_dirty", "namespace")

    def __init__(self, store: HeapStore) -> None:
        self._store = store
        self._current = store.current
        self.namespace: Any = VOID_NAMESPACE
        self._maps = store.maps(VOID_NAMESPACE)
        self._dirty = store.dirty[VOID_NAMESPACE]

    def set_namespace(self, namespace: Any) -> None:
        self.namespace = namespace
        store = self._store
        maps = store.namespaces.get(namespace)
        if maps is None:  # a namespace without entries: its removals need no tombstone
            maps = store.maps(namespace)
            store.born.add(namespace)
        self._maps = maps
        self._dirty = store.dirty[namespace]

    def _no_key(self) -> NoReturn:
        raise_without_key(self._store.name, self._store.operator_name)

    def _entries(self) -> dict[Any, Any]:
        """The dict of the current key group."""
        try:
            return self._maps[self._current.key_group_index]
        except IndexError:
            self._no_key()

    def get(self) -> Any:
        current = self._current
        try:
            return self._maps[current.key_group_index].get(current.key)
        except IndexError:
            self._no_key()

    def put(self, value: Any) -> None:
        current = self._current
        key = current.key
        try:
            entries = self._maps[current.key_group_index]
        except IndexError:
            self._no_key()
        if value is None:
            entries.pop(key, None)
        else:
            entries[key] = value
        self._dirty[key] = current.key_group_index

    def clear(self) -> None:
        current = self._current
        key = current.key
        if self._entries().pop(key, _MISSING) is not _MISSING:
            self._dirty[key] = current.key_group_index

    def append(self, elements: list[Any]) -> None:
        current = self._current
        key = current.key
        entries = self._entries()
        stored = entries.get(key)
        if stored is None:
            entries[key] = elements
        else:
            stored.extend(elements)
        self._dirty[key] = current.key_group_index

    # ---------------------------------------------------------------- map state
    def get_item(self, key: Any) -> Any:
        mapping = self._entries().get(self._current.key)
        if mapping is None:
            return None
        try:
            return mapping.get(key)
        except TypeError:
            raise user_key_error(self._store.name, key) from None

    def put_item(self, key: Any, value: Any) -> None:
        current = self._current
        entries = self._entries()
        mapping = entries.get(current.key)
        try:
            if mapping is None:
                entries[current.key] = {key: value}
            else:
                mapping[key] = value
        except TypeError:
            raise user_key_error(self._store.name, key) from None
        self._dirty[current.key] = current.key_group_index

    def put_items(self, items: dict[Any, Any]) -> None:
        current = self._current
        key = current.key
        entries = self._entries()
        mapping = entries.get(key)
        new = mapping is None
        if mapping is None:
            mapping = {}
        for user_key, value in items.items():
            try:
                mapping[user_key] = value
            except TypeError:
                raise user_key_error(self._store.name, user_key) from None
        if new:
            entries[key] = mapping
        self._dirty[key] = current.key_group_index

    def remove_item(self, user_key: Any) -> None:
        current = self._current
        key = current.key
        entries = self._entries()
        mapping = entries.get(key)
        if mapping is None:
            return
        try:
            if mapping.pop(user_key, _MISSING) is _MISSING:
                return
        except TypeError:
            raise user_key_error(self._store.name, user_key) from None
        if not mapping:
            del entries[key]
        self._dirty[key] = current.key_group_index

    def contains_item(self, user_key: Any) -> bool:
        mapping = self._entries().get(self._current.key)
        try:
            return mapping is not None and user_key in mapping
        except TypeError:
            raise user_key_error(self._store.name, user_key) from None

    def items(self) -> list[tuple[Any, Any]]:
        mapping = self._entries().get(self._current.key)
        return [] if mapping is None else list(mapping.items())

    def is_empty(self) -> bool:
        return not self._entries().get(self._current.key)
