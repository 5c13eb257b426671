"""Worker side of an epoch: run one subtask of one stage.

``run_stage_partition`` is what a Spark task executes (and what the in-process
runner calls in unit tests). For subtask ``i`` of a stage in epoch ``n`` it:

1. obtains the subtask's operators and keyed state at version ``n-1``: from the
   worker's cache if this Python process ran the subtask in epoch ``n-1`` of the
   same attempt (token check), otherwise by restoring the *lineage* the driver
   sent (a full snapshot plus the deltas written since), then ``open()``;
2. reads its source slice or its shuffled input, in a deterministic order;
3. pushes the records through the chained operators;
4. commits state version ``n``: a checkpoint snapshot when the epoch ends with
   a barrier, else a full version every few epochs, else a delta;
5. returns the records for the next stages plus a small ack for the driver.

Running a subtask twice for the same epoch (a Spark task retry) is safe: the
second run restores version ``n-1`` again and writes the same version ``n``.
"""

from __future__ import annotations

import io
import os
import pickle
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import mmh3

from streamstate.runtime.checkpoint.handles import ByteStreamStateHandle, KeyGroupsStateHandle
from streamstate.runtime.errors import KeySerializationError
from streamstate.runtime.graph import Edge, OpNode, Partitioning, Stage
from streamstate.runtime.keygroups import compute_key_group_range_for_operator_index
from streamstate.runtime.operators.base import OperatorContext, StreamOperator, as_callable

__all__ = [
    "EpochSpec",
    "Lineage",
    "StageTaskSpec",
    "SubtaskEpoch",
    "run_stage_partition",
]

DATA, ACK = "D", "A"
_KEY_CACHE_LIMIT = 200_000
DRIVER = -1
_PICKLE = 5


@dataclass(frozen=True)
class Lineage:
    """How to rebuild one operator's keyed state at version ``token`` anywhere.

    ``base`` are keyed snapshots (several after a rescale: each backend keeps
    only its key groups); ``deltas`` are applied on top, in order.
    """

    token: tuple[int, int]
    base: tuple[KeyGroupsStateHandle, ...] = ()
    deltas: tuple[Any, ...] = ()


@dataclass
class StageTaskSpec:
    """Everything a worker needs to run a stage; shipped once per job (broadcast)."""

    job_id: str
    stage: Stage
    factories: dict[int, bytes]  # node tid -> cloudpickled zero-arg operator factory
    storage: Any  # CheckpointStorageAccess (picklable)
    backend_name: str
    job_parameters: dict[str, str]
    source_budget: int
    #: the clock of state TTL (``runtime/state/ttl_clock.py``); ``None``: the wall clock
    ttl_time_provider: Any = None


@dataclass
class SubtaskEpoch:
    source_assignment: Any = None
    lineages: dict[str, Lineage] = field(default_factory=dict)


@dataclass
class EpochSpec:
    """The per-epoch instructions of one stage (small: shipped with every task)."""

    epoch: int
    attempt: int
    checkpoint_id: int | None
    full_version: bool
    subtasks: list[SubtaskEpoch]


class _SubtaskInstance:
    def __init__(self) -> None:
        self.token: tuple[int, int] | None = None
        self.ops: dict[int, StreamOperator] = {}
        self.backends: dict[str, Any] = {}
        self.contexts: list[OperatorContext] = []
        #: per shuffle edge: memoised key -> (key group, bucket index) for str/int keys
        self.key_caches: dict[tuple[int, int], dict[Any, Any]] = {}

    def close(self) -> None:
        for op in self.ops.values():
            try:
                op.close()
            except Exception:  # noqa: BLE001 - closing a discarded instance must not mask errors
                pass
        for b in self.backends.values():
            try:
                b.dispose()
            except Exception:  # noqa: BLE001
                pass


# Worker-process caches. A PySpark worker is reused across tasks, so a subtask
# that lands on the same process in the next epoch finds its state here.
_SPECS: dict[tuple[str, int], StageTaskSpec] = {}
_INSTANCES: dict[tuple[str, int, int], _SubtaskInstance] = {}
CACHE_STATS = {"hits": 0, "misses": 0}
_WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


def _spec(spec_blob: Any) -> StageTaskSpec:
    """Unpickle the stage spec once per worker process (``spec_blob`` = (job, stage, bytes))."""
    job_id, stage_id, blob = spec_blob
    key = (job_id, stage_id)
    spec = _SPECS.get(key)
    if spec is None:
        if not isinstance(blob, (bytes, bytearray)):
            blob = blob.value  # a Spark broadcast
        spec = pickle.loads(blob)
        _SPECS[key] = spec
        for k in [k for k in _SPECS if k[0] != job_id]:
            del _SPECS[k]  # one job per worker at a time: drop older jobs' specs
    return spec


