"""Serving copies: keyed state as of one published snapshot, per key group (or subtask).

A lookup for key ``k`` of operator ``uid`` goes to the *serving copy* of the range owning
``k``'s key group: a keyed backend restored from the lineage (base snapshots + deltas) that
the snapshot records for the owning subtask, restricted to that range. Heap state is served
per key group (the base's section of that key group is read with a range read, each delta
applies only its entries of that key group); RocksDB per subtask (the epoch version's files
are opened by a RocksDB backend on local disk, not loaded into memory).

A copy follows its subtask forward: when a newer snapshot has the same base and more deltas,
only the new deltas are applied (the "epoch's delta applied to a serving copy"); a new base
written with its bridge (``Lineage.bridge``: the changes since the version before it, written
for queryable state at full-version and checkpoint epochs, kept with the previous base's
deltas) is reached by a copy of the previous base by applying the rest of those deltas and
the bridge; any other new base (a copy further behind, a RocksDB version, a restore)
rebuilds it. A copy never goes back: a request
pinned to an older snapshot than the copy's raises :class:`StaleSnapshot`, and the caller
answers the whole request again from the newest snapshot, so one answer never mixes epochs.

The copies are held in an LRU of ``max_entries`` (least recently used disposed first), so
the memory they take is bounded by the configuration, never the whole state by design.
:class:`ServingCache` answers heap lookups of integer and boolean keys from the version
files themselves instead, with no copy (``search.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamstate.api.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from streamstate.errors import StateMigrationError, StateNotAvailableYetError
from streamstate.runtime.checkpoint.handles import (
    ByteStreamStateHandle,
    FileStateHandle,
    KeyGroupsStateHandle,
    StreamStateHandle,
)
from streamstate.runtime.keygroups import (
    KeyGroupRange,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
)
from streamstate.runtime.protocol import Lineage, Token
from streamstate.runtime.queryable.process import PROCESS
from streamstate.runtime.queryable.search import FileSearch
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.state import ttl
from streamstate.runtime.state.format.keyed import delta_states_meta
from streamstate.runtime.state.format.keyed_index import split_delta
from streamstate.runtime.state.registry import create_keyed_backend, registration
from streamstate.runtime.state_reader import passthrough_descriptor

__all__ = [
    "QueryableOperator",
    "ServingCache",
    "ServingSnapshot",
    "StaleSnapshot",
    "read_descriptor",
    "read_one",
    "with_bridges",
]


log = logging.getLogger("streamstate")

#: delta files kept in memory (split by key group) for the serving copies that still have
#: to apply them; a refresh drops those no longer in the newest snapshot's lineages
DELTA_CACHE = 256


#: base snapshot files kept in memory while the newest snapshot's lineages name them
BASE_CACHE = 64


class _Verified(StreamStateHandle):
    """Bytes of a state file already read and verified (see ``ServingCache._cached_bases``)."""

    def __init__(self, data: bytes, crc: int) -> None:
        self.data, self.size, self.crc = data, len(data), crc

    def read(self) -> bytes:
        return self.data

    def read_range(self, offset: int, length: int) -> bytes:
        return self.data[offset : offset + length]


class StaleSnapshot(Exception):
    """The serving copy is already ahead of the request's snapshot: re-pin and retry."""


@dataclass(frozen=True)
class QueryableOperator:
    """What the query server needs to know of one keyed operator of the running plan."""

    uid: str
    name: str
    parallelism: int
    max_parallelism: int
    key_serializer: TypeSerializer
    backend_name: str
    backend_options: Mapping[str, Any] = field(default_factory=dict)

    def subtask_of(self, key_group: int) -> int:
        return compute_operator_index_for_key_group(
            self.max_parallelism, self.parallelism, key_group
        )

    def serving_range(self, key_group: int) -> KeyGroupRange:
        """The range one serving copy holds: a key group (heap), the subtask's (a backend
        whose versions are its own files, one per subtask: RocksDB)."""
        return self._ranges[key_group]

    @functools.cached_property
    def _ranges(self) -> list[KeyGroupRange]:
        if registration(self.backend_name).native_versions:
            return [
                compute_key_group_range_for_operator_index(
                    self.max_parallelism, self.parallelism, self.subtask_of(kg)
                )
                for kg in range(self.max_parallelism)
            ]
        return [KeyGroupRange(kg, kg) for kg in range(self.max_parallelism)]


