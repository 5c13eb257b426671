"""The embedded RocksDB keyed state backend (Flink's ``EmbeddedRocksDBStateBackend``).

One RocksDB database per backend instance, in a fresh directory under
``local_dir`` (default: a new temporary directory), one column family per
state; the layout of keys and values is described in
:mod:`streamstate.runtime.state.rocksdb.states`. Writes go without a
write-ahead log: durability comes from checkpoints, as in Flink.

Checkpoints are backend-independent: :meth:`RocksDBKeyedStateBackend.snapshot`
and :meth:`~RocksDBKeyedStateBackend.snapshot_delta` write the heap backend's
byte formats (:mod:`streamstate.runtime.state.format.keyed`, through its own
writer functions), and :meth:`~RocksDBKeyedStateBackend.restore` /
:meth:`~RocksDBKeyedStateBackend.apply_delta` read them with its readers, so
a heap checkpoint restores into RocksDB and vice versa, at any parallelism.
Restore reads only the byte ranges of this backend's key groups.

A restored state registered with a serializer that is "compatible after
migration" is rewritten (read with the checkpoint's serializer, written with
the new one) when it is registered.

Namespaces (window state) are supported as in the heap backend; a state's
non-void namespaces live in a second column family (see ``states.py``), which
checkpoints of both kinds carry.

Limits: keys that are equal in Python but serialize
differently (``1`` and ``True`` with the default key serializer) are two
entries here but one in the heap backend, and a delta holding both keeps one.
"""

from __future__ import annotations

import shutil
import struct
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from rocksdict import Rdict, WriteOptions

from streamstate.api.state import State, StateDescriptor
from streamstate.errors import (
    StateAccessError,
    StateSerializationError,
)
from streamstate.runtime.checkpoint.incremental import IncrementalKeyedStateHandle
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.state import restore_meta as rm
from streamstate.runtime.state.base import KeyedSnapshot, KeyedStateBackend, StateEntryTransformer
from streamstate.runtime.state.format import keyed as fmt
from streamstate.runtime.state.format.namespaces import NamespaceSerializer
from streamstate.runtime.state.format.serializers import StateSerializers
from streamstate.runtime.state.registry import register_keyed_backend
from streamstate.runtime.state.rocksdb.columns import NS_CF_SUFFIX, StateColumn
from streamstate.runtime.state.rocksdb.database import (
    RocksDBStorageError,
    close_database,
    default_local_dir,
    make_database_dir,
    open_database,
    opened,
)
from streamstate.runtime.state.rocksdb.encoding import MAX_VALUE_BYTES
from streamstate.runtime.state.rocksdb.incremental import (
    EpochVersionTarget,
    restore_incremental,
    snapshot_incremental,
)
from streamstate.runtime.state.rocksdb.migration import migrate_restored
from streamstate.runtime.state.rocksdb.options import build_options
from streamstate.runtime.state.rocksdb.states import (
    STATE_CLASSES,
)
from streamstate.runtime.state.rocksdb.ttl_entries import (
    RocksDBStateEntries,
    install_compaction_filter,
)

__all__ = ["RocksDBKeyedStateBackend", "RocksDBStorageError"]

_ATOMIC_KEY_TYPES = frozenset({str, int, bytes, float, bool, type(None)})
_KG = struct.Struct(">H")
_U32 = struct.Struct(">I")


