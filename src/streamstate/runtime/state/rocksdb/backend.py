"""The embedded RocksDB keyed state backend (Flink's ``EmbeddedRocksDBStateBackend``).

One RocksDB database per backend instance, in a fresh directory under
``local_dir`` (default: a new temporary directory), one column family per
state; the layout of keys and values is described in
:mod:`streamstate.runtime.state.rocksdb.columns`. Writes go without a
write-ahead log: durability comes from checkpoints, as in Flink.

Checkpoints are backend-independent: the state kinds, snapshots, deltas and restores
are the shared ones of ``runtime/state/`` over this backend's columns (the keyed-store
contract, ``store.py``), so a heap checkpoint restores into RocksDB and vice versa, at
any parallelism; restore reads only the byte ranges of this backend's key groups. Its
own files (incremental checkpoints, epoch versions, native savepoints) are its alone.

A restored state registered with a serializer that is "compatible after
migration" is rewritten (read with the checkpoint's serializer, written with
the new one) when it is registered.

Namespaces (window state) are supported as in the heap backend; a state's
non-void namespaces live in a second column family (see ``columns.py``), which
checkpoints of both kinds carry.

Limits: keys that are equal in Python but serialize
differently (``1`` and ``True`` with the default key serializer) are two
entries here but one in the heap backend, and a delta holding both keeps one.
"""

from __future__ import annotations

import os
import shutil
import struct
import uuid
from collections.abc import Sequence
from typing import Any

from rocksdict import Rdict, WriteBatch, WriteOptions

from streamstate.errors import (
    StateAccessError,
)
from streamstate.runtime.checkpoint.incremental import IncrementalKeyedStateHandle
from streamstate.runtime.checkpoint.storage import CheckpointStorageAccess, SharedStateTarget
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.state import restore_meta as rm
from streamstate.runtime.state.base import KeyedStateBackend, StateEntryTransformer
from streamstate.runtime.state.format.namespaces import NamespaceSerializer
from streamstate.runtime.state.format.serializers import StateSerializers
from streamstate.runtime.state.registry import register_keyed_backend
from streamstate.runtime.state.rocksdb.buffered import BufferedColumnFamily
from streamstate.runtime.state.rocksdb.columns import NS_CF_SUFFIX, ColumnFamilies, StateColumn
from streamstate.runtime.state.rocksdb.database import (
    RocksDBStorageError,
    close_database,
    default_local_dir,
    make_database_dir,
    open_database,
)
from streamstate.runtime.state.rocksdb.incremental import (
    EpochVersionTarget,
    restore_incremental,
    snapshot_incremental,
)
from streamstate.runtime.state.rocksdb.migration import migrate_restored
from streamstate.runtime.state.rocksdb.options import build_options
from streamstate.runtime.state.rocksdb.ttl_entries import (
    RocksDBStateEntries,
    install_compaction_filter,
)

__all__ = ["RocksDBKeyedStateBackend", "RocksDBStorageError"]

_KG = struct.Struct(">H")
#: above every key (keys start with their u16 key group; max parallelism <= 32768)
_AFTER_EVERY_KEY_GROUP = b"\xff\xff\xff"


