"""The heap (``"hashmap"``) keyed state backend: state lives as Python objects.

Objects are kept as-is (no serialization on access, ``heap/store.py``); serialization
happens only in :meth:`~HeapKeyedStateBackend.snapshot` /
:meth:`~HeapKeyedStateBackend.snapshot_delta`, which is also where a value the state's
serializer cannot handle is reported (``StateSerializationError``).

Restore is eager: the key groups of this backend's range are read from every
intersecting handle with the serializers the checkpoint recorded. Restored
states that are not re-registered stay in the backend and are written again
by the next snapshot. Registering a descriptor for a restored state checks the
kind and the serializers' compatibility (``StateMigrationError``).
"""

from __future__ import annotations

from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.state.base import KeyedStateBackend, StateEntryTransformer
from streamstate.runtime.state.format.serializers import StateSerializers
from streamstate.runtime.state.heap.entries import HeapStateEntries
from streamstate.runtime.state.heap.store import HeapStore
from streamstate.runtime.state.migration import migrate_heap_table, migrate_holder, needs_migration
from streamstate.runtime.state.registry import register_keyed_backend

__all__ = ["HeapKeyedStateBackend"]


class HeapKeyedStateBackend(KeyedStateBackend[HeapStore]):
    """Keyed state as Python objects in per-key-group dicts (Flink's ``HashMapStateBackend``)."""

    def __init__(
        self,
        operator_name: str,
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        key_serializer: TypeSerializer,
        changelog: bool = False,
    ) -> None:
        super().__init__(operator_name, key_group_range, max_parallelism, key_serializer)
        self.changelog = bool(changelog)
        self._entries: dict[str, HeapStateEntries] = {}

    def _new_store(self, name: str, kind: str, serializers: StateSerializers) -> HeapStore:
        store = HeapStore(name, kind, self._size, serializers, self.current, self.operator_name)
        self._stores[name] = store
        return store

    def _take_store_key_groups(
        self, source: HeapStore, target: HeapStore, source_first: int, key_groups: KeyGroupRange
    ) -> None:
        # a key group's entries are one dict per namespace: hand the dicts over as they are
        first = self._first_key_group
        for namespace, maps in source.namespaces.items():
            into = target.maps(namespace)
            target.born.discard(namespace)  # it holds entries it did not make
            for kg in key_groups:
                into[kg - first] = maps[kg - source_first]

    def _migrate(self, store: HeapStore, serializers: StateSerializers) -> None:
        if needs_migration(store.serializers, serializers):
            migrate_holder(self, store, serializers, migrate_heap_table)

    def state_entry_transformer(self, state_name: str) -> StateEntryTransformer | None:
        store = self._stores.get(state_name)
        if store is None:
            return None
        entries = self._entries.get(state_name)
        if entries is None or entries.store is not store:
            entries = self._entries[state_name] = HeapStateEntries(store)
        return entries

    def dispose(self) -> None:
        for store in self._stores.values():
            store.clear_all()
        self._stores.clear()
        self._handles.clear()
        self._entries.clear()
        self.snapshot_cleanups.clear()
        self.key_selection_listeners.clear()
        self.current.key = None
        self.current.key_group_index = self._size
        self._disposed = True

    def __repr__(self) -> str:
        r = self.key_group_range
        return (
            f"HeapKeyedStateBackend({self.operator_name!r}, key groups [{r.start}, {r.end}], "
            f"states {sorted(self._stores)})"
        )


register_keyed_backend("hashmap", HeapKeyedStateBackend, changelog_options={"changelog": True})
