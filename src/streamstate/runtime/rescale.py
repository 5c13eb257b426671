"""Rescaling a running job in place, at an epoch boundary (docs/elastic.md).

A request (``JobClient.rescale``, ``PUT /jobs/<id>/resource-requirements``, ``streamstate
rescale``) names a parallelism for the whole job and/or per operator uid. It is checked at
once (:func:`target_parallelism`: within ``1..max parallelism``, known uids, one
parallelism per chain) and queued; the epoch loop runs the next epoch with a checkpoint
barrier and, once that checkpoint completed, raises :class:`RescaleAtBoundary`. The
executor then changes the plan's parallelism in place (:func:`apply_parallelism`) and
restores the just-completed checkpoint into it, exactly as a restore at the new
parallelism would (keyed state by key-group ranges, operator state even-split / union /
broadcast, sources' splits, watermarks), under a new attempt so no worker reuses an
instance built for the old key-group ranges; the job goes on without stopping.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from streamstate.errors import RescaleError
from streamstate.runtime.graph import ExecutionPlan, Partitioning, Stage

__all__ = [
    "RescaleAtBoundary",
    "RescaleRequest",
    "RescaleRequests",
    "PlanScaler",
    "parallelism_by_uid",
    "rescalable",
    "target_parallelism",
]


@dataclass(frozen=True)
class RescaleRequest:
    """``parallelism``: every rescalable stage (None: unchanged); ``operators``: uid ->
    parallelism of its stage (wins over ``parallelism``). The future holds the applied
    uid -> parallelism, or the reason the job could not rescale."""

    parallelism: int | None
    operators: tuple[tuple[str, int], ...] = ()
    future: concurrent.futures.Future[dict[str, int]] = field(
        default_factory=concurrent.futures.Future, compare=False
    )


class RescaleAtBoundary(Exception):
    """Raised by the epoch loop after the rescale's checkpoint completed; the executor
    applies ``requests`` (in order) and runs the loop again."""

    def __init__(self, requests: list[RescaleRequest]) -> None:
        super().__init__("rescale at the epoch boundary")
        self.requests = requests


class RescaleRequests:
    """Requests waiting for the next boundary; a newer request replaces an older one
    that has not started (its future gets the newer one's result)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[RescaleRequest] = []
        self.closed = False

    def put(self, request: RescaleRequest) -> None:
        with self._lock:
            if self.closed:
                request.future.set_exception(RescaleError("the job is not running"))
                return
            self._waiting.append(request)

    def due(self) -> bool:
        """A rescale waits for its checkpoint."""
        with self._lock:
            return bool(self._waiting)

    def take(self) -> list[RescaleRequest]:
        with self._lock:
            taken, self._waiting = self._waiting, []
            return taken

    def close(self, reason: str) -> None:
        with self._lock:
            self.closed = True
            taken, self._waiting = self._waiting, []
        for r in taken:
            if not r.future.done():
                r.future.set_exception(RescaleError(f"the job did not rescale: {reason}"))


def rescalable(st: Stage) -> bool:
    """Whether a whole-job rescale changes this stage: every stage but a source run by a
    user's SourceFunction (its ``run()`` may not be parallel; name its uid to rescale it)."""
    return not (st.is_source and any(n.factory is not None for n in st.nodes.values()))


def target_parallelism(plan: ExecutionPlan, request: RescaleRequest) -> dict[int, int]:
    """Stage id -> its parallelism after ``request`` (stages it leaves alone too).

    Raises :class:`RescaleError` for an unknown uid, a parallelism outside
    ``1..max parallelism`` or two parallelisms for operators chained in one stage."""
    stage_of = {n.uid: st for st in plan.stages for n in st.nodes.values()}
    out = {st.id: st.parallelism for st in plan.stages}
    if request.parallelism is not None:
        for st in plan.stages:
            if rescalable(st):
                out[st.id] = request.parallelism
    named: dict[int, tuple[str, int]] = {}
    for uid, p in request.operators:
        named_stage = stage_of.get(uid)
        if named_stage is None:
            raise RescaleError(
                f"no operator with uid {uid!r} in this job (its operators: "
                f"{', '.join(sorted(stage_of))}); set .uid(...) on the operator to name it"
            )
        sid = named_stage.id
        if sid in named and named[sid][1] != p:
            raise RescaleError(
                f"operators {named[sid][0]!r} and {uid!r} are chained (one stage) and run "
                f"at one parallelism: ask for the same one, or break the chain "
                f"(start_new_chain / disable_chaining)"
            )
        named[sid] = (uid, p)
        out[sid] = p
    for st in plan.stages:
        p = out[st.id]
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise RescaleError(f"parallelism must be a positive integer, got {p!r}")
        if p > st.max_parallelism:
            raise RescaleError(
                f"parallelism {p} of stage {st.id} ({', '.join(n.uid for n in st.nodes.values())}) "
                f"exceeds its max parallelism {st.max_parallelism}: the max parallelism fixes "
                f"the key groups and cannot change while the job runs; ask for at most "
                f"{st.max_parallelism}, or restart from a savepoint with a larger "
                f"set_max_parallelism()"
            )
    return out


class PlanScaler:
    """Changes a plan's parallelism in place. Remembers which edges were built forward:
    a forward edge between stages of different parallelism becomes a rebalance (as
    build_plan makes it), and forward again when they are equal once more."""

    def __init__(self, plan: ExecutionPlan) -> None:
        self.plan = plan
        self._forward = {
            (st.id, n.tid, i)
            for st in plan.stages
            for n in st.nodes.values()
            for i, e in enumerate(n.edges)
            if e.partitioning is Partitioning.FORWARD
        }

    def apply(self, targets: Mapping[int, int]) -> dict[str, int]:
        """Set every stage's parallelism to ``targets[stage id]``; returns uid ->
        parallelism."""
        plan = self.plan
        for st in plan.stages:
            st.parallelism = targets[st.id]
            for n in st.nodes.values():
                n.parallelism = st.parallelism
        for st in plan.stages:
            for n in st.nodes.values():
                for i, e in enumerate(n.edges):
                    if (st.id, n.tid, i) in self._forward:
                        same = plan.stage(e.dest_stage).parallelism == st.parallelism
                        e.partitioning = Partitioning.FORWARD if same else Partitioning.REBALANCE
        return parallelism_by_uid(plan)


def parallelism_by_uid(plan: ExecutionPlan) -> dict[str, int]:
    return {n.uid: st.parallelism for st in plan.stages for n in st.nodes.values()}
