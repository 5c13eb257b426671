"""The autoscaler's one seam into a running job (``job.autoscaler.enabled``).

:class:`AutoscalingObserver` is a :class:`~streamstate.runtime.job_status.JobObserver`
the executor adds when the autoscaler is on: after every epoch it turns the epoch's
statistics into an :class:`~streamstate.runtime.autoscaler.EpochSample` (per stage: its
parallelism, records in, busy seconds; per source stage its backlog when the source can
tell, :class:`BacklogReporting`), asks the :class:`~streamstate.runtime.autoscaler.Autoscaler`
and, for a decision, records it in the job's metrics (REST ``/jobs/<id>`` under
``autoscaler``, the dashboard) and applies it as a rescale in place of the operators it
names. It then asks the runner for executors to match (:class:`ExecutorRequests`; the
Spark runner implements it: more when the plan grows, fewer when it shrinks) and
records the answer with the decision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from streamstate.errors import RescaleError
from streamstate.runtime.autoscaler import Autoscaler, EpochSample, StageSample
from streamstate.runtime.job_state import source_uid
from streamstate.runtime.job_status import EpochStats, JobObserver
from streamstate.runtime.rescale import rescalable

__all__ = ["AutoscalingObserver", "BacklogReporting", "ExecutorRequests", "subtasks_at_once"]

log = logging.getLogger("streamstate")


@runtime_checkable
class BacklogReporting(Protocol):
    """A source that knows how many records are available but not read yet."""

    def backlog(self, enumerator_state: Any, now_ms: int) -> int | None: ...


@runtime_checkable
class ExecutorRequests(Protocol):
    """A runner that can ask its cluster manager for executors."""

    def request_executors(self, subtasks: int, before: int) -> str:
        """Executors to run ``subtasks`` tasks at once, the plan having had ``before``:
        more asked for when it grows, the surplus released when it shrinks; returns what
        happened, in words (asked, released, left to dynamic allocation, not possible)."""
        ...


def subtasks_at_once(stages: Iterable[Any], parallelism: Callable[[Any], int]) -> int:
    """The most subtasks of one epoch that run at the same time, with each stage at
    ``parallelism(stage)``: a stage behind a shuffle starts when its inputs are done, so
    the stages of a chain run one after another, while the source stages have no inputs
    and start together. The executors an epoch needs are for the larger of the source
    stages together and the widest other stage (not the sum over every stage)."""
    sources = others = 0
    for st in stages:
        if st.is_source:
            sources += parallelism(st)
        else:
            others = max(others, parallelism(st))
    return max(1, sources, others)


class AutoscalingObserver(JobObserver):
    """Feeds the autoscaler after every epoch and applies its decisions (see the module)."""

    def __init__(self, executor: Any, settings: Any) -> None:
        #: the job's executor: its rescale() and, once built, its parts
        self.executor = executor
        self.scaler = Autoscaler(settings.autoscaler, settings.clock())
        self._last_end_ms: int | None = None
        self._rescales_seen = 0

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        job = self.executor.parts
        now = job.clock()
        rescales = job.metrics.stats.get("rescales", 0)
        if rescales != self._rescales_seen:  # any rescale, ours or asked for
            self._rescales_seen = rescales
            self.scaler.rescaled(now)
        start = self._last_end_ms if self._last_end_ms is not None else stats.start_ms
        self._last_end_ms = now
        self.scaler.observe(EpochSample(now, max(0.0, (now - start) / 1000), self._stages(stats)))
        decision = self.scaler.evaluate(now)
        if decision is None:
            return
        note = ""
        if decision.applied and not job.rescales.due():
            try:
                self.executor.rescale(operators=decision.operators())
            except RescaleError as e:
                note = f"not applied: {e}"
            else:
                if isinstance(job.runner, ExecutorRequests):
                    # the plan still has the old parallelisms: the rescale applies at the
                    # next epoch boundary
                    wanted = decision.operators()
                    before = subtasks_at_once(job.plan.stages, lambda st: st.parallelism)
                    subtasks = subtasks_at_once(
                        job.plan.stages,
                        lambda st: wanted.get(st.nodes[st.heads[0]].uid, st.parallelism),
                    )
                    note = job.runner.request_executors(subtasks, before)
        self.scaler.rescaled(now)  # measure again once the change applied
        job.metrics.record_scaling(decision, note)
        for v in decision.vertices:
            log.info("job %s autoscaler: %s: %s", job_id, v.uid, v.reason)

    def _stages(self, stats: EpochStats) -> dict[int, StageSample]:
        ex = self.executor.parts
        busy = {s.stage: s.restore_s + s.process_s + s.commit_s for s in stats.stages}
        out = {}
        for st in ex.plan.stages:
            head = st.nodes[st.heads[0]].uid
            uids = (head, *(n.uid for n in st.nodes.values() if n.uid != head))
            backlog = None
            if st.is_source and isinstance(st.source, BacklogReporting):
                state = ex.state.source_states.get(source_uid(st))
                backlog = st.source.backlog(state, ex.clock())
            records = stats.records.get(head, 0)
            if st.is_source and not records:
                records = stats.source_records
            out[st.id] = StageSample(
                st.parallelism,
                uids,
                st.max_parallelism,
                records,
                busy.get(st.id, 0.0),
                st.is_source,
                backlog,
                rescalable(st),
            )
        return out
