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

import json
from collections.abc import Iterator, Sequence
from typing import Any

from streamstate.datastream.state import State, StateDescriptor
from streamstate.runtime.checkpoint.handles import KeyGroupsStateHandle
from streamstate.runtime.errors import (
    CorruptCheckpointError,
    KeySerializationError,
    StateAccessError,
    StateDescriptorConflictError,
    StateMigrationError,
)
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.state import ttl
from streamstate.runtime.state.base import (
    KeyedSnapshot,
    KeyedStateBackend,
    NamespaceSerializer,
    StateEntryTransformer,
    check_serializer_compatibility,
    restore_serializer,
    serializer_for_type_info,
)
from streamstate.runtime.state.heap import snapshot as fmt
from streamstate.runtime.state.heap.entries import HeapStateEntries
from streamstate.runtime.state.heap.states import STATE_CLASSES
from streamstate.runtime.state.heap.table import STATE_KINDS, StateSerializers, StateTable
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
    ) -> None:
        super().__init__(operator_name, key_group_range, max_parallelism, key_serializer)
        self._start = key_group_range.start
        self._n = len(key_group_range)
        self._key: Any = None
        #: current key group index; ``_n`` (out of range) until a key is set
        self._kgi = self._n
        self._tables: dict[str, StateTable] = {}
        self._handles: dict[str, tuple[StateDescriptor, State]] = {}
        self._entries: dict[str, HeapStateEntries] = {}
        self._disposed = False

    # ------------------------------------------------------------------- hot path
    def set_current_key(self, key: Any, key_group: int) -> None:
        kgi = key_group - self._start
        if kgi < 0 or kgi >= self._n:
            raise StateAccessError(
                f"operator {self.operator_name!r}: key group {key_group} of key {key!r} is "
                f"outside this subtask's key group range "
                f"[{self.key_group_range.start}, {self.key_group_range.end}]"
            )
        if type(key) not in _ATOMIC_KEY_TYPES:
            try:
                {key: None}  # noqa: B018 - probe: keys scope dict entries, so must be hashable
            except TypeError:
                raise KeySerializationError(
                    f"operator {self.operator_name!r}: a key of type {type(key).__name__!r} is "
                    f"not hashable, so it cannot scope keyed state. Return a hashable key from "
                    f"the key selector, e.g. a tuple instead of a list."
                ) from None
        self._key = key
        self._kgi = kgi
        if self.key_selection_listeners:
            for listener in self.key_selection_listeners:
                listener()

    def get_current_key(self) -> Any:
        return self._key

    def get_current_key_group(self) -> int:
        if self._kgi >= self._n:
            raise StateAccessError(
                f"operator {self.operator_name!r}: no current key (keyed state and timers are "
                f"only available while processing an element of a keyed stream or a timer)"
            )
        return self._start + self._kgi

    # ------------------------------------------------------------------- registration
    def _serializers_for(self, descriptor: StateDescriptor) -> StateSerializers:
        kind = descriptor.kind
        if kind == "list":
            value = serializer_for_type_info(descriptor.elem_type_info)  # type: ignore[attr-defined]
        elif kind == "map":
            value = serializer_for_type_info(descriptor.value_type_info)  # type: ignore[attr-defined]
        else:
            value = serializer_for_type_info(descriptor.type_info)
        user_key = (
            serializer_for_type_info(descriptor.key_type_info)  # type: ignore[attr-defined]
            if kind == "map"
            else None
        )
        return StateSerializers(self.key_serializer, NamespaceSerializer(), value, user_key)

    def get_partitioned_state(self, descriptor: StateDescriptor) -> State:
        self._check_alive()
        name = descriptor.name
        entry = self._handles.get(name)
        if entry is not None:
            existing, handle = entry
            if existing is descriptor or existing.is_compatible_with(descriptor):
                return handle
            raise StateDescriptorConflictError(
                f"operator {self.operator_name!r}: state {name!r} is already registered as "
                f"{existing!r}; it cannot be registered again as {descriptor!r}. Use another "
                f"state name or the same kind, type information and TTL configuration."
            )
        created = ttl.create_state(self, descriptor, self._create_raw)
        self._handles[name] = (descriptor, created)
        return created

    def _create_raw(self, descriptor: StateDescriptor) -> State:
        """The heap state of ``descriptor`` (the raw state under a TTL wrapper, if any)."""
        name = descriptor.name
        kind = descriptor.kind
        if kind not in STATE_CLASSES:
            raise StateAccessError(f"unsupported state descriptor {descriptor!r}")
        sers = self._serializers_for(descriptor)
        table = self._tables.get(name)
        if table is None:
            table = StateTable(name, kind, self._n, sers)
            self._tables[name] = table
        else:  # restored (or created by a delta) and not yet registered
            self._check_migration(table, descriptor, sers)
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

    def _check_migration(
        self, table: StateTable, descriptor: StateDescriptor, sers: StateSerializers
    ) -> None:
        if table.kind != descriptor.kind:
            raise StateMigrationError(
                f"operator {self.operator_name!r}: state {table.name!r} was restored as "
                f"{table.kind} state but is now registered as {descriptor.kind} state "
                f"({descriptor!r}). Keep the kind of a state, or give the new state a new name."
            )
        meta = table.restored_meta
        if meta is None:
            return
        check_serializer_compatibility(table.name, "value", sers.value, meta["value_serializer"])
        if sers.user_key is not None and "user_key_serializer" in meta:
            check_serializer_compatibility(
                table.name, "map key", sers.user_key, meta["user_key_serializer"]
            )

    def get_keys(self, state_name: str) -> Iterator[Any]:
        """Keys with a value in ``state_name`` (void namespace); empty for unknown states."""
        table = self._tables.get(state_name)
        return iter(table.keys() if table is not None else [])

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
        if self._handles:
            raise StateAccessError(
                f"operator {self.operator_name!r}: restore() must run before any state is "
                f"registered (registered: {sorted(self._handles)})"
            )
        for handle in handles:
            inter = handle.key_group_range.intersection(self.key_group_range)
            if not len(inter):
                continue
            fmt.check_meta(handle.meta)
            resolved = self._resolve_states(handle.meta["states"])
            kgs = sorted(kg for kg in handle.offsets if kg in inter)
            if not kgs:
                continue
            blob, base = self._read_span(handle, kgs)
            view = memoryview(blob)

            def resolve(sid: int, _r: list[tuple[StateTable, Any]] = resolved) -> Any:
                if sid >= len(_r):
                    raise CorruptCheckpointError(f"keyed state refers to unknown state id {sid}")
                return _r[sid]

            for kg in kgs:
                off, ln = handle.offsets[kg]
                section = view[off - base : off - base + ln]
                if len(section) != ln:
                    raise CorruptCheckpointError(
                        f"keyed state of key group {kg} lies outside its state file"
                    )
                fmt.read_section(section, kg, resolve, kg - self._start)

    @staticmethod
    def _read_span(handle: KeyGroupsStateHandle, kgs: list[int]) -> tuple[bytes, int]:
        """The bytes holding key groups ``kgs`` and the offset they start at."""
        if len(kgs) == len(handle.offsets):
            return handle.stream.read(), 0
        first = min(handle.offsets[kg][0] for kg in kgs)
        end = max(handle.offsets[kg][0] + handle.offsets[kg][1] for kg in kgs)
        return handle.stream.read_range(first, end - first), first

    def _resolve_states(self, states_meta: list[dict[str, Any]]) -> list[tuple[StateTable, Any]]:
        """Per state id of a checkpoint: (table to fill, serializers to read with)."""
        out: list[tuple[StateTable, Any]] = []
        key_checked: set[str] = set()
        for sm in states_meta:
            try:
                name, kind = sm["name"], sm["kind"]
                key_snap = sm["key_serializer"]
            except (KeyError, TypeError) as e:
                raise CorruptCheckpointError(f"keyed state meta is damaged: {e!r}") from e
            if kind not in STATE_KINDS:
                raise CorruptCheckpointError(f"state {name!r} has unknown kind {kind!r}")
            read_sers = self._read_serializers(name, sm)
            token = json.dumps(key_snap, sort_keys=True)
            if token not in key_checked:
                check_serializer_compatibility(
                    name, "key", self.key_serializer, key_snap, require_as_is=True
                )
                key_checked.add(token)
            table = self._tables.get(name)
            if table is None:
                write_sers = StateSerializers(
                    self.key_serializer, read_sers.namespace, read_sers.value, read_sers.user_key
                )
                table = StateTable(name, kind, self._n, write_sers)
                table.restored_meta = sm
                self._tables[name] = table
            elif table.kind != kind:
                if name in self._handles:
                    raise StateMigrationError(
                        f"operator {self.operator_name!r}: state {name!r} is registered as "
                        f"{table.kind} state but the checkpoint holds {kind} state"
                    )
                raise CorruptCheckpointError(
                    f"state {name!r} is {table.kind} state in one handle and {kind} in another"
                )
            out.append((table, read_sers))
        return out

    def _read_serializers(self, name: str, sm: dict[str, Any]) -> StateSerializers:
        """Serializers to read state ``name``: a live table's if identical, else restored."""
        table = self._tables.get(name)
        live = table.serializers.to_meta() if table is not None else {}

        def get(field: str) -> TypeSerializer:
            snap = sm[field]
            if live.get(field) == snap:
                return getattr(table.serializers, _FIELDS[field])  # type: ignore[union-attr]
            return restore_serializer(snap, name)

        try:
            user_key = get("user_key_serializer") if sm["kind"] == "map" else None
            return StateSerializers(
                get("key_serializer"),
                get("namespace_serializer"),
                get("value_serializer"),
                user_key,
            )
        except KeyError as e:
            raise CorruptCheckpointError(f"state {name!r}: meta lacks {e}") from e

    def apply_delta(self, data: bytes) -> None:
        self._check_alive()
        start, n = self._start, self._n

        def kg_index(kg: int) -> int | None:
            kgi = kg - start
            return kgi if 0 <= kgi < n else None

        fmt.read_delta(data, self._resolve_states, kg_index)

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

    def _check_alive(self) -> None:
        if self._disposed:
            raise StateAccessError(
                f"the keyed state backend of operator {self.operator_name!r} is disposed"
            )

    def __repr__(self) -> str:
        r = self.key_group_range
        return (
            f"HeapKeyedStateBackend({self.operator_name!r}, key groups [{r.start}, {r.end}], "
            f"states {sorted(self._tables)})"
        )


_FIELDS = {
    "key_serializer": "key",
    "namespace_serializer": "namespace",
    "value_serializer": "value",
    "user_key_serializer": "user_key",
}

register_keyed_backend("hashmap", HeapKeyedStateBackend)