def _build_instance(
    spec: StageTaskSpec, index: int, epoch_spec: EpochSpec, sub: SubtaskEpoch
) -> _SubtaskInstance:
    from streamstate.runtime.state.registry import create_keyed_backend

    st = spec.stage
    inst = _SubtaskInstance()
    kg_range = compute_key_group_range_for_operator_index(st.max_parallelism, st.parallelism, index)
    for tid, node in st.nodes.items():
        if node.factory is None:
            continue  # the source node
        op: StreamOperator = pickle.loads(spec.factories[tid])()
        backend = None
        if node.keyed:
            backend = create_keyed_backend(
                spec.backend_name,
                operator_name=node.name,
                key_group_range=kg_range,
                max_parallelism=st.max_parallelism,
                key_serializer=st.key_serializer,
            )
            if spec.ttl_time_provider is not None:
                backend.ttl_time_provider = spec.ttl_time_provider.for_backend()
            backend.ttl_time_provider.on_epoch(epoch_spec.epoch)
            lineage = sub.lineages.get(node.uid)
            if lineage is not None:
                if lineage.base:
                    backend.restore(list(lineage.base))
                for d in lineage.deltas:
                    backend.apply_delta(d.read())
            inst.backends[node.uid] = backend
        ctx = OperatorContext(
            node.name,
            index,
            st.parallelism,
            st.max_parallelism,
            epoch_spec.attempt,
            spec.job_parameters,
            backend,
        )
        op.setup(ctx)
        inst.contexts.append(ctx)
        inst.ops[tid] = op
    for op in inst.ops.values():
        op.open()
    return inst


