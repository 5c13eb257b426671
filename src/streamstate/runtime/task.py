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

import os
import pickle
import socket
import time
from collections.abc import Iterable, Iterator
from typing import Any

from streamstate.errors import StreamStateError
from streamstate.runtime.checkpoint.sharing import check_shared
from streamstate.runtime.graph import OpNode, Stage
from streamstate.runtime.job_end import on_job_end
from streamstate.runtime.keygroups import compute_key_group_range_for_operator_index
from streamstate.runtime.operators.base import OperatorContext, StreamOperator
from streamstate.runtime.operators.output_types import OutputTypeCheck
from streamstate.runtime.protocol import (
    DRIVER,
    EpochSpec,
    StageTaskSpec,
    SubtaskAck,
    SubtaskSpec,
    SubtaskTimings,
    check_protocol_version,
)
from streamstate.runtime.serializers.base import dumps_portable
from streamstate.runtime.shuffle import ACK, DATA, WATERMARK, EdgeWriter, decode_input
from streamstate.runtime.sliced_read import read_in_slices
from streamstate.runtime.sliced_read import reads_in_slices as sliced
from streamstate.runtime.state.migration import drain_migrated
from streamstate.runtime.user_metrics import report_user_metrics
from streamstate.runtime.versions import (
    commit_keyed_state,
    commit_operator_state,
    restore_operator_store,
    write_savepoint,
)
from streamstate.runtime.watermarks import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    ChannelWatermark,
    combine_channels,
    node_state,
)

__all__ = ["DRIVER", "run_stage_partition"]


class _SubtaskInstance:
    def __init__(self) -> None:
        self.token: tuple[int, int] | None = None
        self.ops: dict[int, StreamOperator] = {}
        self.backends: dict[str, Any] = {}
        #: operator uid -> its operator state store, and the CRC of its last version
        self.op_stores: dict[str, Any] = {}
        self.op_crcs: dict[str, int | None] = {}
        self.contexts: list[OperatorContext] = []
        #: per shuffle edge: memoised key -> (key group, bucket index) for str/int keys
        self.key_caches: dict[tuple[int, int], dict[Any, Any]] = {}
        #: node tid -> the operator's current (input) watermark
        self.watermarks: dict[int, int] = {}
        #: node tids whose operator reads timestamps (process_batch_ts on timestamped input)
        self.ts_aware: set[int] = set()
        #: node tid -> the check of its declared output type (only nodes that declared one)
        self.output_checks: dict[int, Any] = {}

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
#: set in a subtask host: ``(job id, executor) -> (address, secret)`` of its machine's
#: query host, or None (runtime/queryable/query_host.ensure_query_host)
QUERY_HOST: list[Any] = []


def _close_job_instances(job_id: str) -> None:
    """The job ended: close its subtask instances in this process (a RocksDB database and
    its directory go, a SourceFunction's thread stops) and forget its stage specs."""
    for key in [k for k in _INSTANCES if k[0] == job_id]:
        _INSTANCES.pop(key).close()
    for stage_key in [k for k in _SPECS if k[0] == job_id]:
        del _SPECS[stage_key]


on_job_end("subtask instances", _close_job_instances)


def spec_key(job_id: str, stage_id: int, stages_meta: dict[int, tuple[int, int]]) -> Any:
    """What a cached stage spec is valid for: the job's stage at these parallelisms (a
    rescaled job ships new specs: runtime/rescale.py)."""
    return (job_id, stage_id, tuple(sorted(stages_meta.items())))


