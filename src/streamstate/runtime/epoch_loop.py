"""The epoch loop: plan an epoch, run it, fold its acks back, complete its checkpoint.

:class:`EpochLoop` is the part of the driver that runs while a job is healthy (Flink's
scheduler and checkpoint triggering); the :class:`~streamstate.runtime.executor.JobExecutor`
around it owns the job's lifecycle, failures and restores. Each epoch is one call of
``runner.run_epoch``; a checkpoint is triggered at an epoch boundary and completes at
the end of the epoch that carries its barrier, or is aborted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from streamstate.common.job_status import JobStatus
from streamstate.runtime.checkpoint.coordinator import PendingCheckpoint
from streamstate.runtime.graph import ExecutionPlan, Stage
from streamstate.runtime.job_state import source_uid
from streamstate.runtime.protocol import SubtaskAck
from streamstate.runtime.replay import PROPERTY as REPLAY_PROPERTY
from streamstate.runtime.rescale import RescaleAtBoundary
from streamstate.runtime.savepoints import SavepointRequests
from streamstate.runtime.sliced_read import reads_in_slices

log = logging.getLogger("streamstate")

if TYPE_CHECKING:
    from streamstate.runtime.executor import JobExecutor

__all__ = ["EpochLoop", "JobCancelled", "acknowledge_checkpoint"]


class JobCancelled(Exception):
    """Raised inside the loop when ``cancel()`` was requested; the job stops at an epoch boundary."""


class EpochLoop:
    """Runs a job's epochs; shares the job's state, metrics, coordinator and committers."""

    def __init__(self, job: JobExecutor) -> None:
        self.job_id = job.job_id
        self.job_name = job.job_name
        self.plan = job.plan
        self.settings = job.settings
        self.clock = job.clock
        self.checkpointing = job.checkpointing
        self.runner = job.runner
        self.storage = job.storage
        self.coordinator = job.coordinator
        self.lifecycle = job.lifecycle
        self.cancel_requested = job.cancel_requested
        self.state = job.state
        self.metrics = job.metrics
        self.committers = job.committers
        self.queryable = job.queryable
        self.history = job.history
        #: an unbounded source may cut an epoch short (runtime/replay.py)
        self.unbounded = any(not st.source.bounded for st in self.plan.sources)
        #: checkpoint notifications for the subtasks, delivered with the next epoch
        self.notifications: list[tuple[str, int]] = []
        self._listeners: bool | None = None
        self.savepoints = SavepointRequests()
        self.rescales = job.rescales
        #: a stop-with-savepoint completed: the loop ends after its epoch
        self.stop_requested = False
        #: sink uid -> the last epoch whose output it committed (runtime/replay.py)
        self.committed_output: dict[str, int] = {}
        #: sink uid -> the last epoch whose non-empty results it prepared
        self._output_epoch: dict[str, int] = {}
        #: sink uid -> replayed epochs up to this one are discarded, not committed (a
        #: fallback past committed output that replays exactly)
        self.discard_through: dict[str, int] = {}

    def run(self) -> None:
        """Run epochs until every bounded source is done (and committed), the epoch limit
        is reached, or a cancel is requested (raises :class:`JobCancelled`)."""
        state = self.state
        while True:
            if self.cancel_requested.is_set():
                if self.lifecycle.status is JobStatus.RUNNING:
                    self.lifecycle.transition(JobStatus.CANCELLING)
                raise JobCancelled()
            now = self.clock()
            for st in self.plan.sources:
                uid = source_uid(st)
                state.source_states[uid] = st.source.discover(state.source_states[uid], now)
            final = state.all_sources_finished()
            if final and (state.end_of_input_sent or not self.plan.needs_end_of_input()):
                if not self.checkpointing:
                    self._commit_all(state.epoch)
                    return
                if state.epoch > 0 and state.committed_epoch >= state.epoch:
                    # the epoch that read the last records ended the input and carried a
                    # checkpoint that completed: no input-free epoch for a final one
                    self._notify_last_checkpoint()
                    return
            if self.settings.max_epochs and state.epoch >= self.settings.max_epochs:
                self._final_checkpoint("execution.epoch.max-epochs reached")
                return
            pending = self._take_savepoint(now)
            if pending is None and self.checkpointing:
                # a rescale restores the checkpoint of its boundary (runtime/rescale.py)
                if final or self.coordinator.should_trigger(now) or self.rescales.due():
                    pending = self.coordinator.trigger(now)
            started = time.monotonic()
            read = self._run_one_epoch(pending, now)
            if self.stop_requested:
                return  # stop-with-savepoint: the savepoint completed, the job ends
            if final:
                self._final_checkpoint("every bounded source is finished")
                self._notify_last_checkpoint()
                return
            latest = self.coordinator.latest_completed
            if (
                pending is not None
                and latest is not None
                and latest.checkpoint_id == pending.checkpoint_id
                and not pending.is_savepoint
                and self.rescales.due()
            ):
                raise RescaleAtBoundary(self.rescales.take())
            interval = self.settings.epoch_interval_s
            if interval > 0 and read < self.full_budget:
                # slow sources: an epoch at most every interval, so epochs do not shrink to
                # a few records each (a full epoch, max-records per source subtask, goes on)
                self.cancel_requested.wait(max(0.0, started + interval - time.monotonic()))
            elif read == 0 and self.settings.idle_wait_s > 0:
                # unbounded sources with nothing new: don't spin Spark jobs back to back
                self.cancel_requested.wait(self.settings.idle_wait_s)

    def _notify_last_checkpoint(self) -> None:
        if self.notifications and self._listens_to_checkpoints():
            # deliver the last checkpoint's notify_checkpoint_complete: one input-free epoch
            self._run_one_epoch(None, self.clock(), notify_only=True)

    @property
    def full_budget(self) -> int:
        """Records an epoch reads when every source subtask fills its budget."""
        return self.settings.epoch_records * sum(st.parallelism for st in self.plan.sources)

    def _take_savepoint(self, now: int) -> PendingCheckpoint | None:
        """A requested savepoint, triggered for the coming epoch (None: none asked for)."""
        request = self.savepoints.take()
        if request is None:
            return None
        pending = self.coordinator.trigger(now, is_savepoint=True, target=request.target)
        self.savepoints.started(pending.checkpoint_id, request)
        return pending

    def _final_checkpoint(self, why: str) -> None:
        """A job that ends commits what it promised: with checkpointing, its last epoch must
        be covered by a completed checkpoint. If the checkpoint of that epoch failed (e.g. it
        expired), input-free epochs carrying a new barrier are run until one completes; each
        failure counts against the tolerable checkpoint failures, beyond which the job fails
        with :class:`CheckpointError` and its uncommitted output is kept for a restore."""
        if not self.checkpointing:
            return
        while self.state.committed_epoch < self.state.epoch:
            if self.cancel_requested.is_set():
                raise JobCancelled()
            log.warning(
                "job %s: %s, but epochs %d..%d are not covered by a completed checkpoint: "
                "taking a final checkpoint",
                self.job_id,
                why,
                self.state.committed_epoch + 1,
                self.state.epoch,
            )
            now = self.clock()
            self._run_one_epoch(self.coordinator.trigger(now), now, notify_only=True, ending=True)

    def _run_one_epoch(
        self,
        pending: PendingCheckpoint | None,
        started_ms: int,
        notify_only: bool = False,
        ending: bool = False,
    ) -> int:
        """Run epoch ``epoch + 1``; returns how many records the sources read.

        ``notify_only``: the sources read nothing (the epoch only delivers notifications).
        """
        t0 = time.perf_counter()
        state = self.state
        epoch = state.epoch + 1
        full = pending is None and (epoch - state.last_full_epoch) >= self.settings.full_every
        finished = {
            st.id: reads_to_end(
                st,
                state.source_states[source_uid(st)],
                notify_only,
                self.settings.epoch_records,
                self.settings.epoch_interval_s > 0,
            )
            for st in self.plan.sources
        }
        savepoint = pending.target if pending is not None and pending.is_savepoint else None
        if self.settings.batch:
            finished = dict.fromkeys(finished, True)  # BATCH: this epoch reads all input
        if savepoint is not None and savepoint.advance_to_end_of_event_time:
            finished = dict.fromkeys(finished, True)  # the final watermark fires every timer
        especs = state.epoch_specs(
            epoch,
            pending.checkpoint_id if pending and savepoint is None else None,
            pending.trigger_ms if pending else started_ms,
            started_ms,
            full,
            notify_only,
            finished,
            tuple(self.notifications),
            savepoint=(pending.checkpoint_id, savepoint) if pending and savepoint else None,
            ending=ending or (savepoint is not None and savepoint.stop),
        )
        delivered = len(self.notifications)
        try:
            acks = self.runner.run_epoch(self.plan, especs)
        except BaseException as e:
            if pending is not None:
                self.coordinator.abort(pending, "the epoch carrying its barrier failed")
                self.notifications.append(("aborted", pending.checkpoint_id))
                self.savepoints.failed(pending.checkpoint_id, f"its epoch failed: {e}")
            raise
        del self.notifications[:delivered]
        by_subtask = self._absorb(epoch, acks, notify_only)
        if finished and all(finished.values()):
            state.end_of_input_sent = True
        if full or (pending is not None and savepoint is None):
            self.coordinator.discard_deferred()  # no version is based on them any more
            state.last_full_epoch = epoch
        state.epoch = epoch
        if pending is not None:
            self._complete_checkpoint(pending, epoch, by_subtask)
        elif not self.checkpointing:
            self._commit_all(epoch)
        stats = self.metrics.epoch_finished(
            epoch,
            state.attempt,
            started_ms,
            (time.perf_counter() - t0) * 1000.0,
            pending.checkpoint_id if pending else None,
            by_subtask.values(),
            [source_uid(st) for st in self.plan.sources],
        )
        self.lifecycle.notify("on_epoch", stats)
        if not notify_only:
            self.history.epoch_read(epoch, stats.source_records, self.full_budget, self.unbounded)
        return stats.source_records

    def _absorb(
        self, epoch: int, acks: Iterable[SubtaskAck], notify_only: bool = False
    ) -> dict[tuple[int, int], SubtaskAck]:
        """Fold the acks into the job state, metrics and sink committers; returns them by
        (stage, subtask)."""
        by, superseded = self.state.absorb(epoch, acks, notify_only)
        # published before the superseded files go, so a lookup moves on to files that exist
        self.queryable.epoch_folded(epoch, self.state.attempt, self.state.versions.keyed, by)
        for a in by.values():
            self.metrics.absorb(a.stage, a)
        for st in self.plan.stages:
            for n in st.nodes.values():
                if n.uid in self.committers:
                    results = [by[(st.id, i)].sinks.get(n.uid) for i in range(st.parallelism)]
                    committer = self.committers[n.uid]
                    committer.prepare(epoch, results)
                    if epoch <= self.discard_through.get(n.uid, 0):
                        committer.abort(epoch - 1)  # committed before the fallback
                    elif any(results):
                        self._output_epoch[n.uid] = epoch
        if superseded:
            self.storage.discard_epoch_state(superseded)
        return by

    def _complete_checkpoint(
        self,
        pending: PendingCheckpoint,
        epoch: int,
        acks: dict[tuple[int, int], SubtaskAck],
    ) -> None:
        now = self.clock()
        errors = [a.savepoint_error for a in acks.values() if a.savepoint_error]
        if pending.is_savepoint and errors:
            self.coordinator.abort(
                pending, "its files could not be written", count_as_failure=False, now_ms=now
            )
            self.notifications.append(("aborted", pending.checkpoint_id))
            self.savepoints.failed(pending.checkpoint_id, "; ".join(sorted(errors)))
            if not self.checkpointing:
                self._commit_all(epoch)  # the epoch's output does not wait for a savepoint
            return
        if self.coordinator.is_expired(pending, now):
            self.notifications.append(("aborted", pending.checkpoint_id))
            if pending.is_savepoint:
                self.savepoints.failed(pending.checkpoint_id, "its timeout expired")
            self.state.last_full_epoch = -(10**9)  # the next epoch writes full versions
            self.metrics.bump("checkpoints_failed")
            self.coordinator.expire(pending, now, (self.state.committed_epoch + 1, epoch))
            return
        acknowledge_checkpoint(pending, self.plan, acks)
        self.coordinator.complete(
            pending,
            job_id=self.job_id,
            source_offsets=self.state.source_offsets(),
            sink_state={uid: c.snapshot(epoch) for uid, c in self.committers.items()},
            properties={
                "epoch": epoch,
                "attempt": self.state.attempt,
                "job_name": self.job_name,
                "watermarks": self.state.watermark_property(),
                "queryable": self.queryable.registrations(),
                REPLAY_PROPERTY: self.history.to_property(),
            },
            now_ms=now,
        )
        self.notifications.append(("complete", pending.checkpoint_id))
        if not pending.is_savepoint:
            self.queryable.checkpoint_completed(self.coordinator.latest_completed, self.state)
        self.metrics.bump("savepoints" if pending.is_savepoint else "checkpoints")
        self.state.committed_epoch = epoch
        self._commit_all(epoch)
        request = self.savepoints.completed(pending.checkpoint_id)
        if request is not None and request.target.stop:
            self.stop_requested = True

    def _listens_to_checkpoints(self) -> bool:
        """Whether any operator wants checkpoint notifications (built here, never opened)."""
        if self._listeners is None:
            self._listeners = self.plan.listens_to_checkpoints()
        return self._listeners

    def _commit_all(self, epoch: int) -> None:
        for uid, c in self.committers.items():
            c.commit(epoch)
            if uid in self._output_epoch:
                self.committed_output[uid] = self._output_epoch[uid]


def acknowledge_checkpoint(
    pending: PendingCheckpoint, plan: ExecutionPlan, acks: dict[tuple[int, int], SubtaskAck]
) -> None:
    """Every subtask of every operator that has checkpoint state acknowledges it (with
    empty state where that subtask has none), so the coordinator can check that none is
    missing."""
    stateful = {uid for a in acks.values() for uid in (*a.checkpoint, *a.op_checkpoint)}
    for st in plan.stages:
        for n in st.nodes.values():
            if n.uid not in stateful:
                continue
            for i in range(st.parallelism):
                a = acks[(st.id, i)]
                kh = a.checkpoint.get(n.uid)
                oh = a.op_checkpoint.get(n.uid)
                pending.acknowledge(
                    n.uid,
                    i,
                    st.parallelism,
                    st.max_parallelism,
                    keyed=(kh,) if kh is not None else (),
                    operator=(oh,) if oh is not None else (),
                )


def reads_to_end(
    st: Stage, source_state: Any, notify_only: bool, budget: int, cut_by_time: bool = False
) -> bool:
    """The source is exhausted, or an epoch with ``budget`` records per reader reads all
    it has left: that epoch ends with its final watermark (timers then fire with the
    state of the same epoch, as in Flink, where a small bounded job ends milliseconds
    after its last record). ``cut_by_time``: epochs are cut by ``execution.epoch.interval``,
    so only an exhausted source counts (a reader that reads in slices may stop before the
    end; the final watermark then comes with the next, input-free epoch)."""
    if st.source.is_finished(source_state):
        return True
    if notify_only or (cut_by_time and reads_in_slices(st.source, st.parallelism)):
        return False
    return bool(st.source.finishes_within(source_state, st.parallelism, budget))