class RocksDBKeyedStateBackend(KeyedStateBackend[StateColumn]):
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
        #: the u16 prefix of every key group of the range, by key group index
        self.key_group_prefixes = [_KG.pack(self._first_key_group + i) for i in range(self._size)]
        self.local_dir = local_dir if local_dir is not None else default_local_dir()
        self.incremental = bool(incremental)
        self.raw_options = dict(raw_options or {})
        self.options = build_options(predefined_options, write_buffer_size, block_cache_size)
        self._write_options = WriteOptions()
        self._write_options.disable_wal = True  # type: ignore[method-assign,assignment]  # rocksdict's stub types it as a method
        self.path = make_database_dir(self.local_dir, operator_name)
        self.db: Rdict | None = None if defer_open else open_database(self, self.path, {})
        #: column families present in the opened database (non-empty after adopt)
        self.cf_names: set[str] = set()
        #: what a column needs of this database
        self.column_families = ColumnFamilies(self._column_family, self.write, self.io_error)
        #: unique per database instance: names its uploads and local copies
        self.instance_id = uuid.uuid4().hex[:12]
        #: local SST file name -> its uploaded copy in shared/ (incremental checkpoints)
        self.uploaded_files: dict[str, Any] = {}
        #: local SST file name -> its copy in the epoch-state directory (epoch versions)
        self.epoch_uploaded: dict[str, Any] = {}
        self.bytes_uploaded = 0
        self.bytes_downloaded = 0

    def io_error(self, what: str, e: BaseException, path: str | None = None) -> RocksDBStorageError:
        """The typed error of a failed database operation, naming the directory."""
        return RocksDBStorageError(
            f"operator {self.operator_name!r}: RocksDB cannot {what} at {path or self.path!r} "
            f"({type(e).__name__}: {e}); check free space and permissions of that directory"
        )

    def write(self, cf: BufferedColumnFamily, batch: list[tuple[bytes, bytes | None]]) -> None:
        """Write ``(key, value or None for delete)`` pairs into the column family ``cf``."""
        cf.write_many(batch)

    def write_batch(self, cf_name: str, batch: list[tuple[bytes, bytes | None]]) -> None:
        """Write ``(key, value or None for delete)`` pairs into the column family named
        ``cf_name`` as one RocksDB write batch."""
        try:
            db = self.opened_database()
            handle = db.get_column_family_handle(cf_name)
            write_batch = WriteBatch(raw_mode=True)
            put, delete = write_batch.put, write_batch.delete
            for k, v in batch:
                if v is None:
                    delete(k, handle)
                else:
                    put(k, v, handle)
            db.write(write_batch, self._write_options)
        except Exception as e:
            raise self.io_error("write", e) from e

    def flush_buffers(self) -> None:
        """Write every column family's buffered entries to RocksDB (before anything that
        reads the database's files: see ``buffered.py``)."""
        for column in self._stores.values():
            for cf in (column.cf, column.ns_cf):
                if cf is not None:
                    cf.flush()

    def opened_database(self) -> Rdict:
        """The open database: a backend made with ``defer_open`` (queryable state's serving
        copies, which restore one version and so never need the empty database a backend
        starts with: an open costs milliseconds of CPU and disk writes) opens an empty one
        here when nothing was restored into it."""
        if self.db is None:
            self._check_alive()
            self.db = open_database(self, self.path, {})
        return self.db

    # ------------------------------------------------------------------- stores
    def _column_family(self, cf_name: str, state_name: str) -> BufferedColumnFamily:
        """Open (restored) or create the column family ``cf_name``, behind its buffer."""
        self._check_alive()
        try:
            if cf_name in self.cf_names:  # opened from a checkpoint
                cf = self.opened_database().get_column_family(cf_name)
            else:
                cf = self.opened_database().create_column_family(cf_name, self.options)
                self.cf_names.add(cf_name)
            cf.set_write_options(self._write_options)
            if self.raw_options:
                cf.set_options(self.raw_options)
        except Exception as e:
            raise self.io_error(f"create the column family of state {state_name!r}", e) from e
        return BufferedColumnFamily(cf, cf_name, self.write_batch)

    def _new_store(self, name: str, kind: str, serializers: StateSerializers) -> StateColumn:
        if name.endswith(NS_CF_SUFFIX):
            raise StateAccessError(
                f"operator {self.operator_name!r}: state name {name!r} ends with "
                f"{NS_CF_SUFFIX!r}, which the RocksDB backend reserves; rename the state"
            )
        cf = self._column_family(name, name)
        if serializers.namespace.name != NamespaceSerializer.name:
            # void-namespace bytes are identical; write any namespace with the general one
            serializers = StateSerializers(
                serializers.key, NamespaceSerializer(), serializers.value, serializers.user_key
            )
        column = StateColumn(
            name,
            kind,
            cf,
            serializers,
            current=self.current,
            first_key_group=self._first_key_group,
            key_group_prefixes=self.key_group_prefixes,
            operator_name=self.operator_name,
            database=self.column_families,
        )
        self._stores[name] = column
        if column.ns_cf_name in self.cf_names:  # restored with window state
            column.ns_cf = self._column_family(column.ns_cf_name, name)
        return column

    def _migrate(self, store: StateColumn, serializers: StateSerializers) -> None:
        migrate_restored(self, store, serializers)

    # ------------------------------------------------------------------- state TTL
    def state_entry_transformer(self, state_name: str) -> StateEntryTransformer | None:
        """Whole-state entry rewriting for TTL cleanup (``ttl_entries.py``)."""
        column = self._stores.get(state_name)
        return None if column is None else RocksDBStateEntries(column)

    def configure_ttl_compaction_filter(
        self, state_name: str, ttl_config: Any, time_provider: Any
    ) -> bool:
        """``cleanup_in_rocksdb_compact_filter``: a filter pass at every snapshot."""
        return install_compaction_filter(self, state_name, ttl_config, time_provider)

    # ------------------------------------------------------------------- restore
    def restore(self, handles: Sequence[Any], key_groups: KeyGroupRange | None = None) -> None:
        """Restore canonical handles and incremental RocksDB handles (any mix); only the
        key groups of ``key_groups`` when given (see the base class)."""
        self._check_alive()
        rm.check_restore_first(self.operator_name, self._handles)
        wanted = self.key_group_range if key_groups is None else key_groups
        native = [h for h in handles if isinstance(h, IncrementalKeyedStateHandle)]
        if native:
            self.key_groups_read += rm.count_covered(native, wanted)
            restore_incremental(self, native, wanted)
            handles = [h for h in handles if not isinstance(h, IncrementalKeyedStateHandle)]
        if any(h.intersects(wanted) for h in handles):
            self.restore_source = "remote"
        super().restore(handles, key_groups)

    def _take(self, other: KeyedStateBackend[Any], key_groups: KeyGroupRange) -> None:
        """Takes ``other``'s database over instead of copying out of it (Flink restores a
        rescaled subtask from the handle of largest overlap the same way): the directory
        moves to this backend, the key groups outside ``key_groups`` are deleted with one
        range delete per column family (RocksDB writes a range tombstone, no entry
        crosses into Python), so the cost no longer grows with the state kept. Falls back
        to the entry copy when this backend is not a fresh one with the same database
        options. What moved is uploaded afresh by the next incremental checkpoint (the
        files belong to this database instance now)."""
        if not (isinstance(other, RocksDBKeyedStateBackend) and self._can_take_database(other)):
            super()._take(other, key_groups)
            return
        other.flush_buffers()
        stores = [
            (name, c.kind, c.serializers, c.restored_meta or c.meta())
            for name, c in other._stores.items()
        ]
        cf_names = set(other.cf_names) | {n for n, *_ in stores}
        cf_names |= {c.ns_cf_name for c in other._stores.values() if c.ns_cf is not None}
        other._release_database()
        close_database(self)
        shutil.rmtree(self.path, ignore_errors=True)
        try:
            os.rename(other.path, self.path)
        except OSError as e:
            raise self.io_error("take over the previous database", e, other.path) from e
        self.db = open_database(self, self.path, {n: self.options for n in cf_names})
        self.cf_names = cf_names
        lo, hi = key_groups.start, key_groups.end + 1
        try:
            for name in cf_names:
                cf = self.db.get_column_family(name)
                if lo > 0:
                    cf.delete_range(_KG.pack(0), _KG.pack(lo))
                cf.delete_range(_KG.pack(hi), _AFTER_EVERY_KEY_GROUP)
                del cf
        except Exception as e:
            raise self.io_error("delete the key groups not kept", e) from e
        for name, kind, serializers, meta in stores:
            column = self._new_store(name, kind, serializers)
            column.restored_meta = meta

    def _can_take_database(self, other: RocksDBKeyedStateBackend) -> bool:
        """Whether ``other``'s database can become this fresh backend's."""
        return (
            not other._disposed
            and other.db is not None
            and not self._stores
            and not self.cf_names
            and self.raw_options == other.raw_options
            and os.path.dirname(self.path) == os.path.dirname(other.path)  # one rename
        )

    def _take_store_key_groups(
        self,
        source: StateColumn,
        target: StateColumn,
        source_first: int,
        key_groups: KeyGroupRange,
    ) -> None:
        # keys start with their key group: copy the range's RocksDB entries as they are
        lo = struct.pack(">H", key_groups.start)
        hi = struct.pack(">H", key_groups.end + 1) if key_groups.end < 0xFFFF else None
        pairs = [(source.cf, target.cf)]
        if source.ns_cf is not None:
            pairs.append((source.ns_cf, target.namespaced_cf()))
        for src, dst in pairs:
            batch: list[tuple[bytes, bytes | None]] = []
            for rk, value in source.scan(lo, hi, src):
                batch.append((rk, value))
                if len(batch) >= 10_000:
                    target.apply(batch, dst)
                    batch = []
            target.apply(batch, dst)

    def apply_delta(self, data: bytes) -> None:
        if self.restore_source is None:
            self.restore_source = "remote"
        super().apply_delta(data)

    def resolve_states(
        self, states_meta: list[dict[str, Any]]
    ) -> list[tuple[StateColumn, StateSerializers]]:
        """The columns of a checkpoint's states (created as needed; see ``restore_meta``)."""
        return self._resolve_states(states_meta)

    # ------------------------------------------------------------------- incremental
    def snapshot_incremental(
        self, storage: SharedStateTarget, checkpoint_id: int, scope: str
    ) -> Any:
        """An incremental checkpoint handle, or ``None`` (not enabled / storage without
        a shared folder: the caller takes a full :meth:`snapshot`)."""
        return self.snapshot_native(storage, checkpoint_id, scope) if self.incremental else None

    def snapshot_native(self, storage: SharedStateTarget, checkpoint_id: int, scope: str) -> Any:
        """RocksDB's own files (a native savepoint), whatever the incremental setting."""
        self._check_alive()
        return snapshot_incremental(self, storage, checkpoint_id, scope)

    def snapshot_epoch_version(
        self, storage: CheckpointStorageAccess, folder: str, tag: str, epoch: int, scope: str
    ) -> Any:
        """This epoch's version as RocksDB's own files under ``<folder>/<tag>-*`` in the
        epoch-state directory: only new SST files are written (see ``incremental.py``)."""
        self._check_alive()
        target = EpochVersionTarget(storage, folder, tag)
        return snapshot_incremental(self, target, epoch, scope, epoch_version=True)

    def columns(self) -> list[StateColumn]:
        """Every state's column (registered or restored)."""
        return list(self._stores.values())

    # ------------------------------------------------------------------- lifecycle
    def dispose(self) -> None:
        """Close the database and delete its directory (idempotent)."""
        if self._disposed:
            return
        try:
            self._release_database()
        finally:
            shutil.rmtree(self.path, ignore_errors=True)

    def _release_database(self) -> None:
        """Close the database and mark this backend disposed, leaving its directory (for
        :meth:`dispose`, or for another backend that takes the database over)."""
        self._disposed = True
        # Release every column family reference first: the database really closes
        # only with its last handle, and must do so before its directory goes.
        for column in self._stores.values():
            for access in column.accesses:
                access.release()
            column.accesses.clear()
            for cf in (column.cf, column.ns_cf):
                if cf is not None:
                    cf.discard()
            column.cf = column.ns_cf = None
        self.snapshot_cleanups.clear()
        self.key_selection_listeners.clear()
        self._handles.clear()
        self._stores.clear()
        current = self.current
        current.key, current.key_group_index, current.key_bytes = None, self._size, None
        close_database(self)
        self.db = None

    def __repr__(self) -> str:
        r = self.key_group_range
        return (
            f"RocksDBKeyedStateBackend({self.operator_name!r}, key groups [{r.start}, {r.end}], "
            f"path {self.path!r}, states {sorted(self._stores)})"
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