def _spec(spec_blob: Any, stages_meta: dict[int, tuple[int, int]]) -> StageTaskSpec:
    """Unpickle the stage spec once per worker process and plan parallelism
    (``spec_blob`` = (job, stage, bytes))."""
    job_id, stage_id, blob = spec_blob
    key = spec_key(job_id, stage_id, stages_meta)
    spec = _SPECS.get(key)
    if spec is None:
        for k in [k for k in _SPECS if k[:2] == (job_id, stage_id)]:
            del _SPECS[k]  # the stage's spec at its previous parallelism
        if not isinstance(blob, (bytes, bytearray)):
            blob = blob.value  # a Spark broadcast
        spec = pickle.loads(blob)
        check_protocol_version(spec)
        if spec.storage_options is not None:
            spec.storage_options.install()
        _SPECS[key] = spec
        for k in [k for k in _SPECS if k[0] != job_id]:
            del _SPECS[k]  # one job per worker at a time: drop older jobs' specs
        for ik in [ik for ik in _INSTANCES if ik[0] != job_id]:
            # and their subtask instances (closing stops e.g. a SourceFunction's thread)
            _INSTANCES.pop(ik).close()
    return spec


def _build_instance(
    spec: StageTaskSpec, index: int, epoch_spec: EpochSpec, sub: SubtaskSpec
) -> _SubtaskInstance:
    from streamstate.runtime.operators.checkpointing import StateInitializationContext
    from streamstate.runtime.state.operator import DefaultOperatorStateStore
    from streamstate.runtime.state.registry import create_keyed_backend

    st = spec.stage
    inst = _SubtaskInstance()
    # version n-1 exists unless this is the first epoch of a fresh (re)start
    restored = epoch_spec.epoch > 1 or any(sub.op_lineages.values())
    kg_range = compute_key_group_range_for_operator_index(st.max_parallelism, st.parallelism, index)
    for tid, node in st.nodes.items():
        if node.factory is None:
            continue  # a source node without an operator (a replayable Source)
        op: StreamOperator = pickle.loads(spec.factories[tid])()
        backend = None
        if node.keyed:
            backend = create_keyed_backend(
                spec.backend_name,
                operator_name=node.name,
                key_group_range=kg_range,
                max_parallelism=st.max_parallelism,
                key_serializer=st.key_serializer,
                **spec.backend_options,
            )
            if spec.ttl_time_provider is not None:
                backend.ttl_time_provider = spec.ttl_time_provider.for_backend()
            backend.ttl_time_provider.on_epoch(epoch_spec.epoch, epoch_spec.processing_time_ms)
            lineage = sub.lineages.get(node.uid)
            if lineage is not None:
                if lineage.base:
                    backend.restore(list(lineage.base))
                for d in lineage.deltas:
                    backend.apply_delta(d.read())
            inst.backends[node.uid] = backend
        store = DefaultOperatorStateStore(
            node.name, allow_broadcast=getattr(op, "allows_broadcast_state", False)
        )
        inst.op_crcs[node.uid] = restore_operator_store(
            store, sub.op_lineages.get(node.uid), index, st.parallelism
        )
        inst.op_stores[node.uid] = store
        ctx = OperatorContext(
            node.name,
            index,
            st.parallelism,
            st.max_parallelism,
            epoch_spec.attempt,
            dict(spec.job_parameters),
            backend,
            store,
        )
        ctx.batch = spec.batch
        ctx.job_id, ctx.replay_stamp = spec.job_id, epoch_spec.replay_stamp
        op.setup(ctx)
        inst.contexts.append(ctx)
        inst.ops[tid] = op
        _setup_time(inst, node, op, sub.watermarks.get(node.uid))
        if node.output_type is not None:
            inst.output_checks[tid] = OutputTypeCheck(node.name, node.output_type)
    # Flink's order: initializeState (operator and keyed state stores) before open()
    for tid, op in inst.ops.items():
        store = inst.op_stores[st.nodes[tid].uid]
        op.initialize_state(StateInitializationContext(restored, store, op.ctx))
    for op in inst.ops.values():
        op.open()
    return inst