@dataclass(frozen=True)
class ServingSnapshot:
    """An immutable view of one completed epoch or checkpoint: every keyed subtask's lineage.

    Published by the driver after it folded an epoch's acks (``as_of="epoch"``) or completed
    (or restored) a checkpoint (``as_of="checkpoint"``); never changed afterwards."""

    as_of: str
    epoch: int
    attempt: int
    checkpoint_id: int | None
    #: (operator uid, subtask) -> the lineage of that subtask's state at this epoch
    lineages: Mapping[tuple[str, int], Lineage]
    operators: Mapping[str, QueryableOperator]
    #: (operator uid, subtask) -> (address, secret) of the query host on the machine
    #: holding that subtask's state (``query_host.py``); others are served by the driver
    hosts: Mapping[tuple[str, int], tuple[str, str]] = field(default_factory=dict)


def with_bridges(
    lineages: Mapping[tuple[str, int], Lineage], current: Mapping[tuple[str, int], Lineage]
) -> dict[tuple[str, int], Lineage]:
    """Checkpoint ``lineages`` (from its ``_metadata``) given the bridge of the subtask's
    ``current`` lineage where that has the same base (the checkpoint was its last new base),
    so checkpoint copies too move to the next checkpoint by deltas, not rebuilt."""
    out = {}
    for k, lin in lineages.items():
        cur = current.get(k)
        if cur is not None and cur.bridge is not None and lin.base and _same(cur.base, lin.base):
            lin = dataclasses.replace(lin, bridge=cur.bridge)
        out[k] = lin
    return out


def read_one(state: Any, kind: str) -> Any:
    """The value of the current key of ``state`` as a query answers it."""
    if kind == "value":
        return state.value()
    if kind == "list":
        got = state.get()
        return None if got is None else list(got) or None
    if kind == "map":
        return dict(state.items()) or None
    return state.get()  # reducing / aggregating


def _delta_files(lin: Lineage) -> tuple[Any, ...]:
    return lin.deltas if lin.bridge is None else (*lin.bridge[1], lin.bridge[2], *lin.deltas)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


class _DeltaPart:
    """A copy's part of one delta: the delta's prefix (header and meta), its states' meta
    (parsed once per delta) and the blocks of the copy's key groups."""

    __slots__ = ("blocks", "prefix", "states_meta")

    def __init__(self, prefix: bytes, states_meta: list[Any], blocks: list[bytes]) -> None:
        self.prefix, self.states_meta, self.blocks = prefix, states_meta, blocks


