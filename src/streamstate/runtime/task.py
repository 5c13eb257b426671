"""Worker side of an epoch: run one subtask of one stage.

``run_stage_partition`` is what a Spark task executes (and what the in-process
runner calls in unit tests). For subtask ``i`` of a stage in epoch ``n`` it:

1. obtains the subtask's operators and keyed state at version ``n-1``: from the
   worker's host state (``worker/host.py``) if this Python process ran the subtask in
   epoch ``n-1`` of the same attempt (token check), otherwise by restoring the
   *lineage* the driver sent (a full snapshot plus the deltas written since), then
   ``open()`` (``worker/instance.py``);
2. reads its source slice or its shuffled input, in a deterministic order, and pushes
   the records through the chained operators (``worker/inputs.py``, ``worker/chain.py``);
3. fires watermarks and processing time (``worker/event_time.py``);
4. commits state version ``n``: a checkpoint snapshot when the epoch ends with
   a barrier, else a full version every few epochs, else a delta (``worker/commit.py``);
5. returns the records for the next stages plus a small ack for the driver
   (``worker/ack.py``).

Running a subtask twice for the same epoch (a Spark task retry) is safe: the
second run restores version ``n-1`` again and writes the same version ``n``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from streamstate.runtime.checkpoint.sharing import check_shared
from streamstate.runtime.job_end import on_job_end
from streamstate.runtime.protocol import DRIVER, EpochSpec, StageTaskSpec
from streamstate.runtime.worker.ack import AckContext, PhaseClock, emit, subtask_ack
from streamstate.runtime.worker.chain import OperatorChain
from streamstate.runtime.worker.commit import commit_epoch
from streamstate.runtime.worker.event_time import advance_time
from streamstate.runtime.worker.host import HOST, InstanceKey
from streamstate.runtime.worker.inputs import (
    InputContext,
    StageKind,
    epoch_reader,
    read_input,
    stage_kind,
)
from streamstate.runtime.worker.instance import SubtaskInstance, build_instance

__all__ = ["DRIVER", "run_stage_partition"]

on_job_end("subtask instances", HOST.forget_job)


def run_stage_partition(
    spec_blob: Any,
    stages_meta: Mapping[int, tuple[int, int]],
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
    spec = HOST.stage_spec(spec_blob, stages_meta)
    check_shared(spec.storage)  # this machine sees the driver's state directory
    key: InstanceKey = (spec.job_id, spec.stage.id, index)
    clock = PhaseClock()
    previous = HOST.take_stale(key, epoch_spec.previous_token)
    inst = HOST.cached_instance(key, epoch_spec.previous_token)
    cache_hit = inst is not None
    try:
        if inst is None:
            try:
                inst = _new_instance(spec, key, epoch_spec, previous)
            finally:
                if previous is not None:
                    previous.close()
        clock.restored()
        _start_epoch(inst, epoch_spec)
        chain = OperatorChain(spec.stage, inst, stages_meta, index)
        epoch_input = read_input(InputContext(spec, epoch_spec, index, inst, chain, items))
        node_watermarks = advance_time(chain, inst, epoch_spec, epoch_input.channels, spec.batch)
        clock.processed()
        done = commit_epoch(spec, inst, index, epoch_spec)
        inst.token = epoch_spec.token
        who = AckContext(HOST.worker_id, executor)
        ack = subtask_ack(
            spec, index, epoch_spec, inst, chain, epoch_input, done, cache_hit, clock, who
        )
    except BaseException:
        HOST.discard(key)  # a half-processed instance must never serve a later epoch
        raise
    yield from emit(chain, index, [ack, *epoch_input.forwarded], node_watermarks)


def _new_instance(
    spec: StageTaskSpec,
    key: InstanceKey,
    epoch_spec: EpochSpec,
    previous: SubtaskInstance | None = None,
) -> SubtaskInstance:
    """Subtask ``key`` built at version ``n-1`` (from ``previous``, its instance at another
    version, where a rescale in place lets it keep key groups) and kept by the host; a
    SourceFunction that moved to this process checks that it can resume where its
    assignment says."""
    index = key[2]
    inst = build_instance(spec, index, epoch_spec, epoch_spec.subtasks[index], previous)
    HOST.keep(key, inst)  # kept first: a failed check closes it with the epoch
    if epoch_spec.moved and stage_kind(spec.stage) is StageKind.SOURCE_FUNCTION:
        reader = epoch_reader(spec.stage, inst)
        reader.check_resumable(epoch_spec.subtasks[index].source_assignment, epoch_spec.epoch)
    return inst


def _start_epoch(inst: SubtaskInstance, epoch_spec: EpochSpec) -> None:
    """The epoch's number, clocks and checkpoint notifications reach every operator."""
    now = epoch_spec.processing_time_ms
    for ctx in inst.contexts:
        ctx.epoch = epoch_spec.epoch
        ctx.ending = epoch_spec.ending
        if now is not None:
            ctx.processing_time = now
    for backend in inst.backends.values():
        backend.ttl_time_provider.on_epoch(epoch_spec.epoch, now)
    for what, checkpoint_id in epoch_spec.notifications:
        for op in inst.ops.values():
            if what == "complete":
                op.notify_checkpoint_complete(checkpoint_id)
            else:
                op.notify_checkpoint_aborted(checkpoint_id)
