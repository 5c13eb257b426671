"""The shuffle between stages: how a subtask's output is partitioned into chunks, and
how a receiving subtask decodes its chunks back into records, in a deterministic order.

A payload is one of ``(DATA, src stage, src subtask, seq, blob, input)``,
``(WATERMARK, src stage, src subtask, node, watermark, idle)`` or ``(ACK, pickled ack)``
(acks carry sink results, user objects: pickled with :func:`dumps_portable`).
``blob`` is a memo-free pickle of ``("R", records[, timestamps])`` (forward,
rebalance and broadcast edges), ``("C", key groups, keys, values[, timestamps])`` (hash
edges: columns are cheaper to pickle than triples) or ``("K", key groups, values[,
timestamps])`` (hash edges whose receiver extracts the keys itself with the edge's key
selector, as Flink's receivers do: a third fewer bytes to ship and to unpickle); key groups
travel as an ``array``. A receiver hands a hash input to its operators as
:class:`KeyedColumns`, which iterate as ``(key group, key, record)`` triples without
building them all. Nothing here imports pyspark.
"""

from __future__ import annotations

import pickle
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Any

import mmh3

from streamstate.errors import KeySerializationError, OutputTypeError
from streamstate.runtime.field_getters import fast_key_selector
from streamstate.runtime.graph import CustomPartitionSpec, Edge, KeyingSpec, Partitioning, Stage
from streamstate.runtime.operators.base import as_callable
from streamstate.runtime.serializers.base import dumps_unshared
from streamstate.runtime.watermarks import ChannelWatermark

__all__ = [
    "ACK",
    "DATA",
    "WATERMARK",
    "EdgeWriter",
    "KeyedColumns",
    "decode_input",
    "dumps_chunk",
]

DATA, ACK, WATERMARK = "D", "A", "W"
_KEY_CACHE_LIMIT = 200_000
_PICKLE = 5


