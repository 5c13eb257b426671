"""The keyed state backend contract used by the operator runtime.

A :class:`KeyedStateBackend` holds the keyed state of one subtask: every state
registered through :meth:`KeyedStateBackend.get_partitioned_state`, for the
key groups of its :class:`~streamstate.runtime.keygroups.KeyGroupRange`.

Per epoch the runtime calls :meth:`~KeyedStateBackend.set_current_key` once per
record and runs the user function, which reads and writes state through the
handles. At the end of the epoch it commits a state version: either
:meth:`~KeyedStateBackend.snapshot_delta` (changes since the last version) or,
when a checkpoint is taken, :meth:`~KeyedStateBackend.snapshot` (everything).
Recovery is :meth:`~KeyedStateBackend.restore` from the last full snapshot(s)
followed by :meth:`~KeyedStateBackend.apply_delta` for each later delta.

Everything a backend does alike is written here once, over the keyed-store contract
of ``store.py``; a backend supplies its stores. The serializer plumbing shared by
backends (choosing, restoring and checking serializers) and the snapshot formats live
in ``runtime/state/format/``, the rules of registering and restoring against a
checkpoint's meta in ``restore_meta.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from streamstate.api.state import State, StateDescriptor
from streamstate.errors import (
    KeySerializationError,
    StateAccessError,
)
from streamstate.runtime.checkpoint.handles import KeyGroupsStateHandle
from streamstate.runtime.keygroups import KeyGroupRange, compute_key_group_for_serialized_key
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.state import restore_meta as rm
from streamstate.runtime.state.float_state import with_value_conversion
from streamstate.runtime.state.format import keyed as fmt
from streamstate.runtime.state.format.serializers import StateSerializers
from streamstate.runtime.state.kinds import KIND_CLASSES
from streamstate.runtime.state.store import CurrentKey, KeyedStore
from streamstate.runtime.state.ttl import create_state as create_state_with_ttl
from streamstate.runtime.state.ttl_clock import SystemTtlTimeProvider, TtlTimeProvider

__all__ = [
    "KeyedSnapshot",
    "KeyedStateBackend",
    "StateEntryTransformer",
]

#: the store type of a backend (``heap/store.py``'s, ``rocksdb/columns.py``'s)
StoreT = TypeVar("StoreT", bound=KeyedStore)

#: key types that are always hashable (no probe needed)
_ATOMIC_KEY_TYPES = frozenset({str, int, bytes, float, bool, type(None)})


@dataclass(frozen=True)
class KeyedSnapshot:
    """A full keyed snapshot of one backend.

    ``data`` is written to checkpoint storage as one stream; ``offsets[kg] =
    (offset, length)`` locates key group ``kg``'s section inside ``data`` (key
    groups without state are absent); ``meta`` is JSON-compatible state metadata
    (state names, kinds, serializer snapshots, format version). The caller builds
    ``KeyGroupsStateHandle(stream, key_group_range, offsets, meta)`` from it.
    """

    data: bytes
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


class StateEntryTransformer(ABC):
    """Rewrites the stored entries of one state in place (used by state TTL cleanup).

    A *stored entry* is what the backend holds for one (namespace, key): the
    value of value/reducing/aggregating state, the list of list state, the dict
    of map state. ``fn(stored)`` returns the stored entry unchanged (the same
    object: nothing is written), a replacement, or ``None`` to delete the
    entry. Changes are recorded for the next delta like any state write.
    """

    #: how many rounds the :meth:`transform_next` cursor has begun (-1: not tracked);
    #: lets TTL skip incremental cleanup while nothing can have expired
    rounds: int = -1
    #: whether :meth:`transform_next` is offered (TTL incremental cleanup)
    supports_incremental: bool = True

    @abstractmethod
    def transform_all(self, fn: Callable[[Any], Any]) -> int:
        """Apply ``fn`` to every entry of the state; returns how many entries changed."""

    @abstractmethod
    def transform_next(self, n: int, fn: Callable[[Any], Any]) -> None:
        """Apply ``fn`` to the next ``n`` entries of a lazy cursor over the whole state.

        The cursor wraps around at the end; entries created after the cursor
        passed their key group are seen in the next round.
        """


class KeyedStateBackend(ABC, Generic[StoreT]):
    """Keyed state of one subtask (the key groups of ``key_group_range``).

    Not thread-safe: one subtask drives it from one thread. Backends register by name in
    ``runtime/state/registry.py``, with their optional abilities.

    What is the same for every backend is written here, once, over the keyed-store
    contract (``runtime/state/store.py``): the current key, registering states (the
    state kinds of ``kinds.py`` over a store's access), snapshots and deltas (the formats
    of ``format/keyed.py`` over the stores), restores and listings. A backend supplies
    its stores (:meth:`_new_store`), what a schema change does to a store's stored form
    (:meth:`_migrate`) and its own lifecycle (:meth:`dispose`).

    State TTL (``runtime/state/ttl.py``) needs from a backend: that states are created
    through ``ttl.create_state`` (:meth:`get_partitioned_state` does), that
    ``set_current_key`` calls :attr:`key_selection_listeners`, that ``snapshot`` first
    calls :meth:`run_snapshot_cleanups`, and, optionally,
    :meth:`state_entry_transformer` (full-snapshot and incremental cleanup) and
    :meth:`configure_ttl_compaction_filter` (RocksDB compaction filter).
    """

    #: checkpoints are a changelog: the last full snapshot named again plus the deltas
    #: since (``state.changelog.enabled``; ``checkpoint/changelog.py``)
    changelog: bool = False
    #: how the last restore got its files: ``"local"`` (a copy on this machine),
    #: ``"remote"`` (checkpoint storage or epoch versions) or ``None`` (no restore, or a
    #: backend that does not tell)
    restore_source: str | None = None

    def __init__(
        self,
        operator_name: str,
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        key_serializer: TypeSerializer,
    ) -> None:
        self.operator_name = operator_name
        self.key_group_range = key_group_range
        self.max_parallelism = max_parallelism
        self.key_serializer = key_serializer
        #: the first key group of the range and the number of key groups
        self._first_key_group = key_group_range.start
        self._size = len(key_group_range)
        #: the key every state is scoped to, shared with every state access
        self.current = CurrentKey(self._size)
        #: state name -> its store (registered or restored)
        self._stores: dict[str, StoreT] = {}
        #: the clock of state TTL; the task installs the job's (``state.ttl.time-provider``)
        self.ttl_time_provider: TtlTimeProvider = SystemTtlTimeProvider()
        #: called (no arguments) after every ``set_current_key`` (TTL per-record cleanup)
        self.key_selection_listeners: list[Callable[[], None]] = []
        #: state name -> cleanup run at the start of every full ``snapshot`` (TTL)
        self.snapshot_cleanups: dict[str, Callable[[], None]] = {}
        #: state name -> (descriptor registered first, its handle)
        self._handles: dict[str, tuple[StateDescriptor, State]] = {}
        self._disposed = False
        #: state name -> entries migrated to a new schema at restore (job metrics)
        self.migrated_entries: dict[str, int] = {}
        #: key groups this backend read from storage at its restore, and key groups it
        #: took over from the subtask's previous backend instead (a rescale in place)
        self.key_groups_read = 0
        self.key_groups_kept = 0

    # ------------------------------------------------------------------- what a backend supplies
    @abstractmethod
    def _new_store(self, name: str, kind: str, serializers: StateSerializers) -> StoreT:
        """A new, empty store of state ``name`` (registered or restored)."""

    @abstractmethod
    def _migrate(self, store: StoreT, serializers: StateSerializers) -> None:
        """Bring a restored ``store`` to ``serializers`` (the descriptor registered for it,
        or a delta written after a schema change): rewrite its stored form if that
        changes (``runtime/state/migration.py``)."""

    @abstractmethod
    def dispose(self) -> None:
        """Release all state; the backend must not be used afterwards."""

    # ------------------------------------------------------------------- the current key
    def set_current_key(self, key: Any, key_group: int) -> None:
        """Scope every state handle to ``key`` (HOT PATH: once per record).

        ``key_group`` is the key's group, precomputed by the shuffle; it must lie
        in this backend's key group range. Raises ``KeySerializationError`` for an
        unhashable key and ``StateAccessError`` for a key group outside the range.
        """
        kgi = key_group - self._first_key_group
        if kgi < 0 or kgi >= self._size:
            raise self._key_group_range_error(key, key_group)
        if type(key) not in _ATOMIC_KEY_TYPES:
            try:
                hash(key)  # hashability probe only (keys scope state); key groups use murmur3
            except TypeError:
                raise self._unhashable_key_error(key) from None
        current = self.current
        current.key = key
        current.key_group_index = kgi
        current.key_bytes = None
        if self.key_selection_listeners:
            for listener in self.key_selection_listeners:
                listener()

    def shuffled_key_slots(self) -> tuple[int, int] | None:
        """``(first key group, number of key groups)`` when the current key may be set by
        writing ``current.key``, ``current.key_group_index`` and ``current.key_bytes =
        None`` directly (what :meth:`set_current_key` does, minus the hashability probe),
        for keys that came through the hash shuffle (hashable, key group computed by the
        writer); the caller checks ``0 <= index < number`` and calls
        :meth:`set_current_key` otherwise. ``None`` while a listener (TTL's incremental
        cleanup) must run per key: always call it then."""
        return None if self.key_selection_listeners else (self._first_key_group, self._size)

    def get_current_key(self) -> Any:
        """The key set by the last :meth:`set_current_key` (``None`` before any)."""
        return self.current.key

    def get_current_key_group(self) -> int:
        """The key group of the current key (``StateAccessError`` while none is set)."""
        kgi = self.current.key_group_index
        if kgi >= self._size:
            raise self._no_current_key_error()
        return self._first_key_group + kgi

    def key_group_of(self, key: Any) -> int:
        """The key group of ``key``: murmur3 of its serialized form, as the hash shuffle."""
        return compute_key_group_for_serialized_key(
            self.key_serializer.serialize(key), self.max_parallelism
        )

    # ------------------------------------------------------------------- registration
    def run_snapshot_cleanups(self) -> None:
        """Run the registered snapshot cleanups (``snapshot`` calls this first)."""
        for cleanup in list(self.snapshot_cleanups.values()):
            cleanup()

    def state_entry_transformer(self, state_name: str) -> StateEntryTransformer | None:
        """Access to the stored entries of ``state_name`` for TTL cleanup (``None``: unsupported).

        Backends without it still expire state on access; only full-snapshot
        and incremental cleanup are then unavailable (a warning says so).
        """
        return None

    def configure_ttl_compaction_filter(
        self, state_name: str, ttl_config: Any, time_provider: TtlTimeProvider
    ) -> bool:
        """Install a compaction filter dropping expired entries of ``state_name``.

        Returns whether the backend did (the RocksDB backend can; the default cannot).
        ``ttl_config`` is the state's ``StateTtlConfig``.
        """
        return False

    def get_partitioned_state(self, descriptor: StateDescriptor) -> State:
        """Get or create the state handle of ``descriptor`` (void namespace).

        The same name registered again with another kind or other type information
        raises ``StateDescriptorConflictError``; a descriptor incompatible with
        restored state of that name raises ``StateMigrationError``. New states are
        created through ``ttl.create_state`` (a TTL wrapper when the descriptor has TTL).
        """
        self._check_alive()
        entry = self._handles.get(descriptor.name)
        if entry is None:  # created here, not in a helper: TTL warnings name the caller
            created = with_value_conversion(
                descriptor, create_state_with_ttl(self, descriptor, self._create_raw)
            )
            self._handles[descriptor.name] = (descriptor, created)
            return created
        if entry[0] is descriptor:  # the same descriptor again: cheap
            return entry[1]
        return rm.registered_handle(self.operator_name, entry, descriptor)

    def _create_raw(self, descriptor: StateDescriptor) -> State:
        """The state of ``descriptor`` in this backend (the raw state under a TTL wrapper)."""
        name = descriptor.name
        kind = descriptor.kind
        if kind not in KIND_CLASSES:
            raise StateAccessError(f"unsupported state descriptor {descriptor!r}")
        serializers = rm.serializers_for(descriptor, self.key_serializer)
        store = self._stores.get(name)
        if store is None:
            store = self._new_store(name, kind, serializers)
        else:  # restored (or created by a delta) and not yet registered
            rm.check_migration(self.operator_name, store, descriptor, serializers)
            self._migrate(store, serializers)
            store.serializers = serializers
        created = KIND_CLASSES[kind](store.access(), descriptor)
        assert isinstance(created, State)  # every state kind class also derives from a State
        return created

    def registered_states(self) -> tuple[tuple[Any, ...], ...]:
        """``(state name, kind, queryable name or None, type infos)`` of every registered
        state, sorted by name (the type infos of queryable states only, else None)."""
        return tuple(
            (n, d.kind, q, d._type_infos() if q is not None else None)
            for n, (d, _) in sorted(self._handles.items())
            for q in (d.get_queryable_state_name(),)
        )

    def registered_state_names(self) -> list[str]:
        """Names of all states held (registered or restored)."""
        return list(self._stores)

    def store(self, state_name: str) -> StoreT | None:
        """The store of ``state_name`` (registered or restored), or ``None``."""
        return self._stores.get(state_name)

    def get_keys(self, state_name: str) -> Iterator[Any]:
        """The keys that have a value in state ``state_name`` (void namespace; a copy: safe
        to modify state); empty for unknown states."""
        store = self._stores.get(state_name)
        return iter(store.keys() if store is not None else [])

    def get_keys_and_namespaces(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        """``(key, namespace)`` of every entry of ``state_name`` in every namespace (the void
        namespace and windows; Flink's ``getKeysAndNamespaces``), a copy (deterministic order).
        Used by the State Processor API to read window state; empty for unknown states."""
        store = self._stores.get(state_name)
        return iter(store.keys_and_namespaces() if store is not None else [])

    def _check_alive(self) -> None:
        if self._disposed:
            raise self._disposed_error()

    # ------------------------------------------------------------------- snapshots
    def snapshot(self) -> KeyedSnapshot:
        """Full snapshot of all state (the canonical keyed format); resets the delta tracking.

        Raises ``StateSerializationError`` if a key or value cannot be serialized
        (the delta tracking is then left untouched).
        """
        self._check_alive()
        self.run_snapshot_cleanups()
        stores = list(self._stores.values())
        data, offsets, meta = fmt.write_full(
            stores, self._first_key_group, self._size, self.operator_name
        )
        for store in stores:
            store.clear_changes()
        return KeyedSnapshot(data, offsets, meta)

    def snapshot_delta(self) -> bytes:
        """The changes (puts and deletes) since the last snapshot/delta; resets tracking."""
        self._check_alive()
        stores = list(self._stores.values())
        data = fmt.write_delta(stores, self._first_key_group, self.operator_name)
        for store in stores:
            store.clear_changes()
        return data

    def clear_changes(self) -> None:
        """Forget the changes recorded for the next delta (a snapshot covered them)."""
        for store in self._stores.values():
            store.clear_changes()

    # ------------------------------------------------------------------- restore
    def restore(
        self, handles: Sequence[KeyGroupsStateHandle], key_groups: KeyGroupRange | None = None
    ) -> None:
        """Load the key groups of this backend's range (only those of ``key_groups``, a
        part of it, when given: the rest came from :meth:`take_key_groups`) from every
        intersecting handle; adds them to :attr:`key_groups_read`.

        Call on a fresh backend, before any state is registered.
        """
        self._check_alive()
        rm.check_restore_first(self.operator_name, self._handles)
        self.key_groups_read += rm.count_covered(handles, key_groups or self.key_group_range)
        rm.restore_handles(handles, self.key_group_range, self._resolve_states, key_groups)

    def take_key_groups(self, other: KeyedStateBackend[Any], key_groups: KeyGroupRange) -> int:
        """Move the entries of ``key_groups`` (in both backends' ranges) out of ``other``, a
        backend of the same operator at another key-group range (the subtask's previous
        range before a rescale), into this fresh one: the state kept in place, nothing read
        from storage. ``other`` is disposed of afterwards, never used again. Returns the
        number of key groups taken (:attr:`key_groups_kept`).

        Call before :meth:`restore` and before any state is registered. What moves is
        not recorded as a change: both backends hold the same version."""
        self._check_alive()
        rm.check_restore_first(self.operator_name, self._handles)
        mine = key_groups.intersection(self.key_group_range)
        mine = mine.intersection(other.key_group_range)
        if len(mine) != len(key_groups):
            raise ValueError(
                f"key groups {key_groups} are not in both ranges "
                f"{self.key_group_range} and {other.key_group_range}"
            )
        self._take(other, key_groups)
        self.key_groups_kept += len(key_groups)
        return len(key_groups)

    def _take(self, other: KeyedStateBackend[Any], key_groups: KeyGroupRange) -> None:
        """The move of :meth:`take_key_groups` once its arguments are checked: every
        state's entries of ``key_groups``, store by store; backends that can take
        ``other``'s storage over whole override it."""
        for name, source in other._stores.items():
            target = self._stores.get(name)
            if target is None:
                target = self._new_store(name, source.kind, source.serializers)
                target.restored_meta = source.restored_meta or source.meta()
            self._take_store_key_groups(source, target, other._first_key_group, key_groups)

    def _take_store_key_groups(
        self, source: Any, target: StoreT, source_first: int, key_groups: KeyGroupRange
    ) -> None:
        """Move one state's entries of ``key_groups`` from ``source`` (a store of another
        backend of this kind) into ``target``; backends with a faster way override it."""
        first = self._first_key_group
        for kg in key_groups:
            for namespace, keys, stored in source.entries(kg - source_first):
                target.load(kg - first, namespace, keys, stored)

    def apply_delta(self, data: bytes) -> None:
        """Replay a delta from :meth:`snapshot_delta` (entries outside the range are skipped)."""
        self._check_alive()
        rm.apply_delta(data, self.key_group_range, self._resolve_states)

    def _resolve_states(
        self, states_meta: list[dict[str, Any]]
    ) -> list[tuple[StoreT, StateSerializers]]:
        """Per state id of a checkpoint's meta: (store to fill, serializers to read with);
        see ``restore_meta.resolve_states``."""
        return rm.resolve_states(
            self.operator_name,
            self.key_serializer,
            states_meta,
            self._stores,
            self._handles,
            self._new_store,
            self._migrate,
        )

    def apply_delta_blocks(
        self, states_meta: list[dict[str, Any]], blocks: Sequence[bytes], resolved: Any = None
    ) -> Any:
        """Apply blocks of a delta (``format.keyed_index.split_delta``) whose meta is
        ``states_meta``; returns the states' resolution, which a caller applying more
        blocks with the same meta may pass back as ``resolved`` (valid until a state is
        registered). Queryable state's serving copies apply each epoch's delta this way,
        a key group's blocks at a time, without parsing the delta's header again."""
        self._check_alive()
        if resolved is None:
            resolved = self._resolve_states(states_meta)
        rm.apply_delta_blocks(blocks, self.key_group_range, resolved)
        return resolved

    # The errors every backend raises alike (built only on the failure path).
    def _key_group_range_error(self, key: Any, key_group: int) -> StateAccessError:
        r = self.key_group_range
        return StateAccessError(
            f"operator {self.operator_name!r}: key group {key_group} of key {key!r} is "
            f"outside this subtask's key group range [{r.start}, {r.end}]"
        )

    def _unhashable_key_error(self, key: Any) -> KeySerializationError:
        return KeySerializationError(
            f"operator {self.operator_name!r}: a key of type {type(key).__name__!r} is "
            f"not hashable, so it cannot scope keyed state. Return a hashable key from "
            f"the key selector, e.g. a tuple instead of a list."
        )

    def _no_current_key_error(self) -> StateAccessError:
        return StateAccessError(
            f"operator {self.operator_name!r}: no current key (keyed state and timers are "
            f"only available while processing an element of a keyed stream or a timer)"
        )

    def _disposed_error(self) -> StateAccessError:
        return StateAccessError(
            f"the keyed state backend of operator {self.operator_name!r} is disposed"
        )
