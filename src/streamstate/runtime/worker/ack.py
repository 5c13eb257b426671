"""What a subtask's epoch hands back: the ack for the driver and the records it emitted.

:func:`subtask_ack` assembles the :class:`SubtaskAck` from the epoch's named pieces (the
instance, its chain, what reading the input reported, what the commit wrote);
:func:`emit` yields the shuffle writers' chunks, one watermark per channel, and the acks:
to the next stages, which forward them, or (a leaf stage) to the driver.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from streamstate.runtime.features import ack_parts
from streamstate.runtime.protocol import (
    DRIVER,
    EpochSpec,
    StageTaskSpec,
    SubtaskAck,
    SubtaskTimings,
)
from streamstate.runtime.serializers.base import dumps_portable
from streamstate.runtime.shuffle import ACK, DATA, WATERMARK
from streamstate.runtime.state.migration import drain_migrated
from streamstate.runtime.user_metrics import report_user_metrics
from streamstate.runtime.watermarks import MIN_WATERMARK
from streamstate.runtime.worker.chain import OperatorChain
from streamstate.runtime.worker.commit import EpochCommit
from streamstate.runtime.worker.event_time import NodeWatermarks, watermark_states
from streamstate.runtime.worker.inputs import EpochInput
from streamstate.runtime.worker.instance import SubtaskInstance, restore_paths

__all__ = ["AckContext", "PhaseClock", "emit", "subtask_ack"]


@dataclass
class PhaseClock:
    """Seconds spent in each phase of the epoch (:class:`SubtaskTimings`)."""

    start: float = field(default_factory=time.perf_counter)
    restore: float = 0.0
    process: float = 0.0

    def restored(self) -> None:
        self.restore = time.perf_counter() - self.start

    def processed(self) -> None:
        self.process = time.perf_counter() - self.start - self.restore

    def timings(self) -> SubtaskTimings:
        commit = time.perf_counter() - self.start - self.restore - self.process
        return SubtaskTimings(self.restore, self.process, commit)


@dataclass(frozen=True)
class AckContext:
    """Who ran the epoch: the worker process and its Spark executor."""

    worker: str
    executor: str | None


def subtask_ack(
    spec: StageTaskSpec,
    index: int,
    epoch_spec: EpochSpec,
    inst: SubtaskInstance,
    chain: OperatorChain,
    epoch_input: EpochInput,
    done: EpochCommit,
    cache_hit: bool,
    clock: PhaseClock,
    who: AckContext,
) -> SubtaskAck:
    """The ack of subtask ``index`` for ``epoch_spec`` (``inst.token`` already advanced)."""
    assert inst.token is not None
    stage = spec.stage
    return SubtaskAck(
        stage=stage.id,
        subtask=index,
        token=inst.token,
        versions=done.versions,
        checkpoint=done.checkpoint,
        op_versions=done.op_versions,
        op_checkpoint=done.op_checkpoint,
        source=epoch_input.source_progress,
        sinks=_sink_results(spec, inst),
        counts=chain.counts,
        watermarks=watermark_states(stage, inst),
        cache_hit=cache_hit,
        state_restores=restore_paths(inst, cache_hit),
        key_groups={} if cache_hit else dict(inst.key_groups),
        savepoint_error=done.savepoint_error,
        worker=who.worker,
        executor=who.executor,
        timings=clock.timings(),
        migrated=drain_migrated(inst.backends, inst.op_stores),
        user_metrics=report_user_metrics(inst.contexts),
        features=ack_parts(spec, inst.backends, who.executor),
    )


def _sink_results(spec: StageTaskSpec, inst: SubtaskInstance) -> dict[str, Any]:
    """Sink operator uid -> its result for the driver-side committer."""
    results = {}
    for tid, op in inst.ops.items():
        result = op.sink_result()
        if result is not None:
            results[spec.stage.nodes[tid].uid] = result
    return results


def emit(
    chain: OperatorChain,
    index: int,
    acks: list[SubtaskAck | bytes],
    node_watermarks: NodeWatermarks,
) -> Iterator[tuple[int, int, Any]]:
    """``(dest stage, partition, payload)``: the chain's output chunks, then each channel's
    watermark, then the acks (to every next stage, or to the driver from a leaf stage)."""
    stage_id = chain.stage.id
    dests: set[int] = set()
    seq = 0  # unique per subtask and epoch: receivers sort on it
    for tid, writers in chain.writers.items():
        sent: set[tuple[int, int]] = set()
        wm, idle = node_watermarks.get(tid, (MIN_WATERMARK, False))
        for writer in writers:
            dest = writer.edge.dest_stage
            dests.add(dest)
            for target, blob in writer.chunks():
                yield dest, target, (DATA, stage_id, index, seq, blob, writer.edge.input)
                seq += 1
            # every epoch, every channel: the receiver's input watermark is the min over them
            for target in writer.watermark_targets():
                if (dest, target) not in sent:
                    sent.add((dest, target))
                    yield dest, target, (WATERMARK, stage_id, index, tid, wm, idle)
    # acks carry sink results (user objects): pickled here, loaded by the driver
    blobs = [a if isinstance(a, bytes) else dumps_portable(a) for a in acks]
    if not dests:
        for blob in blobs:
            yield DRIVER, 0, (ACK, blob)
        return
    for dest in sorted(dests):
        for blob in blobs:
            yield dest, 0, (ACK, blob)
