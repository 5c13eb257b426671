"""The job graph: transformations recorded by the DataStream API, and the stages they run in.

A :class:`Transformation` is what one DataStream API call adds. :func:`build_plan`
chains transformations into :class:`Stage` s: operators connected by a forward
edge with equal parallelism share a stage (Flink's operator chaining); a
``key_by``, ``rebalance``, ``broadcast``, a union, a two-input operator
(``connect``) or a change of parallelism starts a new stage whose input is a
shuffle. Every edge names the input of its destination operator it feeds
(``Edge.input``: 0 first, 1 second), so a two-input operator can tell its inputs apart. Stage ``i``'s subtask ``j`` is partition ``j`` of one
Spark RDD per epoch. Nothing here imports pyspark.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from streamstate.errors import ConfigurationError
from streamstate.runtime.keygroups import check_parallelism, compute_default_max_parallelism

__all__ = [
    "Edge",
    "ExecutionPlan",
    "OpNode",
    "Partitioning",
    "Stage",
    "Transformation",
    "TransformationKind",
    "build_plan",
    "stream_type",
]


class TransformationKind(Enum):
    SOURCE = "source"
    ONE_INPUT = "one-input"
    #: ``connect``: inputs = [first, second]; payload a zero-arg factory of a two-input operator
    TWO_INPUT = "two-input"
    PARTITION = "partition"
    UNION = "union"
    SINK = "sink"
    #: virtual: the side output ``payload`` (a tag id) of its input operator
    SIDE_OUTPUT = "side-output"


class Partitioning(Enum):
    FORWARD = "forward"
    HASH = "hash"  # key_by: record goes to the subtask owning its key group
    REBALANCE = "rebalance"  # round robin
    BROADCAST = "broadcast"  # every record to every subtask
    CUSTOM = "custom"  # partition_custom: the user's Partitioner picks the subtask


_ids = itertools.count(1)


@dataclass(eq=False)
class Transformation:
    """One node of the logical graph (a DataStream API call)."""

    kind: TransformationKind
    name: str
    inputs: list[Transformation] = field(default_factory=list)
    #: SOURCE: a runtime Source; ONE_INPUT/SINK: a zero-argument operator factory;
    #: PARTITION: a KeyingSpec (HASH) or None
    payload: Any = None
    partitioning: Partitioning | None = None
    keyed: bool = False
    parallelism: int | None = None
    max_parallelism: int | None = None
    uid: str | None = None
    #: ``set_uid_hash``: the id state is matched by, verbatim (wins over ``uid``)
    uid_hash: str | None = None
    #: SINK: zero-arg factory of the driver-side SinkCommitter (None: no commit protocol)
    committer_factory: Any = None
    #: the declared type of the outputs (``map(f, output_type=Types.LONG())``): checked
    output_type: Any = None
    #: what the API accepted but the plan does not act on (slot sharing group, chaining,
    #: buffer timeout, description): kept for ``get_execution_plan`` and tests
    hints: dict[str, Any] = field(default_factory=dict)
    #: the outputs have the input's type (filter, reduce, timestamps, ...): what
    #: ``print()`` formats them by when no output_type is declared
    preserves_type: bool = False
    id: int = field(default_factory=lambda: next(_ids))

    def default_uid(self, position: int) -> str:
        # Position-based, like Flink's generated operator ids: stable for the same program.
        slug = self.name.lower().replace(" ", "-")[:40]
        return f"{position:03d}-{slug}"


def stream_type(t: Transformation) -> Any:
    """The declared type of the records of ``t`` (None: not declared, i.e. pickled)."""
    while t.output_type is None:
        if (
            t.kind in (TransformationKind.PARTITION, TransformationKind.UNION) or t.preserves_type
        ) and t.inputs:
            t = t.inputs[0]
        else:
            return None
    return t.output_type


@dataclass(frozen=True)
class CustomPartitionSpec:
    """How a ``partition_custom`` edge picks a subtask: ``partitioner.partition(key, n)``
    of the key ``key_selector`` extracts."""

    partitioner: Any
    key_selector: Any


@dataclass(frozen=True)
class KeyingSpec:
    """How a ``key_by`` edge computes keys: the selector and the key serializer."""

    key_selector: Any
    key_serializer: Any


@dataclass
class Edge:
    """A shuffle from a node of one stage into another stage."""

    dest_stage: int
    partitioning: Partitioning
    #: HASH: the keying; CUSTOM: the partitioner and its key selector
    keying: KeyingSpec | CustomPartitionSpec | None = None
    #: which input of the destination stage's head operator this edge feeds (0 or 1)
    input: int = 0
    #: the side output (tag id) this edge carries; None: the node's main output
    tag: str | None = None
    #: HASH: the receiving stage extracts the keys itself (``Stage.input_keyings``), so
    #: only key groups and records travel (as Flink's receivers re-extract keys)
    receiver_keys: bool = False


@dataclass
class OpNode:
    tid: int
    uid: str
    name: str
    factory: Any  # zero-arg callable -> StreamOperator (None for the source node)
    keyed: bool
    parallelism: int
    children: list[int] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    committer_factory: Any = None
    #: chained consumers of side outputs: tag id -> node tids
    side_children: dict[str, list[int]] = field(default_factory=dict)
    #: the declared output type (a TypeInformation), checked per output when set
    output_type: Any = None


@dataclass
class Stage:
    id: int
    parallelism: int
    max_parallelism: int
    nodes: dict[int, OpNode] = field(default_factory=dict)
    #: nodes that consume the stage input (the source node for a source stage)
    heads: list[int] = field(default_factory=list)
    source: Any = None  # runtime Source for source stages
    source_uid: str | None = None
    input_partitioning: Partitioning | None = None
    #: a two-input stage: the partitioning of its second input (``input_partitioning``
    #: is the first input's)
    input_partitioning2: Partitioning | None = None
    upstream: list[int] = field(default_factory=list)
    #: serializer of the keys on a HASH input (the keyed backends' key serializer)
    key_serializer: Any = None
    #: per input (0, 1): the one KeyingSpec of its HASH edges, with which the receiving
    #: subtask extracts keys (None: not a hash input, or inputs keyed differently)
    input_keyings: list[Any] = field(default_factory=lambda: [None, None])

    @property
    def is_source(self) -> bool:
        return self.source is not None

    @property
    def downstream(self) -> list[int]:
        return sorted({e.dest_stage for n in self.nodes.values() for e in n.edges})

    @property
    def keyed_uids(self) -> list[str]:
        return [n.uid for n in self.nodes.values() if n.keyed]


@dataclass
class ExecutionPlan:
    stages: list[Stage]

    def stage(self, sid: int) -> Stage:
        return self.stages[sid]

    @property
    def leaves(self) -> list[Stage]:
        return [s for s in self.stages if not s.downstream]

    @property
    def sources(self) -> list[Stage]:
        return [s for s in self.stages if s.is_source]

    def operator_parallelism(self) -> dict[str, tuple[int, int]]:
        """uid -> (parallelism, max parallelism) for every operator."""
        return {
            n.uid: (s.parallelism, s.max_parallelism) for s in self.stages for n in s.nodes.values()
        }

    def has_keyed_operators(self) -> bool:
        """Keyed operators may hold event-time timers and windows (the final watermark
        must reach them)."""
        return any(n.keyed for s in self.stages for n in s.nodes.values())

    def needs_end_of_input(self) -> bool:
        """Whether the final watermark must reach an operator: keyed operators (timers,
        windows) and operators that close something at the end of the input (FileSink)."""
        return self.has_keyed_operators() or any(
            getattr(n.factory(), "needs_end_of_input", False)
            for s in self.stages
            for n in s.nodes.values()
            if n.factory is not None
        )

    def listens_to_checkpoints(self) -> bool:
        """Whether any operator wants checkpoint notifications (builds each operator once,
        without opening it)."""
        return any(
            n.factory().listens_to_checkpoints()
            for s in self.stages
            for n in s.nodes.values()
            if n.factory is not None
        )

    def describe(self) -> str:
        lines = []
        for s in self.stages:
            names = " -> ".join(n.name for n in s.nodes.values())
            up = ""
            if s.upstream:
                # build_plan sets input_partitioning on every stage it gives an upstream
                assert s.input_partitioning is not None
                up = f" <- {s.input_partitioning.value} from {s.upstream}"
                if s.input_partitioning2 is not None:
                    up = (
                        f" <- {s.input_partitioning.value} + {s.input_partitioning2.value} "
                        f"(two inputs) from {s.upstream}"
                    )
            lines.append(f"stage {s.id} (p={s.parallelism}){up}: {names}")
        return "\n".join(lines)


def _flatten_inputs(t: Transformation) -> list[tuple[Transformation, Partitioning, Any]]:
    """Resolve unions and partitionings between ``t`` and the operators it reads."""
    return _flatten(t.inputs)


def _flatten(inputs: list[Transformation]) -> list[tuple[Transformation, Partitioning, Any]]:
    out: list[tuple[Transformation, Partitioning, Any]] = []

    def walk(x: Transformation, part: Partitioning, keying: Any, resolved: bool) -> None:
        # The partitioning nearest to the operator wins (the API refuses key_by().rebalance()
        # as Flink does; below it, a nearer partitioning overrides those further upstream).
        if x.kind is TransformationKind.UNION:
            for i in x.inputs:
                walk(i, part, keying, resolved)
        elif x.kind is TransformationKind.PARTITION:
            assert x.partitioning is not None
            if resolved:
                walk(x.inputs[0], part, keying, True)
            else:
                walk(x.inputs[0], x.partitioning, x.payload, True)
        else:
            out.append((x, part, keying))

    for i in inputs:
        walk(i, Partitioning.FORWARD, None, False)
    return out


def _check_same(t: Transformation, ins: list[tuple[Transformation, Partitioning, Any]]) -> None:
    if any(pt is not ins[0][1] for _, pt, _ in ins):
        raise ConfigurationError(
            f"operator {t.name!r} reads inputs with different partitionings; "
            f"apply the same key_by/rebalance to every input"
        )


def _producer(x: Transformation) -> tuple[Transformation, str | None]:
    """The operator behind an input and the side output tag read from it (None: main output)."""
    if x.kind is TransformationKind.SIDE_OUTPUT:
        return x.inputs[0], x.payload
    return x, None


def _reachable(sinks: list[Transformation]) -> list[Transformation]:
    seen: dict[int, Transformation] = {}

    def visit(t: Transformation) -> None:
        if t.id in seen:
            return
        for i in t.inputs:
            visit(i)
        seen[t.id] = t

    for s in sinks:
        visit(s)
    return sorted(seen.values(), key=lambda t: t.id)


def build_plan(
    sinks: list[Transformation], default_parallelism: int, max_parallelism: int | None
) -> ExecutionPlan:
    """Chain the graph that ends in ``sinks`` into stages.

    Operators not leading to a sink are not executed (as in Flink). Raises
    :class:`ConfigurationError` for a graph without sinks or a parallelism that
    exceeds the max parallelism.
    """
    if not sinks:
        raise ConfigurationError(
            "the job has no sinks: add print(), add_sink(), sink_to() or use execute_and_collect()"
        )
    order = _reachable(sinks)
    stages: list[Stage] = []
    stage_of: dict[int, int] = {}
    nodes: dict[int, OpNode] = {}
    position = 0
    uids: set[str] = set()

    def new_uid(t: Transformation) -> str:
        nonlocal position
        position += 1
        uid = t.uid_hash or t.uid or t.default_uid(position)
        if uid in uids:
            raise ConfigurationError(f"operator uid {uid!r} is used twice: uids must be unique")
        uids.add(uid)
        return uid

    for t in order:
        if t.kind in (
            TransformationKind.UNION,
            TransformationKind.PARTITION,
            TransformationKind.SIDE_OUTPUT,
        ):
            continue
        p = t.parallelism or default_parallelism
        if t.kind is TransformationKind.SOURCE:
            p = t.parallelism or getattr(t.payload, "default_parallelism", None) or p
        mp = t.max_parallelism or max_parallelism or compute_default_max_parallelism(p)
        check_parallelism(p, mp)
        uid = new_uid(t)
        # a source node has an operator only for a SourceFunction (it runs the user's run())
        factory = (
            getattr(t.payload, "operator_factory", None)
            if t.kind is TransformationKind.SOURCE
            else t.payload
        )
        node = OpNode(
            t.id,
            uid,
            t.name,
            factory,
            t.keyed,
            p,
            committer_factory=t.committer_factory,
            output_type=t.output_type,
        )
        nodes[t.id] = node
        if t.kind is TransformationKind.SOURCE:
            st = Stage(len(stages), p, mp, source=t.payload, source_uid=uid)
            st.nodes[t.id] = node
            st.heads.append(t.id)
            stages.append(st)
            stage_of[t.id] = st.id
            continue
        if t.kind is TransformationKind.TWO_INPUT:
            st = Stage(len(stages), p, mp)
            st.nodes[t.id] = node
            st.heads.append(t.id)
            stages.append(st)
            stage_of[t.id] = st.id
            _connect_two_inputs(t, st, stages, stage_of, nodes)
            continue
        ins = _flatten_inputs(t)
        if not ins:
            raise ConfigurationError(f"operator {t.name!r} has no input")
        if t.keyed and any(part is not Partitioning.HASH for _, part, _ in ins):
            raise ConfigurationError(
                f"operator {t.name!r} uses keyed state but its input is not keyed: "
                f"apply it to a stream returned by key_by()"
            )
        chainable = (
            len(ins) == 1
            and ins[0][1] is Partitioning.FORWARD
            and stages[stage_of[_producer(ins[0][0])[0].id]].parallelism == p
            and not t.keyed
        )
        if chainable:
            up, tag = _producer(ins[0][0])
            st = stages[stage_of[up.id]]
            st.nodes[t.id] = node
            if tag is None:
                nodes[up.id].children.append(t.id)
            else:
                nodes[up.id].side_children.setdefault(tag, []).append(t.id)
            stage_of[t.id] = st.id
            continue
        part = ins[0][1]
        _check_same(t, ins)
        st = Stage(len(stages), p, mp)
        st.input_partitioning = Partitioning.REBALANCE if part is Partitioning.FORWARD else part
        st.nodes[t.id] = node
        st.heads.append(t.id)
        stages.append(st)
        stage_of[t.id] = st.id
        _add_edges(ins, st, 0, stages, stage_of, nodes)
    return ExecutionPlan(stages)


def _add_edges(
    ins: list[tuple[Transformation, Partitioning, Any]],
    st: Stage,
    input_index: int,
    stages: list[Stage],
    stage_of: dict[int, int],
    nodes: dict[int, OpNode],
) -> None:
    keyings = {id(k): k for _, pt, k in ins if pt is Partitioning.HASH}
    if len(keyings) == 1 and all(isinstance(k, KeyingSpec) for k in keyings.values()):
        st.input_keyings[input_index] = next(iter(keyings.values()))
    for up_t, pt, keying in ins:
        up, tag = _producer(up_t)
        if isinstance(keying, KeyingSpec) and st.key_serializer is None:
            st.key_serializer = keying.key_serializer
        up_stage = stages[stage_of[up.id]]
        eff = pt
        if pt is Partitioning.FORWARD:
            # forward needs equal parallelism; otherwise Flink rebalances
            eff = (
                Partitioning.FORWARD
                if up_stage.parallelism == st.parallelism
                else Partitioning.REBALANCE
            )
        receiver_keys = eff is Partitioning.HASH and st.input_keyings[input_index] is keying
        nodes[up.id].edges.append(Edge(st.id, eff, keying, input_index, tag, receiver_keys))
        if up_stage.id not in st.upstream:
            st.upstream.append(up_stage.id)


def _connect_two_inputs(
    t: Transformation,
    st: Stage,
    stages: list[Stage],
    stage_of: dict[int, int],
    nodes: dict[int, OpNode],
) -> None:
    """Wire both inputs of a two-input operator (``connect``) into its own stage ``st``.

    A keyed two-input operator needs a keyed first input and a keyed (co-process)
    or broadcast (broadcast pattern) second input; both keyed inputs share the
    operator's keyed state, so their key types must match.
    """
    if len(t.inputs) != 2:
        raise ConfigurationError(f"two-input operator {t.name!r} needs exactly two inputs")
    sides = [_flatten([i]) for i in t.inputs]
    for side in sides:
        if not side:
            raise ConfigurationError(f"operator {t.name!r} has an input without operators")
        _check_same(t, side)
    p1, p2 = sides[0][0][1], sides[1][0][1]
    if t.keyed and p1 is not Partitioning.HASH:
        raise ConfigurationError(
            f"operator {t.name!r} uses keyed state but its first input is not keyed: "
            f"connect two keyed streams (or key_by the connected streams)"
        )
    if t.keyed and p2 not in (Partitioning.HASH, Partitioning.BROADCAST):
        raise ConfigurationError(
            f"operator {t.name!r} uses keyed state but its second input is neither keyed "
            f"nor broadcast: key_by both inputs of connect()"
        )
    st.input_partitioning = Partitioning.REBALANCE if p1 is Partitioning.FORWARD else p1
    st.input_partitioning2 = Partitioning.REBALANCE if p2 is Partitioning.FORWARD else p2
    _add_edges(sides[0], st, 0, stages, stage_of, nodes)
    _add_edges(sides[1], st, 1, stages, stage_of, nodes)