class _EdgeWriter:
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
        #: hash edges keep columns per target: key groups, keys, values (cheaper to pickle)
        self.cols: list[tuple[list[int], list[Any], list[Any]]] = [
            ([], [], []) for _ in range(self.p)
        ]
        #: broadcast edges: one list, pickled once and sent to every target
        self.everyone: list[Any] = []
        self.cache = cache
        self.rr = index  # rebalance starts at a subtask-dependent, deterministic position
        if edge.partitioning is Partitioning.HASH:
            assert edge.keying is not None
            self.key_of = as_callable(edge.keying.key_selector, "get_key")
            self.ser = edge.keying.key_serializer.serialize

    def add(self, batch: list[Any]) -> None:
        part = self.edge.partitioning
        if part is Partitioning.HASH:
            self._add_hash(batch)
        elif part is Partitioning.FORWARD:
            self.buckets[self.index % self.p].extend(batch)
        elif part is Partitioning.BROADCAST:
            self.everyone.extend(batch)
        else:
            p, b = self.p, self.buckets
            start = self.rr
            for j, v in enumerate(batch):
                b[(start + j) % p].append(v)
            self.rr = (start + len(batch)) % p

    def _add_hash(self, batch: list[Any]) -> None:
        key_of, ser, mp, p = self.key_of, self.ser, self.mp, self.p
        h = mmh3.hash
        # Key group per str/int key is memoised: serializing + hashing is most of the cost
        # of a shuffle. Only exact str/int types are cached: 1, 1.0 and True compare equal
        # but serialize (and hash) differently.
        cache = self.cache
        cols = self.cols
        kg_app = [c[0].append for c in cols]
        k_app = [c[1].append for c in cols]
        v_app = [c[2].append for c in cols]
        try:
            for v in batch:
                k = key_of(v)
                tk = type(k)
                if tk is str or tk is int:
                    t = cache.get((tk, k)) if tk is int else cache.get(k)
                    if t is None:
                        kg = h(ser(k), 0, False) % mp
                        t = (kg, kg * p // mp)
                        if len(cache) < _KEY_CACHE_LIMIT:
                            cache[(tk, k) if tk is int else k] = t
                    kg, target = t
                else:
                    {k: None}  # noqa: B018 - fails fast for unhashable keys (caught below)
                    kg = h(ser(k), 0, False) % mp
                    target = kg * p // mp
                kg_app[target](kg)
                k_app[target](k)
                v_app[target](v)
        except Exception as e:  # name the key and the operator, keep the cause
            self._raise_key_error(batch, e)

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
            except Exception as se:  # noqa: BLE001
                raise KeySerializationError(
                    f"the key of record {v!r} for the key_by after {self.node_name!r} cannot be "
                    f"serialized ({type(se).__name__}: {se}); keys must be serializable by the key "
                    f"type given to key_by (or be str/int/float/bool/bytes/tuples of these)"
                ) from se
        raise e

    def chunks(self) -> Iterator[tuple[int, bytes]]:
        if self.everyone:
            blob = _dumps(("R", self.everyone))
            for target in range(self.p):
                yield target, blob
            self.everyone = []
        for target, recs in enumerate(self.buckets):
            if recs:
                yield target, _dumps(("R", recs))
        for target, (kgs, keys, vals) in enumerate(self.cols):
            if kgs:
                yield target, _dumps(("C", kgs, keys, vals))
        self.buckets = [[] for _ in range(self.p)]
        self.cols = [([], [], []) for _ in range(self.p)]


def _dumps(obj: Any) -> bytes:
    """Pickle without the memo: records are trees, and memoising every object is most of
    the cost of pickling a large chunk. Falls back to a normal pickle for cyclic data."""
    buf = io.BytesIO()
    p = pickle.Pickler(buf, protocol=_PICKLE)
    p.fast = True  # no memo (deprecated flag, still supported by CPython's pickler)
    try:
        p.dump(obj)
    except (ValueError, RecursionError):
        return pickle.dumps(obj, protocol=_PICKLE)
    return buf.getvalue()


def _decode_input(items: Iterable[Any]) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """Decode shuffled chunks into the records of input 0 and input 1, plus forwarded acks.

    A data payload is ``(DATA, src stage, src subtask, seq, blob, input)``; chunks are
    sorted by (src stage, src subtask, seq) so that the input order is deterministic.
    """
    data, acks = [], []
    for _part, payload in items:
        if payload[0] == DATA:
            data.append(payload)
        else:
            acks.append(payload[1])
    data.sort(key=lambda d: (d[1], d[2], d[3]))  # (src stage, src subtask, seq): deterministic
    inputs: list[list[Any]] = [[], []]
    for d in data:
        records = inputs[d[5]]
        chunk = pickle.loads(d[4])
        if chunk[0] == "C":
            records.extend(zip(chunk[1], chunk[2], chunk[3], strict=True))
        else:
            records.extend(chunk[1])
    return inputs, acks


def run_stage_partition(
    spec_blob: Any,
    stages_meta: dict[int, tuple[int, int]],
    epoch_spec: EpochSpec,
    index: int,
    items: Iterable[Any],
) -> Iterator[tuple[int, int, Any]]:
    """Run subtask ``index`` of a stage for one epoch; yields ``(dest_stage, partition, payload)``.

    ``stages_meta`` maps every stage id to (parallelism, max parallelism), for the
    shuffle writers. Leaf stages yield their (and forwarded) acks to ``DRIVER``.
    """
    spec = _spec(spec_blob)
    st = spec.stage
    sub = epoch_spec.subtasks[index]
    key = (spec.job_id, st.id, index)
    expected = (epoch_spec.attempt, epoch_spec.epoch - 1)
    t0 = time.perf_counter()
    inst = _INSTANCES.get(key)
    cache_hit = inst is not None and inst.token == expected
    if not cache_hit:
        if inst is not None:
            inst.close()
            _INSTANCES.pop(key, None)
        CACHE_STATS["misses"] += 1
    else:
        CACHE_STATS["hits"] += 1
    try:
        if not cache_hit:
            inst = _build_instance(spec, index, epoch_spec, sub)
        assert inst is not None
        _INSTANCES[key] = inst
        t_restore = time.perf_counter() - t0
        for ctx in inst.contexts:
            ctx.epoch = epoch_spec.epoch
        for b in inst.backends.values():
            b.ttl_time_provider.on_epoch(epoch_spec.epoch)
        writers: dict[int, list[_EdgeWriter]] = {}
        for tid, node in st.nodes.items():
            writers[tid] = [
                _EdgeWriter(
                    e,
                    _meta_stage(stages_meta, e.dest_stage),
                    index,
                    node.name,
                    inst.key_caches.setdefault((tid, j), {}),
                )
                for j, e in enumerate(node.edges)
            ]
        counts: dict[str, int] = {}

        def push(node: OpNode, batch: list[Any], side: int = 0) -> None:
            op = inst.ops.get(node.tid) if node.factory is not None else None
            if op is None:
                out = batch
            elif side == 0:
                out = op.process_batch(batch)
            else:
                out = op.process_batch2(batch)
            counts[node.uid] = counts.get(node.uid, 0) + len(batch)
            if not out:
                return
            for w in writers[node.tid]:
                w.add(out)
            for c in node.children:
                push(st.nodes[c], out)

        forwarded: list[dict[str, Any]] = []
        source_progress = None
        if st.is_source:
            st.source.prepare_worker()
            records, source_progress = st.source.read(sub.source_assignment, spec.source_budget)
            for h in st.heads:
                push(st.nodes[h], records)
        else:
            inputs, forwarded = _decode_input(items)
            for h in st.heads:
                node = st.nodes[h]
                op = inst.ops.get(h)
                if op is not None and op.two_input:
                    order = (1, 0) if op.second_input_first else (0, 1)
                    for side in order:
                        if inputs[side]:
                            push(node, inputs[side], side)
                else:
                    push(node, inputs[0])
        t_process = time.perf_counter() - t0 - t_restore

        versions, checkpoint = _commit_state(spec, inst, index, epoch_spec)
        sinks = {}
        for tid, op in inst.ops.items():
            res = op.sink_result()
            if res is not None:
                sinks[st.nodes[tid].uid] = res
        inst.token = (epoch_spec.attempt, epoch_spec.epoch)
        ack = {
            "stage": st.id,
            "subtask": index,
            "token": inst.token,
            "versions": versions,
            "checkpoint": checkpoint,
            "source": source_progress,
            "sinks": sinks,
            "counts": counts,
            "cache_hit": cache_hit,
            "worker": _WORKER_ID,
            "timings": {
                "restore": t_restore,
                "process": t_process,
                "commit": time.perf_counter() - t0 - t_restore - t_process,
            },
        }
    except BaseException:
        # A half-processed instance must never serve a later epoch.
        dropped = _INSTANCES.pop(key, None)
        if dropped is not None:
            dropped.close()
        raise
    yield from _emit(st, writers, index, [ack, *forwarded])


def _meta_stage(stages_meta: dict[int, tuple[int, int]], sid: int) -> Stage:
    p, mp = stages_meta[sid]
    return Stage(sid, p, mp)


def _commit_state(
    spec: StageTaskSpec, inst: _SubtaskInstance, index: int, es: EpochSpec
) -> tuple[dict[str, Any], dict[str, Any]]:
    versions: dict[str, Any] = {}
    checkpoint: dict[str, Any] = {}
    storage = spec.storage
    tag = f"a{es.attempt}-e{es.epoch}"
    for uid, backend in inst.backends.items():
        rng = backend.key_group_range
        if es.checkpoint_id is not None or es.full_version:
            snap = backend.snapshot()
            if es.checkpoint_id is not None:
                stream = storage.write_state(es.checkpoint_id, f"{uid}-{index}-keyed", snap.data)
                kh = KeyGroupsStateHandle(stream, rng, dict(snap.offsets), dict(snap.meta))
                checkpoint[uid] = kh
                if isinstance(stream, ByteStreamStateHandle):
                    # inline bytes live on the driver: keep a worker-readable copy as the base
                    stream = storage.write_epoch_state(f"{uid}/{index}/{tag}-full", snap.data)
                    kh = KeyGroupsStateHandle(stream, rng, dict(snap.offsets), dict(snap.meta))
            else:
                stream = storage.write_epoch_state(f"{uid}/{index}/{tag}-full", snap.data)
                kh = KeyGroupsStateHandle(stream, rng, dict(snap.offsets), dict(snap.meta))
            versions[uid] = ("full", kh)
        else:
            delta = backend.snapshot_delta()
            if delta:
                versions[uid] = (
                    "delta",
                    storage.write_epoch_state(f"{uid}/{index}/{tag}-delta", delta),
                )
            else:
                versions[uid] = ("none", None)
    return versions, checkpoint


def _emit(
    st: Stage, writers: dict[int, list[_EdgeWriter]], index: int, acks: list[dict[str, Any]]
) -> Iterator[tuple[int, int, Any]]:
    dests: set[int] = set()
    seq = 0  # unique per subtask and epoch: receivers sort on it
    for ws in writers.values():
        for w in ws:
            dests.add(w.edge.dest_stage)
            for target, blob in w.chunks():
                yield w.edge.dest_stage, target, (DATA, st.id, index, seq, blob, w.edge.input)
                seq += 1
    if not dests:
        for a in acks:
            yield DRIVER, 0, (ACK, a)
        return
    for d in sorted(dests):
        for a in acks:
            yield d, 0, (ACK, a)
