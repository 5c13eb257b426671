"""Heap lookups answered from the state-version files themselves, with no serving copy.

A lookup of key ``k`` (serialized ``key_bytes``) in key group ``kg`` of a subtask's lineage
(base snapshots + deltas, as of one snapshot) reads, newest first, each delta's block of
``kg`` for the state: ``key_bytes`` among its puts is the answer (that entry's value), ``key_bytes`` among its
tombstones means no value; no delta naming it, the base's section of ``kg`` decides. The
files are immutable, so an answer depends only on the lineage it was asked at: no copy has
to be brought forward (the job's changes are never mirrored into Python objects), nothing
is ever *ahead* of a request (no ``StaleSnapshot``), and what the query host spends follows
the lookups, not the job's rate of change. Each file is read and its block headers parsed
once (``format.keyed_index``: offsets only); a key is found by its bytes with
``bytes.find`` (C), or in a dict of a block's keys once that block was searched
``keyed_index.INDEX_AFTER`` times, and only the entry's value is deserialized.

Where it applies (:meth:`FileSearch.plan`; else the serving copies of ``serving.py``): the
heap backend, a key type whose serializer writes every key in the same number of bytes and
equal keys as equal bytes (the integer types and BOOLEAN: ``canonical_bytes``), plain
heap-format snapshots as the base (not a changelog's), and the same serializers recorded
for the state in every file of the lineage (no schema change inside it). Values are
answered as stored, as the copies answer them: TTL unwrapped, nothing expired.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from streamstate.errors import StreamStateError, WrongKeyTypeError
from streamstate.runtime.checkpoint.handles import (
    ByteStreamStateHandle,
    FileStateHandle,
    KeyGroupsStateHandle,
)
from streamstate.runtime.protocol import Lineage
from streamstate.runtime.serializers.base import fixed_width
from streamstate.runtime.serializers.ttl import is_ttl_snapshot
from streamstate.runtime.state import ttl
from streamstate.runtime.state.format.keyed import FORMAT_NAME, FORMAT_VERSION
from streamstate.runtime.state.format.keyed_index import (
    Block,
    find_key,
    index_delta,
    index_section,
    searchable_keys,
)
from streamstate.runtime.state.registry import registration
from streamstate.runtime.state.restore_meta import read_serializers
from streamstate.runtime.state_reader import passthrough_descriptor

__all__ = ["FileSearch", "SearchPlan"]

#: the meta fields whose serializers must agree across a lineage's files
_SER_FIELDS = ("key_serializer", "namespace_serializer", "value_serializer", "user_key_serializer")
_VALUE_KINDS = frozenset({"value", "reducing", "aggregating"})


@dataclass(frozen=True)
class SearchPlan:
    """How to read one state of one lineage from its files (made once per lineage)."""

    name: str
    kind: str
    #: bytes per serialized key
    width: int
    #: the state's serializers as its files recorded them (None: no file holds the state)
    sers: Any
    #: the value serializer's fixed width, 0 when it has none (or the state is not value-like)
    value_width: int
    with_ttl: bool
    #: (blocks by key group, the state's id in that delta), newest delta first
    deltas: tuple[tuple[dict[int, list[Block]], int], ...]
    #: (base handle, the state's id in it, the kinds by state id)
    bases: tuple[tuple[KeyGroupsStateHandle, int, list[str]], ...]


def _sid_of(states_meta: list[dict[str, Any]], name: str) -> int | None:
    for sid, sm in enumerate(states_meta):
        if sm.get("name") == name:
            return sid
    return None


def _searchable_base(h: Any) -> bool:
    return (
        type(h) is KeyGroupsStateHandle
        and isinstance(h.stream, FileStateHandle | ByteStreamStateHandle)
        and h.meta.get("format") == FORMAT_NAME
        and h.meta.get("format_version") == FORMAT_VERSION
    )


def _file_key(handle: Any) -> Any:
    """What identifies a state file across processes and pickles: the stream handle's
    value (path, size, checksums; inline bytes). A query host gets every pinned lineage
    unpickled anew, so its handles are new objects each epoch, the files the same."""
    try:
        hash(handle)  # hashability probe only (a dict key in this process, never a key group)
    except TypeError:
        return id(handle)
    return handle


class FileSearch:
    """The parsed files of the lineages a :class:`~.serving.ServingCache` answers from;
    files stay parsed while the newest snapshot names them (:meth:`prune`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: delta file -> (states meta, blocks by key group)
        self._deltas: dict[Any, tuple[list[dict[str, Any]], dict[int, list[Block]]]] = {}
        #: base file -> its bytes (read and verified once)
        self._bases: dict[Any, bytes] = {}
        #: (base file, key group) -> the blocks of that key group's section
        self._sections: dict[tuple[Any, int], list[Block]] = {}
        #: (id(lineage), state name) -> (lineage, plan or None: not searchable)
        self._plans: dict[tuple[int, str], tuple[Lineage, SearchPlan | None]] = {}
        #: thread CPU seconds spent reading and parsing files (the upkeep; the lookups'
        #: own searching is not in it)
        self.parse_cpu_s = 0.0
        #: lookups answered from the files; files read (each once while it is live)
        self.lookups = 0
        self.files_read = 0

    # ------------------------------------------------------------------ files

    def _delta(self, handle: Any) -> tuple[list[dict[str, Any]], dict[int, list[Block]]]:
        key = _file_key(handle)
        with self._lock:
            hit = self._deltas.get(key)
        if hit is None:
            t0 = time.thread_time()
            try:
                data = handle.read()
                self.files_read += 1
                hit = index_delta(data) if data else ([], {})
            finally:
                self.parse_cpu_s += time.thread_time() - t0
            with self._lock:
                self._deltas[key] = hit
        return hit

    def _section(self, h: KeyGroupsStateHandle, kg: int, kinds: list[str]) -> list[Block]:
        fkey = _file_key(h.stream)
        with self._lock:
            hit = self._sections.get((fkey, kg))
        if hit is None:
            t0 = time.thread_time()
            try:
                with self._lock:
                    data = self._bases.get(fkey)
                if data is None:
                    data = h.stream.read()
                    self.files_read += 1
                    with self._lock:
                        self._bases[fkey] = data
                off, length = h.offsets[kg]
                hit = index_section(data, off, length, kg, kinds)
            finally:
                self.parse_cpu_s += time.thread_time() - t0
            with self._lock:
                self._sections[(fkey, kg)] = hit
        return hit

    def prune(self, live: list[Lineage]) -> None:
        """Forget the files and plans of lineages other than ``live`` (the newest
        snapshot's): a request pinned to an older one parses what it needs again."""
        deltas = {_file_key(d) for lin in live for d in lin.deltas}
        bases = {_file_key(b.stream) for lin in live for b in lin.base if _searchable_base(b)}
        lineages = {id(lin) for lin in live}
        with self._lock:
            for k in [k for k in self._deltas if k not in deltas]:
                del self._deltas[k]
            for k in [k for k in self._bases if k not in bases]:
                del self._bases[k]
            for s in [s for s in self._sections if s[0] not in bases]:
                del self._sections[s]
            for p in [p for p in self._plans if p[0] not in lineages]:
                del self._plans[p]

    def clear(self) -> None:
        with self._lock:
            self._deltas.clear()
            self._bases.clear()
            self._sections.clear()
            self._plans.clear()

    # ------------------------------------------------------------------ plans

    def plan(self, lin: Lineage, op: Any, name: str, kind: str) -> SearchPlan | None:
        """How to search ``lin`` for state ``name`` (None: not searchable, see the module
        docstring; the caller reads a serving copy instead)."""
        key = (id(lin), name)
        with self._lock:
            hit = self._plans.get(key)
        if hit is not None and hit[0] is lin:
            return hit[1]
        got = self._make_plan(lin, op, name, kind)
        with self._lock:
            self._plans[key] = (lin, got)
        return got

    def _make_plan(self, lin: Lineage, op: Any, name: str, kind: str) -> SearchPlan | None:
        ser = op.key_serializer
        width = searchable_keys(ser)
        if registration(op.backend_name).native_versions or not width:
            return None
        if not all(_searchable_base(h) for h in lin.base):
            return None
        metas: list[dict[str, Any]] = []
        bases = []
        for h in lin.base:
            states = h.meta.get("states") or []
            sid = _sid_of(states, name)
            if sid is not None:
                bases.append((h, sid, [sm.get("kind", "") for sm in states]))
                metas.append(states[sid])
        deltas = []
        for d in reversed(lin.deltas):
            states, by_kg = self._delta(d)
            sid = _sid_of(states, name)
            if sid is not None:
                deltas.append((by_kg, sid))
                metas.append(states[sid])
        if not metas:  # nothing written yet: every key is absent
            return SearchPlan(name, kind, width, None, 0, False, (), ())
        first = metas[0]
        agreed = {f: json.dumps(first.get(f), sort_keys=True) for f in _SER_FIELDS}
        for sm in metas:
            if sm.get("kind") != kind:
                return None  # the copies' path raises the typed error for it
            if any(json.dumps(sm.get(f), sort_keys=True) != agreed[f] for f in _SER_FIELDS):
                return None  # a schema change inside the lineage: the copies migrate
        job_key = json.dumps(ser.snapshot_configuration().to_dict(), sort_keys=True)
        if agreed["key_serializer"] != job_key:
            return None
        try:
            sers = read_serializers(None, name, first)
        except StreamStateError:  # a serializer this process cannot rebuild: copies report it
            return None
        with_ttl = is_ttl_snapshot(first.get("value_serializer"))
        value_width = 0
        if kind in _VALUE_KINDS and not with_ttl:
            value_width = fixed_width(sers.value)
        return SearchPlan(
            name, kind, width, sers, value_width, with_ttl, tuple(deltas), tuple(bases)
        )

    # ------------------------------------------------------------------ lookups

    def read(self, plan: SearchPlan, key: bytes, kg: int) -> Any:
        """The value of the key serialized as ``key`` (key group ``kg``) as of the plan's
        lineage, answered as a serving copy answers it (``serving.read_one``)."""
        self.lookups += 1
        if plan.sers is None:
            return None
        width = plan.width
        if len(key) != width:
            raise WrongKeyTypeError(
                f"a key of {len(key)} bytes for the job's key type of {width} bytes: pass "
                f"the job's key type"
            )
        for by_kg, sid in plan.deltas:
            for b in by_kg.get(kg, ()):
                if b.sid != sid or not b.void_ns:
                    continue
                i = find_key(b, key, width)
                if i >= 0:
                    return self._answer(plan, b, i)
                if b.dels_end > b.dels_at and find_key(b, key, width, tombstones=True) >= 0:
                    return None
        for h, sid, kinds in plan.bases:
            if kg not in h.offsets:
                continue
            for b in self._section(h, kg, kinds):
                if b.sid == sid and b.void_ns:
                    i = find_key(b, key, width)
                    if i >= 0:
                        return self._answer(plan, b, i)
        return None

    def _answer(self, plan: SearchPlan, b: Block, i: int) -> Any:
        v = b.value(i, plan.kind, plan.sers, plan.value_width)
        kind = plan.kind
        if kind == "list":
            v = list(v) or None
        elif kind == "map":
            v = dict(v) or None
        if plan.with_ttl and v is not None:
            v = ttl.unwrap_stored(passthrough_descriptor(plan.name, kind), v)
        return v