class _Entry:
    """One serving copy; every use holds :attr:`lock`."""

    def __init__(self, op: QueryableOperator, rng: KeyGroupRange) -> None:
        self.op = op
        self.range = rng
        self.lock = threading.Lock()
        self.backend: Any = None
        self.base: tuple[Any, ...] = ()
        self.deltas: tuple[Any, ...] = ()
        self.token: Token = (-1, -1)
        #: the lineage the copy is at (identity check first: lineages are immutable)
        self.lineage: Lineage | None = None
        #: state name -> (state handle, whether it is stored with TTL, the type infos read with)
        self.states: dict[str, tuple[Any, bool, Any]] = {}
        #: (a delta prefix, the backend's resolution of its states): deltas with the same
        #: prefix (meta) reuse it until a state is registered or the copy rebuilt
        self.resolved: tuple[bytes, Any] | None = None
        #: a lookup read the copy since the last refresh
        self.wanted = True

    def close(self, now: bool = False) -> None:
        """Drop the copy (disposed in the background unless ``now``)."""
        if self.backend is not None:
            if now:
                self.backend.dispose()
            else:
                PROCESS.disposer.later(self.backend)
        self.backend = None
        self.lineage = None
        self.states = {}
        self.resolved = None

    def advance(self, lin: Lineage, read: Any = None, bases: Any = None) -> str:
        """Bring the copy to ``lin`` (forward only; :class:`StaleSnapshot` when behind);
        returns how: ``"current"``, ``"deltas"`` (applied the new deltas), ``"bridged"``
        (onto a new base through ``lin.bridge``) or ``"built"`` (restored from ``lin``).

        ``read(handle, range)``: a delta's part of the copy's range (the cache shares the
        delta files between the copies); ``bases(base)``: the base handles to restore."""
        if self.lineage is lin and self.backend is not None:
            return "current"  # already there (the common case: many lookups per epoch)
        read = read or (lambda d, rng: d.read())
        self.lineage = None
        if self.backend is not None:
            todo, how = self._forward(lin)
            if todo is not None:
                try:
                    for d in todo:
                        self._apply(read(d, self.range))
                except BaseException as e:  # partly applied: at no version, drop the copy
                    self.close()
                    if how != "bridged" or not isinstance(e, OSError):
                        raise
                    # the bridge's files went (superseded): rebuild from the new base
                else:
                    self.base, self.deltas = lin.base, lin.deltas
                    self.token = max(self.token, lin.token)
                    self.lineage = lin
                    return how
        if self.backend is not None and lin.token < self.token:
            raise StaleSnapshot()
        self.close()
        op = self.op
        backend = create_keyed_backend(
            op.backend_name,
            operator_name=f"{op.name} (queryable)",
            key_group_range=self.range,
            max_parallelism=op.max_parallelism,
            key_serializer=op.key_serializer,
            **{**op.backend_options, **registration(op.backend_name).serving_copy_options},
        )
        try:
            if lin.base:
                backend.restore(bases(lin.base) if bases is not None else list(lin.base))
            self.backend = backend
            for d in lin.deltas:
                self._apply(read(d, self.range))
        except BaseException:
            self.backend, self.resolved = None, None
            backend.dispose()
            raise
        self.base, self.deltas, self.token = lin.base, lin.deltas, lin.token
        self.lineage = lin
        return "built"

    def _forward(self, lin: Lineage) -> tuple[tuple[Any, ...] | None, str]:
        """The deltas that bring the copy to ``lin`` without a rebuild, if any: the new
        deltas of the same base, or, for a copy of the base before (``lin.bridge``), the
        rest of that base's deltas, the bridge onto the new base, then its deltas."""
        if _same(self.base, lin.base):
            k = len(self.deltas)
            if len(lin.deltas) >= k and _same(self.deltas, lin.deltas[:k]):
                return lin.deltas[k:], "deltas"
        bridge = lin.bridge
        if bridge is not None and lin.token > self.token and _same(self.base, bridge[0]):
            k = len(self.deltas)
            if len(bridge[1]) >= k and _same(self.deltas, bridge[1][:k]):
                return (*bridge[1][k:], bridge[2], *lin.deltas), "bridged"
        return None, "built"

    def _apply(self, part: _DeltaPart | bytes | None) -> None:
        if part is None:
            return
        if type(part) is bytes:
            self.backend.apply_delta(part)
            return
        assert isinstance(part, _DeltaPart)
        got = self.resolved
        resolved = got[1] if got is not None and got[0] == part.prefix else None
        self.resolved = (
            part.prefix,
            self.backend.apply_delta_blocks(part.states_meta, part.blocks, resolved),
        )

    def read(self, state: tuple[str, str, Any], key: Any, key_group: int) -> Any:
        """``key``'s value of ``state`` = (name, kind, the job's type infos or None)."""
        state_name, kind, type_infos = state
        entry = self.states.get(state_name)
        if entry is not None and entry[2] != type_infos:
            # first read with other serializers (the job's became known): a fresh copy
            self.close()
            raise StaleSnapshot()
        if entry is None:
            plain = read_descriptor(state_name, kind, type_infos)
            try:
                entry = (self.backend.get_partitioned_state(plain), False, type_infos)
            except StateMigrationError:
                # written with TTL: read the stored form, unwrap below (nothing expires here)
                stored = ttl.stored_form_descriptor(plain)
                entry = (self.backend.get_partitioned_state(stored), True, type_infos)
            self.states[state_name] = entry
            self.resolved = None  # a registered state resolves differently
        handle, with_ttl, _ = entry
        self.backend.set_current_key(key, key_group)
        value = read_one(handle, kind)
        if with_ttl:
            value = ttl.unwrap_stored(passthrough_descriptor(state_name, kind), value)
        return value


def read_descriptor(name: str, kind: str, type_infos: tuple[Any, ...] | None) -> Any:
    """A descriptor reading state ``name`` as stored: with the job's type infos when known
    (so the serializers match the recorded ones and nothing is migrated, which RocksDB
    would do for the whole state), else pass-through (pickle reads any serializer's data
    on the heap backend, where migration is read-side)."""
    if type_infos is None:
        return passthrough_descriptor(name, kind)
    t = type_infos
    if kind == "value":
        return ValueStateDescriptor(name, t[0])
    if kind == "list":
        return ListStateDescriptor(name, t[0])
    if kind == "map":
        return MapStateDescriptor(name, t[0], t[1])
    if kind == "reducing":
        return ReducingStateDescriptor(name, ttl.keep_last, t[0])
    return AggregatingStateDescriptor(name, ttl.StoredAggregate(), t[0])