def _setup_time(inst: _SubtaskInstance, node: OpNode, op: StreamOperator, state: Any) -> None:
    """Side-output tags, timestamp awareness and the restored watermark state of one node."""
    tags = {e.tag for e in node.edges if e.tag is not None} | set(node.side_children)
    if tags:
        op.side_tags = frozenset(tags)
    if (
        node.children
        or node.edges
        or tags
        or op.generates_watermarks
        or type(op).process_batch_ts is not StreamOperator.process_batch_ts
    ):
        inst.ts_aware.add(node.tid)
    if state:
        wm = int(state.get("wm", MIN_WATERMARK))
        inst.watermarks[node.tid] = wm
        assert op.ctx is not None
        op.ctx.current_watermark = wm
        gen = state.get("gen")
        if gen and op.generates_watermarks:
            op.restore_watermark_state(gen)  # type: ignore[attr-defined]  # only watermark generators have it (op.generates_watermarks)


def run_stage_partition(
    spec_blob: Any,
    stages_meta: dict[int, tuple[int, int]],
    epoch_spec: EpochSpec,
    index: int,
    items: Iterable[Any],
    executor: str | None = None,
) -> Iterator[tuple[int, int, Any]]:
    """Run subtask ``index`` of a stage for one epoch; yields ``(dest_stage, partition, payload)``.

    ``stages_meta`` maps every stage id to (parallelism, max parallelism), for the
    shuffle writers. Leaf stages yield their (and forwarded) acks to ``DRIVER``.
    ``executor``: the Spark executor running the task (goes into the ack).
    """
    spec = _spec(spec_blob, stages_meta)
    check_shared(spec.storage)  # this machine sees the driver's state directory
    st = spec.stage
    sub = epoch_spec.subtasks[index]
    key = (spec.job_id, st.id, index)
    expected = epoch_spec.previous_token
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
        restores = _restore_paths(inst, cache_hit)
        _INSTANCES[key] = inst
        if not cache_hit and st.is_source and epoch_spec.moved:
            check = getattr(inst.ops.get(st.heads[0]), "check_resumable", None)
            if check is not None:  # a SourceFunction's operator
                check(sub.source_assignment, epoch_spec.epoch)
        t_restore = time.perf_counter() - t0
        for ctx in inst.contexts:
            ctx.epoch = epoch_spec.epoch
        for b in inst.backends.values():
            b.ttl_time_provider.on_epoch(epoch_spec.epoch, epoch_spec.processing_time_ms)
        for what, cid in epoch_spec.notifications:
            for op in inst.ops.values():
                if what == "complete":
                    op.notify_checkpoint_complete(cid)
                else:
                    op.notify_checkpoint_aborted(cid)
        writers: dict[int, list[EdgeWriter]] = {}
        for tid, node in st.nodes.items():
            writers[tid] = [
                EdgeWriter(
                    e,
                    _meta_stage(stages_meta, e.dest_stage),
                    index,
                    node.name,
                    inst.key_caches.setdefault((tid, j), {}),
                )
                for j, e in enumerate(node.edges)
            ]
        main_writers = {tid: [w for w in ws if w.edge.tag is None] for tid, ws in writers.items()}
        counts: dict[str, int] = {}
        ops = inst.ops
        ts_aware = inst.ts_aware
        checks = inst.output_checks
        now = epoch_spec.processing_time_ms
        for ctx in inst.contexts:
            ctx.ending = epoch_spec.ending
            if now is not None:
                ctx.processing_time = now

        def push(node: OpNode, batch: list[Any], ts: list[Any] | None, side: int = 0) -> None:
            op = ops.get(node.tid) if node.factory is not None else None
            if op is None:
                out, ots = batch, ts
            elif side:
                if ts is None:
                    out, ots = op.process_batch2(batch), None
                else:
                    out, ots = op.process_batch2_ts(batch, ts)
            elif ts is None and not op.generates_watermarks:
                out, ots = op.process_batch(batch), None
            elif node.tid in ts_aware:
                out, ots = op.process_batch_ts(batch, ts)  # type: ignore[arg-type]  # ts is set for a node in ts_aware on timestamped input
            else:
                out, ots = op.process_batch(batch), None
            counts[node.uid] = counts.get(node.uid, 0) + len(batch)
            if checks and out and node.tid in checks:
                out = checks[node.tid](out)  # a TUPLE type makes rows tuples, as PyFlink
            forward(node, op, out, ots)

        def forward(
            node: OpNode, op: StreamOperator | None, out: list[Any], ots: list[Any] | None
        ) -> None:
            if op is not None and op.side_outputs:
                _route_side_outputs(st, node, op, writers[node.tid], push)
            if not out:
                return
            for w in main_writers[node.tid]:
                w.add(out, ots)
            for c in node.children:
                push(st.nodes[c], out, ots)

        forwarded: list[SubtaskAck] = []
        source_progress = None
        channels: dict[tuple[int, int, int], ChannelWatermark] = {}
        if st.is_source and epoch_spec.notify_only:
            pass  # an input-free epoch that only delivers checkpoint notifications
        elif st.is_source:
            reader = inst.ops.get(st.heads[0])
            source_ts = None
            if reader is not None:  # a SourceFunction: its operator runs the user's run(ctx)
                records, source_progress = reader.read_epoch(  # type: ignore[attr-defined]  # a source stage's operator head is a SourceFunction operator
                    sub.source_assignment, spec.source_budget
                )
                source_ts = reader.epoch_timestamps  # type: ignore[attr-defined]  # a source stage's operator head is a SourceFunction operator
            elif (
                spec.source_interval_s > 0
                and not epoch_spec.end_of_input
                and sliced(st.source, st.parallelism)
            ):
                st.source.prepare_worker()  # epochs cut by time: each slice runs through the chain
                source_progress = read_in_slices(st, sub.source_assignment, spec, push)
                records = []  # pushed slice by slice
            else:
                st.source.prepare_worker()
                records, source_progress = st.source.read(sub.source_assignment, spec.source_budget)
            for h in st.heads:
                push(st.nodes[h], records, source_ts)
        else:
            inputs, forwarded, tss, channels = decode_input(items, st)
            for h in st.heads:
                node = st.nodes[h]
                head = inst.ops.get(h)
                if head is not None and head.two_input:
                    order = (1, 0) if head.second_input_first else (0, 1)
                    for side in order:
                        if inputs[side]:
                            push(node, inputs[side], tss[side], side)
                else:
                    push(node, inputs[0], tss[0])
        wm_out = _advance_time(st, inst, epoch_spec, channels, forward, spec.batch)
        t_process = time.perf_counter() - t0 - t_restore

        barrier_id = (
            epoch_spec.checkpoint_id
            if epoch_spec.checkpoint_id is not None
            else epoch_spec.savepoint_id
        )
        for op in inst.ops.values():
            op.snapshot_state(barrier_id, epoch_spec.timestamp_ms)
        versions: dict[str, Any] = {}
        checkpoint: dict[str, Any] = {}
        op_versions: dict[str, Any] = {}
        op_checkpoint: dict[str, Any] = {}
        if not spec.batch:  # BATCH: the job is this one epoch; no version is read after it
            versions, checkpoint = commit_keyed_state(
                spec.storage,
                inst.backends,
                index,
                epoch_spec,
                getattr(spec.storage, "job_id", None) or spec.job_id,
            )
            op_versions, op_checkpoint = commit_operator_state(
                spec.storage,
                inst.op_stores,
                inst.op_crcs,
                index,
                epoch_spec.attempt,
                epoch_spec.epoch,
                epoch_spec.checkpoint_id,
                force=epoch_spec.full_version,
            )
        savepoint_error = None
        if epoch_spec.savepoint is not None:
            assert epoch_spec.savepoint_id is not None
            try:
                checkpoint, op_checkpoint = write_savepoint(
                    epoch_spec.savepoint,
                    inst.backends,
                    inst.op_stores,
                    inst.op_crcs,
                    index,
                    epoch_spec.savepoint_id,
                    getattr(spec.storage, "job_id", None) or spec.job_id,
                )
            except (OSError, StreamStateError) as e:
                # a savepoint that cannot be written fails alone: the epoch's state versions
                # are committed above, so the job goes on
                savepoint_error = f"subtask {index} of stage {st.id}: {type(e).__name__}: {e}"
        sinks = {}
        for tid, op in inst.ops.items():
            res = op.sink_result()
            if res is not None:
                sinks[st.nodes[tid].uid] = res
        inst.token = epoch_spec.token
        ack = SubtaskAck(
            stage=st.id,
            subtask=index,
            token=inst.token,
            versions=versions,
            checkpoint=checkpoint,
            op_versions=op_versions,
            op_checkpoint=op_checkpoint,
            source=source_progress,
            sinks=sinks,
            counts=counts,
            watermarks=_watermark_states(st, inst),
            cache_hit=cache_hit,
            state_restores=restores,
            savepoint_error=savepoint_error,
            worker=_WORKER_ID,
            executor=executor,
            timings=SubtaskTimings(
                t_restore, t_process, time.perf_counter() - t0 - t_restore - t_process
            ),
            keyed_states=(states := {u: b.registered_states() for u, b in inst.backends.items()}),
            migrated=drain_migrated(inst.backends, inst.op_stores),
            user_metrics=report_user_metrics(inst.contexts),
            # a query host only for a subtask with a queryable state (name set)
            query_host=QUERY_HOST[0](spec.job_id, executor)
            if QUERY_HOST and spec.serve_queries and any(s[2] for v in states.values() for s in v)
            else None,
        )
    except BaseException:
        # A half-processed instance must never serve a later epoch.
        dropped = _INSTANCES.pop(key, None)
        if dropped is not None:
            dropped.close()
        raise
    yield from _emit(st, writers, index, [ack, *forwarded], wm_out)


