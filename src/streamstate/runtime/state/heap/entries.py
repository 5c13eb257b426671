"""Heap implementation of :class:`~streamstate.runtime.state.base.StateEntryTransformer`.

Used by state TTL: full-snapshot cleanup rewrites every entry of a store;
incremental cleanup advances a lazy cursor over the store's key groups. The
cursor takes a copy of one key group's keys (per namespace) at a time, as
Flink's heap backend does, so the state may change between two steps; keys
deleted meanwhile are skipped, keys added to an already visited key group are
seen in the next round. Every change is recorded in the store's dirty set so
deltas (and lineage rebuilds) carry it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamstate.runtime.state.base import StateEntryTransformer
from streamstate.runtime.state.heap.store import HeapStore

__all__ = ["HeapStateEntries"]

_MISSING: Any = object()


class HeapStateEntries(StateEntryTransformer):
    """Entry rewriting over one :class:`HeapStore`."""

    __slots__ = ("store", "_next_kgi", "_chunks", "rounds")

    def __init__(self, store: HeapStore) -> None:
        self.store = store
        self._next_kgi = 0
        self.rounds = 0
        #: pending (dict, dirty, kgi, keys) of the key group being visited, last first
        self._chunks: list[tuple[dict[Any, Any], dict[Any, int], int, list[Any]]] = []

    def transform_all(self, fn: Callable[[Any], Any]) -> int:
        store = self.store
        changed = 0
        for ns, maps in list(store.namespaces.items()):
            dirty = store.dirty_of(ns)
            for kgi, m in enumerate(maps):
                if not m:
                    continue
                for key, v in list(m.items()):
                    new = fn(v)
                    if new is v:
                        continue
                    if new is None:
                        del m[key]
                    else:
                        m[key] = new
                    dirty[key] = kgi
                    changed += 1
        return changed

    def _refill(self, budget: int) -> int:
        """Load the next key group with entries, scanning at most ``budget`` key groups.

        Returns how many key groups were scanned.
        """
        store = self.store
        size = store.size
        for scanned in range(1, budget + 1):
            kgi = self._next_kgi
            if kgi == 0:
                self.rounds += 1
            self._next_kgi = kgi + 1 if kgi + 1 < size else 0
            for ns, maps in store.namespaces.items():
                m = maps[kgi]
                if m:
                    keys = list(m)
                    keys.reverse()
                    self._chunks.append((m, store.dirty[ns], kgi, keys))
            if self._chunks:
                return scanned
        return budget

    def transform_next(self, n: int, fn: Callable[[Any], Any]) -> None:
        # HOT PATH (every access of a state with incremental TTL cleanup): inlined loop
        chunks = self._chunks
        size = self.store.size
        scanned = 0  # key groups loaded by this call: each at most once
        while n > 0:
            if not chunks:
                if scanned >= size:
                    return
                scanned += self._refill(size - scanned)
                if not chunks:
                    return
            m, dirty, kgi, keys = chunks[-1]
            get = m.get
            pop = keys.pop
            while keys and n > 0:
                key = pop()
                v = get(key, _MISSING)
                if v is _MISSING:
                    continue
                n -= 1
                new = fn(v)
                if new is not v:
                    if new is None:
                        del m[key]
                    else:
                        m[key] = new
                    dirty[key] = kgi
            if not keys:
                chunks.pop()
