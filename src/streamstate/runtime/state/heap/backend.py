"""The heap (``"hashmap"``) keyed state backend: state lives as Python objects.

Objects are kept as-is (no serialization on access); serialization happens only
in :meth:`HeapKeyedStateBackend.snapshot` / :meth:`~HeapKeyedStateBackend.snapshot_delta`,
which is also where a value the state's serializer cannot handle is reported
(``StateSerializationError``).

Restore is eager: the key groups of this backend's range are read from every
intersecting handle with the serializers the checkpoint recorded. Restored
states that are not re-registered stay in the backend and are written again
by the next snapshot. Registering a descriptor for a restored state checks the
kind and the serializers' compatibility (``StateMigrationError``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from streamstate.api.state import State, StateDescriptor
from streamstate.errors import (
    StateAccessError,
)
from streamstate.runtime.checkpoint.handles import KeyGroupsStateHandle
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.state import restore_meta as rm
from streamstate.runtime.state.base import KeyedSnapshot, KeyedStateBackend, StateEntryTransformer
from streamstate.runtime.state.format import keyed as fmt
from streamstate.runtime.state.format.serializers import StateSerializers
from streamstate.runtime.state.heap.entries import HeapStateEntries
from streamstate.runtime.state.heap.states import STATE_CLASSES
from streamstate.runtime.state.heap.table import StateTable
from streamstate.runtime.state.migration import migrate_heap_table, migrate_holder, needs_migration
from streamstate.runtime.state.registry import register_keyed_backend

__all__ = ["HeapKeyedStateBackend"]


_ATOMIC_KEY_TYPES = frozenset({str, int, bytes, float, bool, type(None)})


class HeapKeyedStateBackend(KeyedStateBackend):
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
        #: checkpoints are incremental (``state.changelog.enabled``; ``checkpoint/changelog.py``)
        self.changelog = bool(changelog)
        self._start = key_group_range.start
        self._n = len(key_group_range)
        self._key: Any = None
        #: current key group index; ``_n`` (out of range) until a key is set
        self._kgi = self._n
        self._tables: dict[str, StateTable] = {}
        self._entries: dict[str, HeapStateEntries] = {}

    # ------------------------------------------------------------------- hot path
    def set_current_key(self, key: Any, key_group: int) -> None:
        kgi = key_group - self._start
        if kgi < 0 or kgi >= self._n:
            raise self._key_group_range_error(key, key_group)
        if type(key) not in _ATOMIC_KEY_TYPES:
            try:
                {key: None}  # noqa: B018 - probe: keys scope dict entries, so must be hashable
            except TypeError:
                raise self._unhashable_key_error(key) from None
        self._key = key
        self._kgi = kgi
        if self.key_selection_listeners:
            for listener in self.key_selection_listeners:
                listener()

    def shuffled_key_slots(self) -> tuple[int, int] | None:
        # what set_current_key does, minus the hashability probe (the shuffle's writer
        # probed every key), when no listener (TTL) must run per key
        return None if self.key_selection_listeners else (self._start, self._n)

    def get_current_key(self) -> Any:
        return self._key

    def get_current_key_group(self) -> int:
        if self._kgi >= self._n:
            raise self._no_current_key_error()
        return self._start + self._kgi

    # ------------------------------------------------------------------- registration

    def _create_raw(self, descriptor: StateDescriptor) -> State:
        """The heap state of ``descriptor`` (the raw state under a TTL wrapper, if any)."""
        name = descriptor.name
        kind = descriptor.kind
        if kind not in STATE_CLASSES:
            raise StateAccessError(f"unsupported state descriptor {descriptor!r}")
        sers = rm.serializers_for(descriptor, self.key_serializer)
        table = self._tables.get(name)
        if table is None:
            table = self._new_table(name, kind, sers)
        else:  # restored (or created by a delta) and not yet registered
            rm.check_migration(self.operator_name, table, descriptor, sers)
            if needs_migration(table.serializers, sers):
                migrate_holder(self, table, sers, migrate_heap_table)
            table.serializers = sers
        created = STATE_CLASSES[kind](self, table, descriptor)
        assert isinstance(created, State)  # every heap state class also derives from a State
        return created

    def state_entry_transformer(self, state_name: str) -> StateEntryTransformer | None:
        table = self._tables.get(state_name)
        if table is None:
            return None
        entries = self._entries.get(state_name)
        if entries is None or entries._table is not table:
            entries = self._entries[state_name] = HeapStateEntries(table)
        return entries

    def get_keys(self, state_name: str) -> Iterator[Any]:
        """Keys with a value in ``state_name`` (void namespace); empty for unknown states."""
        table = self._tables.get(state_name)
        return iter(table.keys() if table is not None else [])

    def get_keys_and_namespaces(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        table = self._tables.get(state_name)
        return iter(table.keys_and_namespaces() if table is not None else [])

    def registered_state_names(self) -> list[str]:
        """Names of all states held (registered or restored)."""
        return list(self._tables)

    # ------------------------------------------------------------------- snapshots
    def snapshot(self) -> KeyedSnapshot:
        self._check_alive()
        self.run_snapshot_cleanups()
        tables = list(self._tables.values())
        data, offsets, meta = fmt.write_full(tables, self._start, self._n, self.operator_name)
        for t in tables:
            t.clear_dirty()
        return KeyedSnapshot(data, offsets, meta)

    def snapshot_delta(self) -> bytes:
        self._check_alive()
        tables = list(self._tables.values())
        data = fmt.write_delta(tables, self._start, self.operator_name)
        for t in tables:
            t.clear_dirty()
        return data

    # ------------------------------------------------------------------- restore
    def restore(self, handles: Sequence[KeyGroupsStateHandle]) -> None:
        self._check_alive()
        rm.check_restore_first(self.operator_name, self._handles)
        rm.restore_handles(handles, self.key_group_range, self._resolve_states)

    def _resolve_states(self, states_meta: list[dict[str, Any]]) -> list[tuple[StateTable, Any]]:
        """Per state id of a checkpoint: (table to fill, serializers to read with)."""
        return rm.resolve_states(
            self.operator_name,
            self.key_serializer,
            states_meta,
            self._tables,
            self._handles,
            self._new_table,
            self._migrate_restored,
        )

    def _migrate_restored(self, table: StateTable, sers: StateSerializers) -> None:
        """A delta written after a schema change: bring the restored base along first."""
        if needs_migration(table.serializers, sers):
            migrate_holder(self, table, sers, migrate_heap_table)

    def _new_table(self, name: str, kind: str, sers: StateSerializers) -> StateTable:
        table = self._tables[name] = StateTable(name, kind, self._n, sers)
        return table

    def apply_delta(self, data: bytes) -> None:
        self._check_alive()
        rm.apply_delta(data, self.key_group_range, self._resolve_states)

    # ------------------------------------------------------------------- lifecycle
    def dispose(self) -> None:
        for t in self._tables.values():
            t.clear_all()
        self._tables.clear()
        self._handles.clear()
        self._entries.clear()
        self.snapshot_cleanups.clear()
        self.key_selection_listeners.clear()
        self._key = None
        self._kgi = self._n
        self._disposed = True

    def __repr__(self) -> str:
        r = self.key_group_range
        return (
            f"HeapKeyedStateBackend({self.operator_name!r}, key groups [{r.start}, {r.end}], "
            f"states {sorted(self._tables)})"
        )


register_keyed_backend("hashmap", HeapKeyedStateBackend, changelog_options={"changelog": True})