def _route_side_outputs(
    st: Stage, node: OpNode, op: StreamOperator, ws: list[EdgeWriter], push: Any
) -> None:
    """Side outputs of ``op`` go to their chained consumers and shuffle edges (else dropped)."""
    for tag, (vals, tss) in op.take_side_outputs().items():
        sts = tss if any(t is not None for t in tss) else None
        for w in ws:
            if w.edge.tag == tag:
                w.add(vals, sts)
        for c in node.side_children.get(tag, ()):
            push(st.nodes[c], vals, sts)


def _advance_time(
    st: Stage,
    inst: _SubtaskInstance,
    es: EpochSpec,
    channels: dict[tuple[int, int, int], ChannelWatermark],
    forward: Any,
    batch: bool = False,
) -> dict[int, tuple[int, bool]]:
    """End of the epoch: processing time and watermarks, node by node in chain order.

    An operator whose input watermark advanced gets ``process_watermark``, then every
    operator gets ``on_processing_time``. Their outputs go downstream before the
    next node's turn, so a chained operator sees them before the watermark (as in
    Flink). Returns each node's output ``(watermark, idle)`` for the shuffle.

    ``batch``: at the end of input every processing-time timer fires too (Flink's
    BATCH mode fires all timers at the end of input), after the final watermark.
    """
    now = es.processing_time_ms
    if st.is_source:
        stage_in: tuple[int | None, bool] = (
            (MAX_WATERMARK if es.end_of_input else MIN_WATERMARK),
            False,
        )
    else:
        stage_in = combine_channels(channels.values())
    parent: dict[int, int] = {}
    for tid, node in st.nodes.items():
        for c in node.children:
            parent[c] = tid
        for cs in node.side_children.values():
            for c in cs:
                parent[c] = tid
    out: dict[int, tuple[int, bool]] = {}
    for tid, node in st.nodes.items():
        p = parent.get(tid)
        wm_in, idle_in = stage_in if p is None else out[p]
        op = inst.ops.get(tid) if node.factory is not None else None
        if op is None:
            out[tid] = (MIN_WATERMARK if wm_in is None else wm_in, idle_in)
            continue
        cur = inst.watermarks.get(tid, MIN_WATERMARK)
        if wm_in is not None and wm_in > cur and not idle_in:
            cur = inst.watermarks[tid] = wm_in
            assert op.ctx is not None
            op.ctx.current_watermark = wm_in
            res = op.process_watermark(wm_in)
            hts, op.hook_timestamps = op.hook_timestamps, None
            if res or op.side_outputs:
                forward(node, op, res, hts if hts is not None and len(hts) == len(res) else None)
        # processing time after the watermark: in Flink a watermark fires its event-time
        # timers synchronously, processing-time timers that are due fire asynchronously
        # after (PyFlink: after the bundle); BATCH fires every timer at the end of input
        pt = MAX_WATERMARK if batch and cur == MAX_WATERMARK else now
        if pt is not None:
            res = op.on_processing_time(pt)
            hts, op.hook_timestamps = op.hook_timestamps, None
            if res or op.side_outputs:
                forward(node, op, res, hts if hts is not None and len(hts) == len(res) else None)
        if op.generates_watermarks:
            gwm, gidle = op.output_watermark(wm_in, now)  # type: ignore[attr-defined]  # only watermark generators have it (op.generates_watermarks)
            out[tid] = (MIN_WATERMARK if gwm is None else gwm, gidle)
        else:
            out[tid] = (cur, idle_in)
    return out