class RocksDBKeyedStateBackend(KeyedStateBackend):
    """Keyed state in an embedded RocksDB database (one per instance) under ``local_dir``.

    ``local_dir`` is the parent directory (Flink's ``state.backend.rocksdb.localdir``);
    the database lives in a new sub-directory that :meth:`dispose` deletes. An
    unwritable or full directory raises :class:`RocksDBStorageError` naming the path.
    """

    def __init__(
        self,
        operator_name: str,
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        key_serializer: TypeSerializer,
        local_dir: str | None = None,
        incremental: bool = False,
        predefined_options: str = "DEFAULT",
        write_buffer_size: int | None = None,
        block_cache_size: int | None = None,
        raw_options: dict[str, str] | None = None,
        defer_open: bool = False,
    ) -> None:
        super().__init__(operator_name, key_group_range, max_parallelism, key_serializer)
        self._start = key_group_range.start
        self._n = len(key_group_range)
        self._key: Any = None
        self._kgi = self._n
        #: RocksDB key prefix of the current key; None until a state serializes it
        self._kb: bytes | None = None
        self._kg_prefixes = [_KG.pack(self._start + i) for i in range(self._n)]
        self._key_dumps = key_serializer.serialize
        self._columns: dict[str, StateColumn] = {}
        #: every raw state handle created (released on dispose)
        self._raw_states: list[Any] = []
        self.local_dir = local_dir if local_dir is not None else default_local_dir()
        self.incremental = bool(incremental)
        self._raw_options = dict(raw_options or {})
        self._opts = build_options(predefined_options, write_buffer_size, block_cache_size)
        self._wopts = WriteOptions()
        self._wopts.disable_wal = True  # type: ignore[method-assign,assignment]  # rocksdict's stub types it as a method
        self.path = make_database_dir(self.local_dir, operator_name)
        self._db: Rdict | None = None if defer_open else open_database(self, self.path, {})
        #: column families present in the opened database (non-empty after adopt)
        self._cf_names: set[str] = set()
        #: unique per database instance: names its uploads and local copies
        self.instance_id = uuid.uuid4().hex[:12]
        #: local SST file name -> its uploaded copy in shared/ (incremental checkpoints)
        self.uploaded_files: dict[str, Any] = {}
        #: local SST file name -> its copy in the epoch-state directory (epoch versions)
        self.epoch_uploaded: dict[str, Any] = {}
        self.bytes_uploaded = 0
        self.bytes_downloaded = 0
        #: how the last restore got its files: "local", "remote" or None (no restore)
        self.restore_source: str | None = None

    def _io_error(
        self, what: str, e: BaseException, path: str | None = None
    ) -> RocksDBStorageError:
        return RocksDBStorageError(
            f"operator {self.operator_name!r}: RocksDB cannot {what} at {path or self.path!r} "
            f"({type(e).__name__}: {e}); check free space and permissions of that directory"
        )

    # ------------------------------------------------------------------- hot path
    def set_current_key(self, key: Any, key_group: int) -> None:
        kgi = key_group - self._start
        if kgi < 0 or kgi >= self._n:
            raise self._key_group_range_error(key, key_group)
        if type(key) not in _ATOMIC_KEY_TYPES:
            try:
                hash(key)  # hashability probe only (keys scope state); key groups use murmur3
            except TypeError:
                raise self._unhashable_key_error(key) from None
        self._key = key
        self._kgi = kgi
        self._kb = None
        if self.key_selection_listeners:
            for listener in self.key_selection_listeners:
                listener()

    def _serialize_current_key(self, state_name: str) -> bytes | None:
        """Serialize the current key into ``_kb`` (``None`` when no key is set)."""
        if self._kgi >= self._n:
            return None
        try:
            kb = self._kg_prefixes[self._kgi] + self._key_dumps(self._key)
        except Exception as e:
            raise StateSerializationError(
                state_name,
                self.operator_name,
                type(self._key).__qualname__,
                f"the key cannot be serialized ({type(e).__name__}: {e})",
            ) from e
        if len(kb) > MAX_VALUE_BYTES:
            raise StateSerializationError(
                state_name,
                self.operator_name,
                type(self._key).__qualname__,
                f"the serialized key has {len(kb)} bytes, more than {MAX_VALUE_BYTES}",
            )
        self._kb = kb
        return kb

    def get_current_key(self) -> Any:
        return self._key

    def get_current_key_group(self) -> int:
        if self._kgi >= self._n:
            raise self._no_current_key_error()
        return self._start + self._kgi

    # ------------------------------------------------------------------- registration
    def _column_family(self, cf_name: str, state_name: str) -> Any:
        """Open (restored) or create the column family ``cf_name``."""
        self._check_alive()
        try:
            if cf_name in self._cf_names:  # opened from a checkpoint
                cf = opened(self).get_column_family(cf_name)
            else:
                cf = opened(self).create_column_family(cf_name, self._opts)
                self._cf_names.add(cf_name)
            cf.set_write_options(self._wopts)
            if self._raw_options:
                cf.set_options(self._raw_options)
        except Exception as e:
            raise self._io_error(f"create the column family of state {state_name!r}", e) from e
        return cf

    def _column(self, name: str, kind: str, sers: StateSerializers) -> StateColumn:
        if name.endswith(NS_CF_SUFFIX):
            raise StateAccessError(
                f"operator {self.operator_name!r}: state name {name!r} ends with "
                f"{NS_CF_SUFFIX!r}, which the RocksDB backend reserves; rename the state"
            )
        cf = self._column_family(name, name)
        if sers.namespace.name != NamespaceSerializer.name:
            # void-namespace bytes are identical; write any namespace with the general one
            sers = StateSerializers(sers.key, NamespaceSerializer(), sers.value, sers.user_key)
        col = StateColumn(self, name, kind, cf, sers)
        self._columns[name] = col
        if col.ns_cf_name in self._cf_names:  # restored with window state
            col.ns_cf = self._column_family(col.ns_cf_name, name)
        return col

    def _ns_column_family(self, col: StateColumn) -> Any:
        """The column family of ``col``'s non-void namespaces (created on first use)."""
        return self._column_family(col.ns_cf_name, col.name)

    def _create_raw(self, descriptor: StateDescriptor) -> State:
        """The RocksDB state of ``descriptor`` (the raw state under a TTL wrapper, if any)."""
        name = descriptor.name
        kind = descriptor.kind
        if kind not in STATE_CLASSES:
            raise StateAccessError(f"unsupported state descriptor {descriptor!r}")
        sers = rm.serializers_for(descriptor, self.key_serializer)
        col = self._columns.get(name)
        if col is None:
            col = self._column(name, kind, sers)
        else:  # restored (or created by a delta) and not yet registered
            rm.check_migration(self.operator_name, col, descriptor, sers)
            migrate_restored(self, col, sers)
        state: Any = STATE_CLASSES[kind](self, col, descriptor)
        self._raw_states.append(state)
        return state  # type: ignore[no-any-return]  # the TTL factory returns the State it was given

    def get_keys(self, state_name: str) -> Iterator[Any]:  # empty for unknown states
        return iter(col.keys() if (col := self._columns.get(state_name)) is not None else [])

    def get_keys_and_namespaces(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        return iter(c.keys_and_namespaces() if (c := self._columns.get(state_name)) else [])

    # ------------------------------------------------------------------- state TTL
    def state_entry_transformer(self, state_name: str) -> StateEntryTransformer | None:
        """Whole-state entry rewriting for TTL cleanup (``ttl_entries.py``)."""
        col = self._columns.get(state_name)
        return None if col is None else RocksDBStateEntries(self, col)

    def configure_ttl_compaction_filter(
        self, state_name: str, ttl_config: Any, time_provider: Any
    ) -> bool:
        """``cleanup_in_rocksdb_compact_filter``: a filter pass at every snapshot."""
        return install_compaction_filter(self, state_name, ttl_config, time_provider)

    def registered_state_names(self) -> list[str]:
        """Names of all states held (registered or restored)."""
        return list(self._columns)

    def _apply(
        self, col: StateColumn, batch: list[tuple[bytes, bytes | None]], cf: Any = None
    ) -> None:
        """Write ``(key, value or None)`` pairs into ``cf`` (default: ``col.cf``) in order."""
        write_batch(self, col.cf if cf is None else cf, batch)

    # ------------------------------------------------------------------- snapshots
    def snapshot(self) -> KeyedSnapshot:
        """Full snapshot in the heap backend's format (``streamstate-heap-keyed``)."""
        self._check_alive()
        self.run_snapshot_cleanups()
        cols = list(self._columns.values())
        data, offsets, meta = fmt.write_full(cols, self._start, self._n, self.operator_name)  # type: ignore[arg-type]  # columns are duck-typed tables for the shared format
        for c in cols:
            c.clear_dirty()
        return KeyedSnapshot(data, offsets, meta)

    def snapshot_delta(self) -> bytes:
        """Changes since the last snapshot/delta in the heap delta format."""
        self._check_alive()
        cols = list(self._columns.values())
        data = fmt.write_delta(cols, self._start, self.operator_name)  # type: ignore[arg-type]  # columns are duck-typed tables for the shared format
        for c in cols:
            c.clear_dirty()
        return data

    # ------------------------------------------------------------------- restore
    def restore(self, handles: Sequence[Any]) -> None:
        """Restore heap-format handles and incremental RocksDB handles (any mix)."""
        self._check_alive()
        rm.check_restore_first(self.operator_name, self._handles)
        native = [h for h in handles if isinstance(h, IncrementalKeyedStateHandle)]
        if native:
            restore_incremental(self, native)
            handles = [h for h in handles if not isinstance(h, IncrementalKeyedStateHandle)]
        if any(h.intersects(self.key_group_range) for h in handles):
            self.restore_source = "remote"
        rm.restore_handles(handles, self.key_group_range, self._resolve_states)

    def _resolve_states(self, states_meta: list[dict[str, Any]]) -> list[tuple[StateColumn, Any]]:
        """Per state id of a checkpoint: (column to fill, serializers to read with)."""
        return rm.resolve_states(
            self.operator_name,
            self.key_serializer,
            states_meta,
            self._columns,
            self._handles,
            self._column,
            lambda col, sers: migrate_restored(self, col, sers),
        )

    def apply_delta(self, data: bytes) -> None:
        self._check_alive()
        if self.restore_source is None:
            self.restore_source = "remote"
        rm.apply_delta(data, self.key_group_range, self._resolve_states)

    # ------------------------------------------------------------------- incremental
    def snapshot_incremental(self, storage: Any, checkpoint_id: int, scope: str) -> Any:
        """An incremental checkpoint handle, or ``None`` (not enabled / storage without
        a shared folder: the caller takes a full :meth:`snapshot`)."""
        return self.snapshot_native(storage, checkpoint_id, scope) if self.incremental else None

    def snapshot_native(self, storage: Any, checkpoint_id: int, scope: str) -> Any:
        """RocksDB's own files (a native savepoint), whatever the incremental setting."""
        self._check_alive()
        return snapshot_incremental(self, storage, checkpoint_id, scope)

    def snapshot_epoch_version(
        self, storage: Any, folder: str, tag: str, epoch: int, scope: str
    ) -> Any:
        """This epoch's version as RocksDB's own files under ``<folder>/<tag>-*`` in the
        epoch-state directory: only new SST files are written (see ``incremental.py``)."""
        self._check_alive()
        target = EpochVersionTarget(storage, folder, tag)
        return snapshot_incremental(self, target, epoch, scope, epoch_version=True)

    def dirty_clear(self) -> None:
        """Forget the changes recorded for the next delta (a snapshot covered them)."""
        for c in self._columns.values():
            c.clear_dirty()

    # ------------------------------------------------------------------- lifecycle
    def dispose(self) -> None:
        """Close the database and delete its directory (idempotent)."""
        if self._disposed:
            return
        self._disposed = True
        # Release every column family reference first: the database really closes
        # only with its last handle, and must do so before its directory goes.
        for raw in self._raw_states:
            raw.release()
        self._raw_states.clear()
        self.snapshot_cleanups.clear()
        self.key_selection_listeners.clear()
        for col in self._columns.values():
            col.cf = col.ns_cf = None
            col.handles.clear()
        self._handles.clear()
        self._columns.clear()
        self._key, self._kgi, self._kb = None, self._n, None
        try:
            close_database(self)
        finally:
            shutil.rmtree(self.path, ignore_errors=True)

    def __repr__(self) -> str:
        r = self.key_group_range
        return (
            f"RocksDBKeyedStateBackend({self.operator_name!r}, key groups [{r.start}, {r.end}], "
            f"path {self.path!r}, states {sorted(self._columns)})"
        )


register_keyed_backend(
    "rocksdb",
    RocksDBKeyedStateBackend,
    # Flink's changelog is its own; RocksDB's incremental checkpoints serve the same end
    changelog_options={"incremental": True},
    native_handles=(IncrementalKeyedStateHandle,),
    # a serving copy restores one version: no empty database opened first
    serving_copy_options={"defer_open": True},
    native_versions=True,
)


def write_batch(backend: Any, cf: Any, batch: list[tuple[bytes, bytes | None]]) -> None:
    """Write ``(key, value or None for delete)`` pairs into the column family ``cf``."""
    put, delete = cf.put, cf.delete
    try:
        for k, v in batch:
            if v is None:
                delete(k)
            else:
                put(k, v)
    except Exception as e:
        raise backend._io_error("write", e) from e
