"""The end of a subtask's epoch: processing time and watermarks, node by node.

:func:`advance_time` runs after the epoch's records went through the chain. Each node's
input watermark is its parent's output (a head node's is the stage's: the combined
channel watermarks of a shuffled stage, MIN or, at the end of input, MAX for a source
stage). An operator whose input watermark advanced gets ``process_watermark``, then every
operator gets ``on_processing_time``; their outputs go downstream before the next node's
turn, so a chained operator sees them before the watermark (as in Flink).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamstate.runtime.graph import Stage
from streamstate.runtime.operators.base import StreamOperator
from streamstate.runtime.protocol import EpochSpec
from streamstate.runtime.watermarks import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    ChannelWatermark,
    combine_channels,
    node_state,
)
from streamstate.runtime.worker.chain import Link, OperatorChain
from streamstate.runtime.worker.instance import SubtaskInstance, as_generator

__all__ = ["NodeWatermarks", "advance_time", "watermark_states"]

#: node tid -> the node's output ``(watermark, idle)``, sent on every channel of its edges
NodeWatermarks = dict[int, tuple[int, bool]]


def advance_time(
    chain: OperatorChain,
    inst: SubtaskInstance,
    epoch_spec: EpochSpec,
    channels: Mapping[tuple[int, int, int], ChannelWatermark],
    batch: bool,
) -> NodeWatermarks:
    """Fire watermarks and processing time through ``chain``; each node's output watermark.

    ``batch``: at the end of input every processing-time timer fires too (Flink's BATCH
    mode fires all timers at the end of input), after the final watermark.
    """
    stage = chain.stage
    now = epoch_spec.processing_time_ms
    stage_in: tuple[int | None, bool]
    if stage.is_source:
        stage_in = (MAX_WATERMARK if epoch_spec.end_of_input else MIN_WATERMARK), False
    else:
        stage_in = combine_channels(channels.values())
    parents = _parents(stage)
    out: NodeWatermarks = {}
    for tid, node in stage.nodes.items():
        parent = parents.get(tid)
        wm_in, idle_in = stage_in if parent is None else out[parent]
        op = inst.ops.get(tid) if node.factory is not None else None
        if op is None:
            out[tid] = (MIN_WATERMARK if wm_in is None else wm_in, idle_in)
            continue
        link = chain.links[tid]
        current = inst.watermarks.get(tid, MIN_WATERMARK)
        if wm_in is not None and wm_in > current and not idle_in:
            current = inst.watermarks[tid] = wm_in
            assert op.ctx is not None
            op.ctx.current_watermark = wm_in
            _forward_hook_output(link, op, op.process_watermark(wm_in))
        # processing time after the watermark: in Flink a watermark fires its event-time
        # timers synchronously, processing-time timers that are due fire asynchronously
        # after (PyFlink: after the bundle); BATCH fires every timer at the end of input
        processing_time = MAX_WATERMARK if batch and current == MAX_WATERMARK else now
        if processing_time is not None:
            _forward_hook_output(link, op, op.on_processing_time(processing_time))
        if op.generates_watermarks:
            generated, idle = as_generator(op).output_watermark(wm_in, now)
            out[tid] = (MIN_WATERMARK if generated is None else generated, idle)
        else:
            out[tid] = (current, idle_in)
    return out


def _parents(stage: Stage) -> dict[int, int]:
    """Node tid -> the tid of the chained node it receives from (heads have none)."""
    parents: dict[int, int] = {}
    for tid, node in stage.nodes.items():
        for child in node.children:
            parents[child] = tid
        for children in node.side_children.values():
            for child in children:
                parents[child] = tid
    return parents


def _forward_hook_output(link: Link, op: StreamOperator, records: list[Any]) -> None:
    """Forward what a timer hook returned, with its timestamps when it set one per record."""
    stamps, op.hook_timestamps = op.hook_timestamps, None
    if records or op.side_outputs:
        link.forward(
            records, stamps if stamps is not None and len(stamps) == len(records) else None
        )


def watermark_states(stage: Stage, inst: SubtaskInstance) -> dict[str, Any]:
    """Node uid -> watermark state for the driver (and the checkpoint); non-trivial ones."""
    states: dict[str, Any] = {}
    for tid, op in inst.ops.items():
        wm = inst.watermarks.get(tid, MIN_WATERMARK)
        gen = as_generator(op).snapshot_watermark_state() if op.generates_watermarks else None
        if wm != MIN_WATERMARK or gen is not None:
            states[stage.nodes[tid].uid] = node_state(wm, gen)
    return states