def _watermark_states(st: Stage, inst: _SubtaskInstance) -> dict[str, Any]:
    """Node uid -> watermark state for the driver (and the checkpoint); only non-trivial ones."""
    states: dict[str, Any] = {}
    for tid, op in inst.ops.items():
        wm = inst.watermarks.get(tid, MIN_WATERMARK)
        gen = op.snapshot_watermark_state() if op.generates_watermarks else None  # type: ignore[attr-defined]  # only watermark generators have it (op.generates_watermarks)
        if wm != MIN_WATERMARK or gen is not None:
            states[st.nodes[tid].uid] = node_state(wm, gen)
    return states


def _restore_paths(inst: _SubtaskInstance, cache_hit: bool) -> dict[str, int]:
    """How each keyed backend got its state this epoch: ``reused`` (its database or
    objects were still open in this process: nothing read), ``local`` (from a local copy
    on this worker: nothing downloaded) or ``remote`` (read from checkpoint storage /
    per-epoch versions)."""
    out: dict[str, int] = {}
    for b in inst.backends.values():
        if cache_hit:
            path: str | None = "reused"
        else:
            path = b.restore_source
        if path is not None:
            out[path] = out.get(path, 0) + 1
    return out


def _meta_stage(stages_meta: dict[int, tuple[int, int]], sid: int) -> Stage:
    p, mp = stages_meta[sid]
    return Stage(sid, p, mp)


