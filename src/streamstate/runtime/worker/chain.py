"""The operator chain of one subtask's epoch: a link per node, built from a registry.

Each node of the stage becomes a :class:`Link` of the kind its spec calls for
(:data:`LINK_KINDS`, keyed by :class:`NodeKind`): a node without an operator passes records
on, an operator processes them with or without their timestamps. A link counts what it
processed, checks a declared output type, and hands its outputs to its receivers: the
shuffle writers of its edges and the chained links of its children (side outputs to the
writers and links of their tag). Links are made per epoch (the writers collect that
epoch's output); the operators and state they run are the instance's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any

from streamstate.runtime.graph import OpNode, Stage
from streamstate.runtime.operators.base import StreamOperator
from streamstate.runtime.shuffle import EdgeWriter
from streamstate.runtime.worker.instance import SubtaskInstance

__all__ = ["LINK_KINDS", "Link", "NodeKind", "OperatorChain"]

#: records and their timestamps (None: the stream carries none)
Batch = tuple[list[Any], list[Any] | None]


class NodeKind(Enum):
    """How a node of a stage runs the records it receives."""

    #: no operator (the node of a replayable Source): records go on as they came
    PASS_THROUGH = "pass-through"
    #: an operator that reads no timestamps: ``process_batch`` (``process_batch2``)
    OPERATOR = "operator"
    #: an operator on a timestamped stream: ``process_batch_ts`` when timestamps come
    TIMESTAMPED = "timestamped"


class Link:
    """One node of the chain and where its outputs go."""

    def __init__(
        self,
        node: OpNode,
        op: StreamOperator | None,
        writers: list[EdgeWriter],
        output_check: Callable[[list[Any]], list[Any]] | None,
        counts: dict[str, int],
    ) -> None:
        self.node = node
        self.op = op
        self.main_writers = [w for w in writers if w.edge.tag is None]
        self.tagged_writers = [w for w in writers if w.edge.tag is not None]
        self.children: list[Link] = []
        self.side_children: dict[str, list[Link]] = {}
        self.output_check = output_check
        self.counts = counts

    def process(self, batch: list[Any], ts: list[Any] | None, side: int) -> Batch:
        """The outputs (and their timestamps) of ``batch`` arriving on input ``side``."""
        raise NotImplementedError

    def push(self, batch: list[Any], ts: list[Any] | None, side: int = 0) -> None:
        """Run ``batch`` through this node and everything chained after it."""
        out, out_ts = self.process(batch, ts, side)
        uid = self.node.uid
        self.counts[uid] = self.counts.get(uid, 0) + len(batch)
        if self.output_check is not None and out:
            out = self.output_check(out)  # a TUPLE type makes rows tuples, as PyFlink
        self.forward(out, out_ts)

    def forward(self, out: list[Any], out_ts: list[Any] | None) -> None:
        """Hand this node's outputs (and any side outputs it holds) to its receivers."""
        if self.op is not None and self.op.side_outputs:
            self._route_side_outputs(self.op)
        if not out:
            return
        for w in self.main_writers:
            w.add(out, out_ts)
        for c in self.children:
            c.push(out, out_ts)

    def _route_side_outputs(self, op: StreamOperator) -> None:
        """Side outputs go to their chained consumers and shuffle edges (else dropped)."""
        for tag, (values, stamps) in op.take_side_outputs().items():
            ts = stamps if any(t is not None for t in stamps) else None
            for w in self.tagged_writers:
                if w.edge.tag == tag:
                    w.add(values, ts)
            for c in self.side_children.get(tag, ()):
                c.push(values, ts)


class PassThroughLink(Link):
    """A node without an operator: records go on as they came."""

    def process(self, batch: list[Any], ts: list[Any] | None, side: int) -> Batch:
        return batch, ts


class OperatorLink(Link):
    """An operator that reads no timestamps on its first input."""

    op: StreamOperator

    def process(self, batch: list[Any], ts: list[Any] | None, side: int) -> Batch:
        if side:
            op = self.op
            return (
                (op.process_batch2(batch), None) if ts is None else op.process_batch2_ts(batch, ts)
            )
        return self.process_first(batch, ts)

    def process_first(self, batch: list[Any], ts: list[Any] | None) -> Batch:
        """The outputs of ``batch`` arriving on the first input."""
        return self.op.process_batch(batch), None


class TimestampedLink(OperatorLink):
    """An operator on a timestamped stream: it reads the records' timestamps."""

    def process_first(self, batch: list[Any], ts: list[Any] | None) -> Batch:
        op = self.op
        if ts is None and not op.generates_watermarks:
            return op.process_batch(batch), None
        # a watermark generator stamps records that came without timestamps
        return op.process_batch_ts(batch, ts)  # type: ignore[arg-type]  # None only for generators


#: the link of each node kind
LINK_KINDS: Mapping[NodeKind, type[Link]] = MappingProxyType(
    {
        NodeKind.PASS_THROUGH: PassThroughLink,
        NodeKind.OPERATOR: OperatorLink,
        NodeKind.TIMESTAMPED: TimestampedLink,
    }
)


def node_kind(node: OpNode, inst: SubtaskInstance) -> NodeKind:
    """The kind of ``node`` in subtask instance ``inst``."""
    if node.factory is None or node.tid not in inst.ops:
        return NodeKind.PASS_THROUGH
    return NodeKind.TIMESTAMPED if node.tid in inst.ts_aware else NodeKind.OPERATOR


class OperatorChain:
    """The links of one subtask's stage for one epoch, wired to their receivers."""

    def __init__(
        self,
        stage: Stage,
        inst: SubtaskInstance,
        stages_meta: Mapping[int, tuple[int, int]],
        index: int,
    ) -> None:
        self.stage = stage
        #: node uid -> records it processed this epoch (nodes that received a batch)
        self.counts: dict[str, int] = {}
        #: node tid -> the shuffle writers of its edges, in edge order
        self.writers = {
            tid: _edge_writers(node, inst, stages_meta, index) for tid, node in stage.nodes.items()
        }
        self.links: dict[int, Link] = {}
        for tid, node in stage.nodes.items():
            check = inst.output_checks.get(tid)
            self.links[tid] = LINK_KINDS[node_kind(node, inst)](
                node, inst.ops.get(tid), self.writers[tid], check, self.counts
            )
        for link in self.links.values():
            link.children = [self.links[c] for c in link.node.children]
            link.side_children = {
                tag: [self.links[c] for c in tids] for tag, tids in link.node.side_children.items()
            }

    def push_heads(self, records: list[Any], ts: list[Any] | None = None) -> None:
        """Push a source's records into every head node."""
        for tid in self.stage.heads:
            self.links[tid].push(records, ts)


def _edge_writers(
    node: OpNode, inst: SubtaskInstance, stages_meta: Mapping[int, tuple[int, int]], index: int
) -> list[EdgeWriter]:
    writers = []
    for j, edge in enumerate(node.edges):
        parallelism, max_parallelism = stages_meta[edge.dest_stage]
        dest = Stage(edge.dest_stage, parallelism, max_parallelism)
        cache = inst.key_caches.setdefault((node.tid, j), {})
        writers.append(EdgeWriter(edge, dest, index, node.name, cache))
    return writers
