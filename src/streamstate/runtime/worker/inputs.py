"""How a stage's records come in: a reader per stage kind, from a registry.

A stage is of one :class:`StageKind`, read off its spec (:func:`stage_kind`): a source
stage reads a replayable ``Source`` itself, a SourceFunction stage has the function's
operator at its head (its ``run()`` produced the records), any other stage decodes the
shuffled chunks and watermarks its upstream stages sent. :data:`STAGE_INPUTS` maps each
kind to the reader that pushes the epoch's records into the chain and reports what the
driver needs back (:class:`EpochInput`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, Protocol, cast

from streamstate.runtime.graph import Stage
from streamstate.runtime.protocol import EpochSpec, StageTaskSpec, SubtaskAck
from streamstate.runtime.shuffle import decode_input
from streamstate.runtime.sliced_read import read_in_slices, reads_in_slices
from streamstate.runtime.spent import keep
from streamstate.runtime.watermarks import ChannelWatermark
from streamstate.runtime.worker.chain import OperatorChain
from streamstate.runtime.worker.instance import SubtaskInstance

__all__ = ["STAGE_INPUTS", "EpochInput", "EpochReader", "StageKind", "read_input", "stage_kind"]


class StageKind(Enum):
    """Where a stage's records come from."""

    #: a replayable ``Source`` the subtask reads (from_collection, from_source, files)
    SOURCE = "source"
    #: a ``SourceFunction``: its operator heads the stage and produces the records
    SOURCE_FUNCTION = "source-function"
    #: the shuffled output of upstream stages
    SHUFFLED = "shuffled"


def stage_kind(stage: Stage) -> StageKind:
    """The kind of ``stage`` (a source node with an operator is a SourceFunction's)."""
    if not stage.is_source:
        return StageKind.SHUFFLED
    if stage.nodes[stage.heads[0]].factory is not None:
        return StageKind.SOURCE_FUNCTION
    return StageKind.SOURCE


class EpochReader(Protocol):
    """The head operator of a SourceFunction stage (``operators/source_function.py``)."""

    #: timestamps of the last epoch's records (``collect_with_timestamp``), or None
    epoch_timestamps: list[Any] | None

    def read_epoch(self, assignment: Any, budget: int) -> tuple[list[Any], Any]: ...

    def check_resumable(self, assignment: Any, epoch: int) -> None: ...


@dataclass
class EpochInput:
    """What reading a stage's input reports besides the records it pushed."""

    #: the source reader's progress (source stages)
    source_progress: Any = None
    #: acks of upstream subtasks, forwarded to the driver through this stage
    forwarded: list[SubtaskAck | bytes] = field(default_factory=list)
    #: (src stage, src subtask, node) -> the watermark of that input channel
    channels: dict[tuple[int, int, int], ChannelWatermark] = field(default_factory=dict)


@dataclass(frozen=True)
class InputContext:
    """What a reader needs: the stage's spec, the epoch's, the subtask's, its instance,
    its chain and the shuffled items it was given."""

    spec: StageTaskSpec
    epoch_spec: EpochSpec
    index: int
    inst: SubtaskInstance
    chain: OperatorChain
    items: Iterable[Any]

    @property
    def assignment(self) -> Any:
        return self.epoch_spec.subtasks[self.index].source_assignment


def epoch_reader(stage: Stage, inst: SubtaskInstance) -> EpochReader:
    """The SourceFunction operator heading ``stage`` (a SOURCE_FUNCTION stage)."""
    return cast(EpochReader, inst.ops[stage.heads[0]])


def _read_source(ctx: InputContext) -> EpochInput:
    spec, es, stage = ctx.spec, ctx.epoch_spec, ctx.spec.stage
    if es.notify_only:
        return EpochInput()  # an input-free epoch that only delivers checkpoint notifications
    stage.source.prepare_worker()
    if (
        spec.source_interval_s > 0
        and not es.end_of_input
        and reads_in_slices(stage.source, stage.parallelism)
    ):
        # epochs cut by time: each slice runs through the chain as it is read
        progress = read_in_slices(stage, ctx.assignment, spec, _push_slice(ctx.chain))
        ctx.chain.push_heads([])
        return EpochInput(progress)
    records, progress = stage.source.read(ctx.assignment, spec.source_budget)
    ctx.chain.push_heads(records)
    keep(records)  # freed after the reply where a process releases (spent.py), else now
    return EpochInput(progress)


def _push_slice(chain: OperatorChain) -> Callable[..., None]:
    def push(node: Any, records: list[Any], ts: list[Any] | None) -> None:
        chain.links[node.tid].push(records, ts)

    return push


def _read_source_function(ctx: InputContext) -> EpochInput:
    if ctx.epoch_spec.notify_only:
        return EpochInput()
    reader = epoch_reader(ctx.spec.stage, ctx.inst)
    records, progress = reader.read_epoch(ctx.assignment, ctx.spec.source_budget)
    ctx.chain.push_heads(records, reader.epoch_timestamps)
    keep(records)
    return EpochInput(progress)


def _read_shuffled(ctx: InputContext) -> EpochInput:
    stage = ctx.spec.stage
    inputs, forwarded, stamps, channels = decode_input(ctx.items, stage)
    for tid in stage.heads:
        link = ctx.chain.links[tid]
        head = ctx.inst.ops.get(tid)
        if head is not None and head.two_input:
            for side in (1, 0) if head.second_input_first else (0, 1):
                if inputs[side]:
                    link.push(inputs[side], stamps[side], side)
        else:
            link.push(inputs[0], stamps[0])
    keep(inputs)  # freed after the reply where a process releases (spent.py), else now
    return EpochInput(None, forwarded, channels)


#: the reader of each stage kind
STAGE_INPUTS: Mapping[StageKind, Callable[[InputContext], EpochInput]] = MappingProxyType(
    {
        StageKind.SOURCE: _read_source,
        StageKind.SOURCE_FUNCTION: _read_source_function,
        StageKind.SHUFFLED: _read_shuffled,
    }
)


def read_input(ctx: InputContext) -> EpochInput:
    """Push the epoch's input of ``ctx``'s stage through its chain."""
    return STAGE_INPUTS[stage_kind(ctx.spec.stage)](ctx)
