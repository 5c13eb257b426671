"""RocksDB implementation of :class:`~streamstate.runtime.state.base.StateEntryTransformer`.

Used by state TTL for two strategies on the RocksDB backend:

* ``cleanup_full_snapshot()``: expired entries are dropped when the backend
  takes a snapshot (``snapshot_cleanups``);
* ``cleanup_in_rocksdb_compact_filter(n)``: rocksdict exposes no native
  compaction filter, so the backend runs the same filter over the state at
  every snapshot it takes (full or incremental: the points where it flushes
  its memtables and RocksDB compacts), re-reading the TTL clock every ``n``
  entries as Flink's filter queries the time every ``n`` entries.

Incremental cleanup is not offered (``supports_incremental`` is False): as in
Flink it is a heap backend strategy, and on RocksDB every step would read
entries back from disk on the record path.

An entry is decoded as the heap backend stores it (a ``TtlValue``, a list of
them, a dict of them), passed to the filter, and written back (or deleted)
only when the filter changed it; every change is recorded in the column's
dirty set so per-epoch deltas carry it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from streamstate.runtime.state.base import StateEntryTransformer
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.ttl_cleanup import expired_entry_filter

if TYPE_CHECKING:
    from streamstate.runtime.state.rocksdb.backend import RocksDBKeyedStateBackend
    from streamstate.runtime.state.rocksdb.columns import StateColumn

__all__ = ["RocksDBStateEntries", "install_compaction_filter"]

_KG = struct.Struct(">H")
_U32 = struct.Struct(">I")


class RocksDBStateEntries(StateEntryTransformer):
    """Entry rewriting over one state's column family (whole-state passes only)."""

    supports_incremental = False

    def __init__(self, column: StateColumn) -> None:
        self.column = column

    def _group(self, kgi: int, cf: Any) -> Iterator[tuple[bytes, Any, Any, Any]]:
        """``(prefix, key, namespace, stored object)`` of every entry of key group index
        ``kgi`` in column family ``cf`` (the void one or the namespaced one)."""
        col = self.column
        kg = col.first_key_group + kgi
        lo = _KG.pack(kg)
        hi = _KG.pack(kg + 1) if kg < 0xFFFF else None
        void = cf is col.cf

        def who(prefix: bytes) -> tuple[Any, Any]:
            if void:
                return col.serializers.key.deserialize(prefix[2:]), VOID_NAMESPACE
            return col.decode_ns_prefix(prefix)

        if col.kind != "map":
            for rk, v in list(col.scan(lo, hi, cf)):
                key, ns = who(rk)
                yield rk, key, ns, col.decode(v)
            return
        sers = col.serializers
        assert sers.user_key is not None
        groups: dict[bytes, dict[Any, Any]] = {}
        for rk, v in col.scan(lo, hi, cf):
            prefix = col.prefix_of(rk)
            entries = groups.get(prefix)
            if entries is None:
                entries = groups[prefix] = {}
            user_key = sers.user_key.deserialize(rk[len(prefix) : len(rk) - 4])
            entries[user_key] = sers.value.deserialize(v)
        for prefix, entries in groups.items():
            key, ns = who(prefix)
            yield prefix, key, ns, entries

    def transform_all(self, fn: Callable[[Any], Any]) -> int:
        return self.transform_all_with(lambda _i: fn, 0)

    def transform_all_with(
        self, fn_for: Callable[[int], Callable[[Any], Any]], refresh_every: int
    ) -> int:
        """:meth:`transform_all` asking ``fn_for(entries seen)`` for a new filter every
        ``refresh_every`` entries (0: once)."""
        col = self.column
        changed = 0
        seen = 0
        fn = fn_for(0)
        for cf in (col.cf, col.ns_cf):
            if cf is None:
                continue
            for kgi in range(col.size):
                batch: list[tuple[bytes, bytes | None]] = []
                for stored_key, key, ns, stored in self._group(kgi, cf):
                    seen += 1
                    if refresh_every and seen % refresh_every == 0:
                        fn = fn_for(seen)
                    new = fn(stored)
                    if new is stored:
                        continue
                    if new is None:
                        col.delete(batch, stored_key, cf)
                    else:
                        col.write(batch, stored_key, new, cf)
                    col.dirty_of(ns)[key] = kgi
                    changed += 1
                if batch:
                    col.apply(batch, cf)
        return changed

    def transform_next(self, n: int, fn: Callable[[Any], Any]) -> None:
        raise NotImplementedError(
            "incremental TTL cleanup is a heap backend strategy (as in Flink)"
        )


def install_compaction_filter(
    backend: RocksDBKeyedStateBackend, state_name: str, ttl_config: Any, time_provider: Any
) -> bool:
    """Emulate ``cleanup_in_rocksdb_compact_filter`` for ``state_name`` (see module docstring).

    Registers a pass over the state in ``backend.snapshot_cleanups`` (run by every full
    and incremental snapshot). Returns False if the state does not exist (yet).
    """
    col = backend.store(state_name)
    strategies = ttl_config.get_cleanup_strategies()
    strategy = strategies.get_rocksdb_compact_filter_cleanup_strategy()
    if col is None or strategy is None:
        return False
    key = f"{state_name}\x00compaction-filter"
    if strategies.in_full_snapshot():  # the full-snapshot pass already runs at every snapshot
        backend.snapshot_cleanups.pop(key, None)
        return True
    every = strategy.get_query_time_after_num_entries()
    ttl = ttl_config.get_ttl().to_milliseconds()
    entries = RocksDBStateEntries(col)
    kind = col.kind
    now = time_provider.current_timestamp

    def compaction_filter_pass() -> None:
        entries.transform_all_with(lambda _seen: expired_entry_filter(kind, ttl, now()), every)

    backend.snapshot_cleanups[key] = compaction_filter_pass
    return True