class ServingCache:
    """The serving copies of one kind of snapshot (epoch or checkpoint), an LRU; heap
    lookups that can be answered from the version files themselves are (``search.py``:
    no copy), unless ``search`` is off.

    Thread-safe: lookups of any thread and the service's refresher share it; a copy is
    advanced and read under its own lock, so a reader never sees a copy half-way between
    two snapshots."""

    def __init__(self, max_entries: int, search: bool = True) -> None:
        self.max_entries = max(1, int(max_entries))
        #: answers from the version files where it applies (None: copies only)
        self.search: FileSearch | None = FileSearch() if search else None
        self._entries: OrderedDict[tuple[str, int, int], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        #: how many copies were built (restored) / moved onto a new base by its bridge
        #: (``Lineage.bridge``) instead: for tests and metrics
        self.builds = 0
        self.bridged = 0
        #: thread CPU seconds spent bringing copies forward (refresher and lookups)
        self.maintain_cpu_s = 0.0
        #: rebuilds the refresher left to lookups (copies not read since the refresh before)
        self.skipped = 0
        #: a lookup came since the last refresh
        self.used = False
        #: base snapshot files read (and verified) once, by handle
        self._bases: OrderedDict[int, tuple[Any, Any]] = OrderedDict()
        #: the last deltas read, split by key group (every copy of a subtask applies parts
        #: of the same delta files)
        self._deltas: OrderedDict[int, tuple[Any, bytes, list[Any], dict[int, list[bytes]]]] = (
            OrderedDict()
        )

    def __len__(self) -> int:
        return len(self._entries)

    def _entry(self, op: QueryableOperator, rng: KeyGroupRange) -> _Entry:
        key = (op.uid, rng.start, rng.end)
        victims: list[_Entry] = []
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.op is not op:
                entry = self._entries[key] = _Entry(op, rng)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                victims.append(self._entries.popitem(last=False)[1])
        for v in victims:
            with v.lock:
                v.close()
        return entry

    def _cached_bases(self, base: tuple[Any, ...]) -> list[Any]:
        """``base`` with every heap snapshot file read (and verified) once and then served
        from memory: a file handle's range read verifies the whole file each time, and
        every key group's copy reads its range of the same file."""
        out = []
        for h in base:
            if type(h) is not KeyGroupsStateHandle or not isinstance(
                h.stream, FileStateHandle | ByteStreamStateHandle
            ):
                out.append(h)  # inline bytes, changelogs, RocksDB files: as they are
                continue
            with self._lock:
                hit = self._bases.get(id(h))
            if hit is None or hit[0] is not h:
                stream = _Verified(h.stream.read(), h.stream.crc)
                hit = (h, dataclasses.replace(h, stream=stream))
                with self._lock:
                    self._bases[id(h)] = hit
                    while len(self._bases) > BASE_CACHE:
                        self._bases.popitem(last=False)
            out.append(hit[1])
        return out

    def _delta_part(self, handle: Any, rng: KeyGroupRange) -> _DeltaPart | None:
        with self._lock:
            hit = self._deltas.get(id(handle))
        if hit is None or hit[0] is not handle:
            data = handle.read()
            if not data:
                return None  # an empty bridge (nothing changed)
            prefix, blocks = split_delta(data)
            hit = (handle, prefix, delta_states_meta(prefix), blocks)
            with self._lock:
                self._deltas[id(handle)] = hit
                while len(self._deltas) > DELTA_CACHE:
                    self._deltas.popitem(last=False)
        _, prefix, states_meta, by_kg = hit
        if rng.start == rng.end:
            parts = by_kg.get(rng.start)
        else:
            parts = [b for kg in range(rng.start, rng.end + 1) for b in by_kg.get(kg, ())]
        return _DeltaPart(prefix, states_meta, parts) if parts else None

    def read(
        self,
        snap: ServingSnapshot,
        op: QueryableOperator,
        state: tuple[str, str, Any],
        key: Any,
        key_group: int,
    ) -> Any:
        """``key``'s value of ``state`` (name, kind, type infos) as of ``snap``
        (StaleSnapshot: re-pin)."""
        lin = snap.lineages.get((op.uid, op.subtask_of(key_group)))
        if lin is None:  # e.g. a BATCH job, which keeps no state versions
            raise StateNotAvailableYetError(
                f"operator {op.uid!r} has no state version as of {snap.as_of} {snap.epoch}"
            )
        return self.read_lineage(lin, op, state, key, key_group)

    def read_lineage(
        self,
        lin: Lineage,
        op: QueryableOperator,
        state: tuple[str, str, Any],
        key: Any,
        kg: int,
        key_bytes: bytes | None = None,
    ) -> Any:
        """``key``'s value as of ``lin``, the lineage of the subtask owning key group
        ``kg`` (a query host is sent it by the driver).

        ``state`` is ``(name, kind, type infos)`` of the registered state; ``key_bytes``:
        ``key`` serialized with the job's key serializer, when the caller has them (else
        serialized here). Searched in the lineage's files where that applies, else read
        from the serving copy of ``lin``'s range, advanced to ``lin`` first. Raises
        :class:`StaleSnapshot` when that copy is already past ``lin`` (the caller answers
        again from the newest snapshot)."""
        self.used = True
        search = self.search
        if search is not None:
            plan = search.plan(lin, op, state[0], state[1])
            if plan is not None:
                if key_bytes is None:  # an empty serialized key is a key like any other
                    key_bytes = op.key_serializer.serialize(key)
                return search.read(plan, key_bytes, kg)
        key_group = kg
        entry = self._entry(op, op.serving_range(key_group))
        with entry.lock:
            self._advance(entry, lin)
            entry.wanted = True
            return entry.read(state, key, key_group)

    def _advance(self, entry: _Entry, lin: Lineage) -> None:
        if entry.lineage is lin and entry.backend is not None:
            return  # current (most lookups)
        t0 = time.thread_time()
        try:
            how = entry.advance(lin, self._delta_part, self._cached_bases)
        finally:
            self.maintain_cpu_s += time.thread_time() - t0
        if how == "built":
            self.builds += 1
        elif how == "bridged":
            self.bridged += 1

    def refresh(self, snap: ServingSnapshot) -> int:
        """Bring every copy held to ``snap`` (after a publish, off the lookups' path, so that
        most lookups find their copy there already); returns how many moved. Only while
        lookups come: without a lookup since the last refresh, copies wait for the next
        lookup to bring them up (an unqueried job pays nothing). Only rebuilds are done
        here (every RocksDB version, a heap copy too far behind for a bridge), and only of
        copies a lookup read since the last refresh (an idle RocksDB subtask's database is
        not reopened every epoch): a rebuild would cost a lookup milliseconds. Moves by
        deltas or a bridge are left to the copy's next lookup, which applies all of them
        since at once: ~20 % less CPU in sum than applying each epoch's to every copy
        (``benchmarks/queryable_copies.py``) for ~0.1 ms on the lookups that do it."""
        if not self.used:
            return 0
        self.used = False
        if self.search is not None:
            self.search.prune(list(snap.lineages.values()))
        live = {id(d) for lin in snap.lineages.values() for d in _delta_files(lin)}
        live_bases = {id(b) for lin in snap.lineages.values() for b in lin.base}
        with self._lock:
            entries = list(self._entries.values())
            for k in [k for k in self._deltas if k not in live]:
                del self._deltas[k]
            for k in [k for k in self._bases if k not in live_bases]:
                del self._bases[k]
        moved = 0
        for entry in entries:
            op = snap.operators.get(entry.op.uid)
            lin = snap.lineages.get((entry.op.uid, entry.op.subtask_of(entry.range.start)))
            if op is not entry.op or lin is None or entry.lineage is lin:
                continue
            with entry.lock:
                if entry.backend is None:
                    continue  # evicted meanwhile
                wanted, entry.wanted = entry.wanted, False
                if not wanted or entry._forward(lin)[0] is not None:
                    # moved by deltas (or a bridge): left to the copy's next lookup, which
                    # applies all of them since at once (cheaper in sum, see the docstring);
                    # a copy no lookup read since the last refresh is not rebuilt either
                    self.skipped += 1
                    continue
                try:
                    self._advance(entry, lin)
                    moved += 1
                except (StaleSnapshot, OSError):
                    continue  # a newer snapshot moved it on, or its files went: lookups decide
            # hand the interpreter to waiting lookups between copies: without it, a query
            # thread waits a switch interval (5 ms) for every socket call it makes
            time.sleep(0)
        return moved

    def clear(self) -> None:
        if self.search is not None:
            self.search.clear()
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            self._deltas.clear()
            self._bases.clear()
        for e in entries:
            with e.lock:
                e.close(now=True)
