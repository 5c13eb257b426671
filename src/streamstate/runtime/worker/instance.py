"""A subtask's operators and state: built from the stage's typed spec, kept between epochs.

:func:`build_instance` makes subtask ``i`` of a stage at version ``n-1``: for every node
with an operator, the operator (unpickled from the spec's factory), its keyed backend
restored from the lineage the driver sent (a full snapshot plus the deltas since), its
operator state store, its context and its restored watermark state; then, in Flink's
order, ``initialize_state`` on every operator before any ``open()``.
"""

from __future__ import annotations

import pickle
from typing import Any, Protocol, cast

from streamstate.runtime.graph import OpNode, Stage
from streamstate.runtime.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from streamstate.runtime.operators.base import OperatorContext, StreamOperator
from streamstate.runtime.operators.output_types import OutputTypeCheck
from streamstate.runtime.protocol import EpochSpec, Lineage, StageTaskSpec, SubtaskSpec, Token
from streamstate.runtime.versions import restore_operator_store
from streamstate.runtime.watermarks import MIN_WATERMARK

__all__ = ["SubtaskInstance", "WatermarkGenerator", "build_instance", "restore_paths"]


class WatermarkGenerator(Protocol):
    """An operator with ``generates_watermarks`` set (``assign_timestamps_and_watermarks``)."""

    def output_watermark(
        self, input_watermark: int | None, now_ms: int | None
    ) -> tuple[int | None, bool]: ...

    def snapshot_watermark_state(self) -> Any: ...

    def restore_watermark_state(self, state: Any) -> None: ...


def as_generator(op: StreamOperator) -> WatermarkGenerator:
    """``op`` as the watermark generator its ``generates_watermarks`` says it is."""
    return cast(WatermarkGenerator, op)


class SubtaskInstance:
    """One subtask's operators, keyed backends, operator state stores and time state."""

    def __init__(self) -> None:
        #: the version the state is at: ``(attempt, epoch)`` of the last committed epoch
        self.token: Token | None = None
        #: node tid -> its operator (nodes with an operator only)
        self.ops: dict[int, StreamOperator] = {}
        #: keyed operator uid -> its keyed state backend
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
        self.output_checks: dict[int, OutputTypeCheck] = {}
        #: keyed uid -> (key groups kept in place, key groups read) when it was built
        self.key_groups: dict[str, tuple[int, int]] = {}

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


def build_instance(
    spec: StageTaskSpec,
    index: int,
    epoch_spec: EpochSpec,
    sub: SubtaskSpec,
    previous: SubtaskInstance | None = None,
) -> SubtaskInstance:
    """Subtask ``index`` of ``spec.stage`` at the version ``sub`` describes, opened.
    ``previous``: this process's instance of the same subtask at another version (the
    caller closes it afterwards); after a rescale in place its keyed backends hand the
    new ones the key groups the subtask keeps (``Lineage.kept_from``)."""
    from streamstate.runtime.operators.checkpointing import StateInitializationContext

    st = spec.stage
    inst = SubtaskInstance()
    # version n-1 exists unless this is the first epoch of a fresh (re)start
    restored = epoch_spec.epoch > 1 or any(sub.op_lineages.values())
    kg_range = compute_key_group_range_for_operator_index(st.max_parallelism, st.parallelism, index)
    for node in st.nodes.values():
        if node.factory is not None:  # else a source node without an operator (a Source)
            _add_node(inst, spec, index, epoch_spec, sub, node, kg_range, previous)
    # Flink's order: initializeState (operator and keyed state stores) before open()
    for tid, op in inst.ops.items():
        store = inst.op_stores[st.nodes[tid].uid]
        op.initialize_state(StateInitializationContext(restored, store, op.ctx))
    for op in inst.ops.values():
        op.open()
    return inst


def _add_node(
    inst: SubtaskInstance,
    spec: StageTaskSpec,
    index: int,
    epoch_spec: EpochSpec,
    sub: SubtaskSpec,
    node: OpNode,
    kg_range: KeyGroupRange,
    previous: SubtaskInstance | None,
) -> None:
    """The operator of ``node`` with its state, set up (not yet initialized nor opened)."""
    from streamstate.runtime.state.operator import DefaultOperatorStateStore

    st = spec.stage
    op: StreamOperator = pickle.loads(spec.factories[node.tid])()
    backend = None
    if node.keyed:
        lineage = sub.lineages.get(node.uid)
        backend = _keyed_backend(spec, node, kg_range, epoch_spec)
        if lineage is not None:
            _restore_keyed(backend, lineage, previous, node.uid)
            inst.key_groups[node.uid] = (backend.key_groups_kept, backend.key_groups_read)
        inst.backends[node.uid] = backend
    store = DefaultOperatorStateStore(node.name, allow_broadcast=op.allows_broadcast_state)
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
    inst.ops[node.tid] = op
    _setup_time(inst, node, op, sub.watermarks.get(node.uid))
    if node.output_type is not None:
        inst.output_checks[node.tid] = OutputTypeCheck(node.name, node.output_type)


def _keyed_backend(
    spec: StageTaskSpec, node: OpNode, kg_range: KeyGroupRange, epoch_spec: EpochSpec
) -> Any:
    """A new, empty keyed backend of ``node``'s key groups."""
    from streamstate.runtime.state.registry import create_keyed_backend

    st: Stage = spec.stage
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
    return backend


def _restore_keyed(
    backend: Any, lineage: Lineage, previous: SubtaskInstance | None, uid: str
) -> None:
    """Bring a new keyed ``backend`` to the version of ``lineage``. After a rescale in
    place (``lineage.kept_from`` is the version ``previous`` holds), the key groups of
    the previous backend's range that the new one still owns move over, and only the
    others are read from the lineage's base."""
    kept = None
    if (
        lineage.kept_from is not None
        and previous is not None
        and previous.token == lineage.kept_from
        and not lineage.deltas
    ):
        old = previous.backends.get(uid)
        if old is not None and type(old) is type(backend):
            kept = old.key_group_range.intersection(backend.key_group_range)
            if len(kept):
                backend.take_key_groups(old, kept)
            else:
                kept = None
    if kept is None:
        if lineage.base:
            backend.restore(list(lineage.base))
        for d in lineage.deltas:
            backend.apply_delta(d.read())
        return
    for gained in backend.key_group_range.difference(kept):
        backend.restore(list(lineage.base), gained)


def _setup_time(inst: SubtaskInstance, node: OpNode, op: StreamOperator, state: Any) -> None:
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
            as_generator(op).restore_watermark_state(gen)


def restore_paths(inst: SubtaskInstance, cache_hit: bool) -> dict[str, int]:
    """How each keyed backend got its state this epoch, counted by path: ``reused`` (its
    database or objects were still open in this process: nothing read), ``local`` (from a
    local copy on this worker: nothing downloaded) or ``remote`` (read from checkpoint
    storage / per-epoch versions)."""
    out: dict[str, int] = {}
    for backend in inst.backends.values():
        path: str | None = "reused" if cache_hit else backend.restore_source
        if path is not None:
            out[path] = out.get(path, 0) + 1
    return out