class EdgeWriter:
    """Partitions one node's output for one shuffle edge into per-target chunks."""

    def __init__(
        self, edge: Edge, dest: Stage, index: int, node_name: str, cache: dict[Any, Any]
    ) -> None:
        self.edge = edge
        self.p = dest.parallelism
        self.mp = dest.max_parallelism
        self.index = index
        self.node_name = node_name
        self.buckets: list[list[Any]] = [[] for _ in range(self.p)]
        #: key groups travel as an array of the smallest type that holds them
        self.kg_type = "B" if self.mp <= 256 else "H"
        #: hash edges keep columns per target: key groups, keys (unless the receiver
        #: extracts them), values (cheaper to pickle than triples)
        self.cols: list[tuple[array[int], list[Any], list[Any]]] = self._new_cols()
        #: broadcast edges: one list, pickled once and sent to every target
        self.everyone: list[Any] = []
        self.cache = cache
        self.rr = index  # rebalance starts at a subtask-dependent, deterministic position
        #: per target timestamps parallel to buckets / cols (None until a timestamped batch)
        self.ts: list[list[Any]] | None = None
        self.cts: list[list[Any]] | None = None
        self.ets: list[Any] | None = None  # broadcast edges
        #: per chunk cycle: the appenders of each column, indexed by key group (_table)
        self._tables: list[list[Any] | None] = [None] * 4
        if edge.partitioning is Partitioning.HASH:
            assert isinstance(edge.keying, KeyingSpec)
            self.key_of = fast_key_selector(as_callable(edge.keying.key_selector, "get_key"))
            self.ser = edge.keying.key_serializer.serialize
            #: key group -> target subtask (Flink's operator index for a key group)
            self.target_of = [kg * self.p // self.mp for kg in range(self.mp)]
        elif edge.partitioning is Partitioning.CUSTOM:
            assert isinstance(edge.keying, CustomPartitionSpec)
            self.key_of = as_callable(edge.keying.key_selector, "get_key")
            self.partition = as_callable(edge.keying.partitioner, "partition")

    def _new_cols(self) -> list[tuple[array[int], list[Any], list[Any]]]:
        return [(array(self.kg_type), [], []) for _ in range(self.p)]

    def add(self, batch: list[Any], timestamps: list[Any] | None = None) -> None:
        if timestamps is not None or self.ts is not None:
            self._add_timed(batch, timestamps)
            return
        part = self.edge.partitioning
        if part is Partitioning.HASH:
            if self.edge.receiver_keys:
                self._add_hash_unkeyed(batch)
            else:
                self._add_hash(batch)
        elif part is Partitioning.FORWARD:
            self.buckets[self.index % self.p].extend(batch)
        elif part is Partitioning.BROADCAST:
            self.everyone.extend(batch)
        elif part is Partitioning.CUSTOM:
            self._add_custom(batch, None)
        else:
            p, b = self.p, self.buckets
            start = self.rr
            for j, v in enumerate(batch):
                b[(start + j) % p].append(v)
            self.rr = (start + len(batch)) % p

    def _add_timed(self, batch: list[Any], timestamps: list[Any] | None) -> None:
        """The timestamped path: a timestamp column travels next to the records.

        Kept apart so that untimestamped streams pay nothing for it. Records added
        before the first timestamped batch get None timestamps (no timestamp).
        """
        if self.ts is None:
            self.ts = [[None] * len(b) for b in self.buckets]
            self.cts = [[None] * len(c[0]) for c in self.cols]
            self.ets = [None] * len(self.everyone)
        assert self.cts is not None and self.ets is not None
        if timestamps is None:
            timestamps = [None] * len(batch)
        part = self.edge.partitioning
        if part is Partitioning.HASH:
            if self.edge.receiver_keys:
                self._add_hash_timed_unkeyed(batch, timestamps)
            else:
                self._add_hash_timed(batch, timestamps)
        elif part is Partitioning.BROADCAST:
            self.everyone.extend(batch)
            self.ets.extend(timestamps)
        elif part is Partitioning.FORWARD:
            i = self.index % self.p
            self.buckets[i].extend(batch)
            self.ts[i].extend(timestamps)
        elif part is Partitioning.CUSTOM:
            self._add_custom(batch, timestamps)
        else:
            p, b, tl = self.p, self.buckets, self.ts
            start = self.rr
            for j, v in enumerate(batch):
                k = (start + j) % p
                b[k].append(v)
                tl[k].append(timestamps[j])
            self.rr = (start + len(batch)) % p

    def _add_custom(self, batch: list[Any], timestamps: list[Any] | None) -> None:
        """``partition_custom``: the partitioner picks each record's subtask."""
        key_of, partition, p, b = self.key_of, self.partition, self.p, self.buckets
        for j, v in enumerate(batch):
            target = partition(key_of(v), p)
            if type(target) is not int or not 0 <= target < p:
                raise OutputTypeError(
                    f"the Partitioner of {self.node_name!r} returned {target!r} for "
                    f"{p} partitions: partition(key, num_partitions) must return an int "
                    f"in [0, {p})"
                )
            b[target].append(v)
            if timestamps is not None:
                assert self.ts is not None
                self.ts[target].append(timestamps[j])

    # The four hash loops below are copies of one loop, because one operation less a
    # record is measurable here (each adds or leaves out the key and the timestamp
    # column). Per record: the key selector (an itemgetter for ``lambda v: v[i]``), the
    # key group from the cache of exact str/int keys (serializing + hashing is most of
    # the cost of a shuffle otherwise; 1, 1.0 and True compare equal but serialize
    # differently, so only exact types are cached: a str never equals an int, so one
    # dict holds both), then the appends of the key group's target, from tables indexed
    # by key group (no key group -> target step per record).

    def _add_hash(self, batch: list[Any]) -> None:
        key_of, get, miss, other = self.key_of, self.cache.get, self._kg_missed, self._kg_other
        kg_app, k_app, v_app = self._table(0), self._table(1), self._table(2)
        try:
            for v in batch:
                k = key_of(v)
                tk = type(k)
                if tk is str or tk is int:
                    kg = get(k)
                    if kg is None:
                        kg = miss(k)
                else:
                    kg = other(k)
                kg_app[kg](kg)
                k_app[kg](k)
                v_app[kg](v)
        except Exception as e:  # noqa: BLE001 - name the key and the operator, keep the cause
            self._raise_key_error(batch, e)

    def _add_hash_unkeyed(self, batch: list[Any]) -> None:
        """``_add_hash`` without the key column (the receiver extracts keys)."""
        key_of, get, miss, other = self.key_of, self.cache.get, self._kg_missed, self._kg_other
        kg_app, v_app = self._table(0), self._table(2)
        try:
            for v in batch:
                k = key_of(v)
                tk = type(k)
                if tk is str or tk is int:
                    kg = get(k)
                    if kg is None:
                        kg = miss(k)
                else:
                    kg = other(k)
                kg_app[kg](kg)
                v_app[kg](v)
        except Exception as e:  # noqa: BLE001 - name the key and the operator, keep the cause
            self._raise_key_error(batch, e)

    def _add_hash_timed(self, batch: list[Any], timestamps: list[Any]) -> None:
        """``_add_hash`` plus a timestamp column."""
        key_of, get, miss, other = self.key_of, self.cache.get, self._kg_missed, self._kg_other
        kg_app, k_app, v_app, ts_app = (
            self._table(0),
            self._table(1),
            self._table(2),
            self._table(3),
        )
        try:
            for v, ts in zip(batch, timestamps, strict=True):
                k = key_of(v)
                tk = type(k)
                if tk is str or tk is int:
                    kg = get(k)
                    if kg is None:
                        kg = miss(k)
                else:
                    kg = other(k)
                kg_app[kg](kg)
                k_app[kg](k)
                v_app[kg](v)
                ts_app[kg](ts)
        except Exception as e:  # noqa: BLE001 - name the key and the operator, keep the cause
            self._raise_key_error(batch, e)

    def _add_hash_timed_unkeyed(self, batch: list[Any], timestamps: list[Any]) -> None:
        """``_add_hash_timed`` without the key column (the receiver extracts keys)."""
        key_of, get, miss, other = self.key_of, self.cache.get, self._kg_missed, self._kg_other
        kg_app, v_app, ts_app = self._table(0), self._table(2), self._table(3)
        try:
            for v, ts in zip(batch, timestamps, strict=True):
                k = key_of(v)
                tk = type(k)
                if tk is str or tk is int:
                    kg = get(k)
                    if kg is None:
                        kg = miss(k)
                else:
                    kg = other(k)
                kg_app[kg](kg)
                v_app[kg](v)
                ts_app[kg](ts)
        except Exception as e:  # noqa: BLE001 - name the key and the operator, keep the cause
            self._raise_key_error(batch, e)

    def _table(self, column: int) -> list[Any]:
        """The ``append`` of each key group's target's ``column`` (0 key groups, 1 keys, 2
        values, 3 timestamps), indexed by key group; made once per chunk cycle."""
        tab = self._tables[column]
        if tab is None:
            if column == 3:
                assert self.cts is not None
                apps = [c.append for c in self.cts]
            else:
                apps = [c[column].append for c in self.cols]
            tab = self._tables[column] = [apps[t] for t in self.target_of]
        return tab

    def _kg_missed(self, k: Any) -> int:
        """The key group of an exact str or int key not in the cache (cached if room)."""
        kg: int = mmh3.hash(self.ser(k), 0, False) % self.mp
        if len(self.cache) < _KEY_CACHE_LIMIT:
            self.cache[k] = kg
        return kg

    def _kg_other(self, k: Any) -> int:
        """The key group of a key of any other type (not cached)."""
        {k: None}  # noqa: B018 - fails fast for unhashable keys (caught by the caller)
        kg: int = mmh3.hash(self.ser(k), 0, False) % self.mp
        return kg

    def _raise_key_error(self, batch: list[Any], e: Exception) -> None:
        key_of, ser = self.key_of, self.ser
        for v in batch:
            try:
                k = key_of(v)
            except Exception:  # noqa: BLE001 - the key selector itself failed: user error
                raise e from None
            try:
                {k: None}  # noqa: B018
            except TypeError:
                raise KeySerializationError(
                    f"the key {k!r} (type {type(k).__name__}) for the key_by after "
                    f"{self.node_name!r} is not hashable, so it cannot scope keyed state; "
                    f"return a hashable key from the key selector, e.g. a tuple instead of a list"
                ) from e
            try:
                ser(k)
            except Exception as se:
                declared = getattr(ser, "__self__", None)
                type_name = getattr(declared, "type_name", "") or ""
                what = (
                    f"key_by(..., key_type=Types.{type_name}()) declares {type_name} keys, but the "
                    f"key selector returned {type(k).__name__} {k!r:.60}; return keys of the "
                    f"declared type, or change key_type"
                    if type_name and not getattr(declared, "name", "").startswith("default")
                    else "keys must be serializable by the key type given to key_by (or be "
                    "str/int/float/bool/bytes/tuples of these)"
                )
                raise KeySerializationError(
                    f"the key of record {v!r:.80} for the key_by after {self.node_name!r} cannot "
                    f"be serialized ({type(se).__name__}: {se}): {what}"
                ) from se
        raise e

    def chunks(self) -> Iterator[tuple[int, bytes]]:
        ts, cts, ets = self.ts, self.cts, self.ets
        if self.everyone:
            if ets is None:
                blob = dumps_chunk(("R", self.everyone))
            else:
                blob = dumps_chunk(("R", self.everyone, ets))
            for target in range(self.p):
                yield target, blob
            self.everyone = []
        for target, recs in enumerate(self.buckets):
            if recs:
                if ts is None:
                    yield target, dumps_chunk(("R", recs))
                else:
                    yield target, dumps_chunk(("R", recs, ts[target]))
        unkeyed = self.edge.receiver_keys
        for target, (kgs, keys, vals) in enumerate(self.cols):
            if kgs:
                cols: tuple[Any, ...] = ("K", kgs, vals) if unkeyed else ("C", kgs, keys, vals)
                if cts is not None:
                    cols += (cts[target],)
                yield target, dumps_chunk(cols)
        self.buckets = [[] for _ in range(self.p)]
        self.cols = self._new_cols()
        self.ts = self.cts = self.ets = None
        self._tables = [None] * 4

    def take_columns(self) -> list[tuple[array[int], list[Any], list[Any]]]:
        """A hash edge's columns written since the last call, unpickled: one (key groups,
        keys, values) per target subtask; the writer starts new ones (for a receiver in
        this process, which needs no chunk: ``benchmarks/barrier_floor.py``)."""
        cols = self.cols
        self.cols = self._new_cols()
        self._tables = [None] * 4  # the cached appends of the columns handed over
        return cols

    def watermark_targets(self) -> range:
        """The subtasks this edge can send records to: the channels a watermark goes to."""
        if self.edge.partitioning is Partitioning.FORWARD:
            i = self.index % self.p
            return range(i, i + 1)
        return range(self.p)


def dumps_chunk(obj: Any) -> bytes:
    """Pickle without the memo: records are trees, and memoising every object is most of
    the cost of pickling a large chunk. Falls back to a normal pickle for cyclic data."""
    return dumps_unshared(obj, _PICKLE)


class KeyedColumns(Sequence[tuple[int, Any, Any]]):
    """A hash input as columns: iterates as ``(key group, key, record)`` triples, made
    one at a time (a list of them all costs more than the operator's loop over them).

    The columns of each chunk stay as they came (:meth:`add`): joining a second chunk's
    onto the first touches every record again (a reference count each: ~7 ms for 250k
    records), which an operator that only iterates never needs. ``kgs``, ``keys`` and
    ``values`` join them on first use, for operators that work on whole columns.
    """

    __slots__ = ("_segments", "_joined")

    def __init__(self, kgs: Any, keys: list[Any], values: list[Any]) -> None:
        self._segments: list[tuple[Any, list[Any], list[Any]]] = [(kgs, keys, values)]
        self._joined = True  # one segment: the columns are the first chunk's

    def add(self, kgs: Any, keys: list[Any], values: list[Any]) -> None:
        """Append a chunk's columns (key groups of the first chunk's array type)."""
        self._segments.append((kgs, keys, values))
        self._joined = False

    def _columns(self) -> tuple[Any, list[Any], list[Any]]:
        segments = self._segments
        if not self._joined:
            kgs, keys, values = segments[0]
            for more in segments[1:]:
                kgs.extend(more[0])
                keys.extend(more[1])
                values.extend(more[2])
            del segments[1:]
            self._joined = True
        return segments[0]

    @property
    def kgs(self) -> Any:
        return self._columns()[0]

    @property
    def keys(self) -> list[Any]:
        return self._columns()[1]

    @property
    def values(self) -> list[Any]:
        return self._columns()[2]

    def __len__(self) -> int:
        return sum(len(seg[2]) for seg in self._segments)

    def __iter__(self) -> Iterator[tuple[int, Any, Any]]:
        segments = self._segments
        if len(segments) == 1:
            return zip(*segments[0], strict=True)
        return chain.from_iterable([zip(*seg, strict=True) for seg in segments])

    def __getitem__(self, i: Any) -> Any:
        kgs, keys, values = self._columns()
        if isinstance(i, slice):
            return list(zip(kgs[i], keys[i], values[i], strict=True))
        return (kgs[i], keys[i], values[i])

    def __repr__(self) -> str:
        return f"KeyedColumns({len(self)} records)"


def decode_input(
    items: Iterable[Any],
    stage: Stage | None = None,
) -> tuple[
    list[Any],
    list[Any],
    list[list[Any] | None],
    dict[tuple[int, int, int], ChannelWatermark],
]:
    """Decode shuffled chunks into the records of input 0 and input 1, plus forwarded acks,
    the inputs' timestamps (None: no timestamps) and the watermark channels.

    A data payload is ``(DATA, src stage, src subtask, seq, blob, input)``; chunks are
    sorted by (src stage, src subtask, seq) so that the input order is deterministic.
    An input whose chunks are all hash columns comes as :class:`KeyedColumns`, any other
    as a list (of triples for hash chunks). The keys of input ``i``'s ``"K"`` chunks are
    extracted with the key selector of ``stage.input_keyings[i]``.
    """
    data, acks = [], []
    channels: dict[tuple[int, int, int], ChannelWatermark] = {}
    for _part, payload in items:
        kind = payload[0]
        if kind == DATA:
            data.append(payload)
        elif kind == WATERMARK:
            channels[(payload[1], payload[2], payload[3])] = ChannelWatermark(
                payload[4], payload[5]
            )
        else:
            acks.append(payload[1])
    data.sort(key=lambda d: (d[1], d[2], d[3]))  # (src stage, src subtask, seq): deterministic
    chunks = [(d[5], pickle.loads(d[4])) for d in data]
    columnar = [
        bool(mine) and all(c[0] != "R" for c in mine)
        for mine in ([c for side, c in chunks if side == i] for i in (0, 1))
    ]
    inputs: list[Any] = [None if columnar[i] else [] for i in (0, 1)]
    tss: list[list[Any] | None] = [None, None]
    selectors: list[Any] = [None, None]  # each side's key selector, for "K" chunks
    for side, chunk in chunks:
        records = inputs[side]
        n = 0 if records is None else len(records)
        kind = chunk[0]
        if kind == "R":
            if n == 0 and type(chunk[1]) is list:
                records = inputs[side] = chunk[1]  # adopted, not copied
            else:
                records.extend(chunk[1])
            cts = chunk[2] if len(chunk) > 2 else None
        else:
            if kind == "K":
                assert stage is not None, "K chunks are sent only to stages with input_keyings"
                key_of = selectors[side]
                if key_of is None:
                    keying = stage.input_keyings[side]
                    get_key = as_callable(keying.key_selector, "get_key")
                    key_of = selectors[side] = fast_key_selector(get_key)
                values = chunk[2]
                keys = list(map(key_of, values))
                cts = chunk[3] if len(chunk) > 3 else None
            else:
                keys, values = chunk[2], chunk[3]
                cts = chunk[4] if len(chunk) > 4 else None
            if records is None:  # the first chunk's columns are adopted, not copied
                records = inputs[side] = KeyedColumns(chunk[1], keys, values)
            elif columnar[side]:
                # every chunk of an input has one key-group array type (the receiver's
                # max parallelism chose it), so arrays extend each other when joined
                records.add(chunk[1], keys, values)
            else:
                records.extend(zip(chunk[1], keys, values, strict=True))
        ts = tss[side]
        if cts is not None:
            if ts is None and n == 0 and type(cts) is list:
                tss[side] = cts  # the first chunk's timestamps are adopted, not copied
            else:
                if ts is None:
                    ts = tss[side] = [None] * n
                ts.extend(cts)
        elif ts is not None:
            ts.extend([None] * (len(records) - n))
    inputs = [[] if x is None else x for x in inputs]
    return inputs, acks, tss, channels