def _emit(
    st: Stage,
    writers: dict[int, list[EdgeWriter]],
    index: int,
    acks: list[SubtaskAck | bytes],
    wm_out: dict[int, tuple[int, bool]],
) -> Iterator[tuple[int, int, Any]]:
    dests: set[int] = set()
    seq = 0  # unique per subtask and epoch: receivers sort on it
    for tid, ws in writers.items():
        sent: set[tuple[int, int]] = set()
        wm, idle = wm_out.get(tid, (MIN_WATERMARK, False))
        for w in ws:
            dest = w.edge.dest_stage
            dests.add(dest)
            for target, blob in w.chunks():
                yield dest, target, (DATA, st.id, index, seq, blob, w.edge.input)
                seq += 1
            # every epoch, every channel: the receiver's input watermark is the min over them
            for target in w.watermark_targets():
                if (dest, target) not in sent:
                    sent.add((dest, target))
                    yield dest, target, (WATERMARK, st.id, index, tid, wm, idle)
    # acks carry sink results (user objects): pickled here, loaded by the driver
    blobs = [a if isinstance(a, bytes) else dumps_portable(a) for a in acks]
    if not dests:
        for b in blobs:
            yield DRIVER, 0, (ACK, b)
        return
    for d in sorted(dests):
        for b in blobs:
            yield d, 0, (ACK, b)
