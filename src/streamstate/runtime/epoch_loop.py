"""The epoch loop: plan an epoch, run it, fold its acks back, act on its checkpoint.

:class:`EpochLoop` is the part of the driver that runs while a job is healthy (Flink's
scheduler); the :class:`~streamstate.runtime.executor.JobExecutor` around it owns the
job's lifecycle, failures and restores; both work on the job's
:class:`~streamstate.runtime.job_parts.JobParts`. Each epoch is one call of
``runner.run_epoch``. The checkpoint coordinator decides every checkpoint's fate: the loop
asks it whether one is due at an epoch boundary, runs the epoch with its barrier, and acts
on its :class:`~streamstate.runtime.checkpoint.coordinator.CheckpointVerdict`
(notifications, savepoint requests, committing the sinks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from streamstate.common.job_status import JobStatus
from streamstate.runtime.checkpoint.coordinator import (
    CheckpointContents,
    CheckpointVerdict,
    PendingCheckpoint,
)
from streamstate.runtime.graph import Stage
from streamstate.runtime.job_parts import JobParts
from streamstate.runtime.job_state import source_uid
from streamstate.runtime.protocol import SubtaskAck
from streamstate.runtime.replay import PROPERTY as REPLAY_PROPERTY
from streamstate.runtime.rescale import RescaleAtBoundary
from streamstate.runtime.savepoints import SavepointRequests
from streamstate.runtime.sliced_read import reads_in_slices

log = logging.getLogger("streamstate")

__all__ = ["EpochLoop", "JobCancelled"]


class JobCancelled(Exception):
    """Raised inside the loop when ``cancel()`` was requested; the job stops at an epoch boundary."""


@dataclass(frozen=True)
class EpochRun:
    """What one epoch did: how many records its sources read, and what became of the
    checkpoint it carried (None: it carried none)."""

    records_read: int
    checkpoint: CheckpointVerdict | None = None


class EpochLoop:
    """Runs a job's epochs on the job's parts (state, metrics, coordinator, committers)."""

    def __init__(self, parts: JobParts) -> None:
        self.parts = parts
        #: an unbounded source may cut an epoch short (runtime/replay.py)
        self.unbounded = any(not st.source.bounded for st in parts.plan.sources)
        #: checkpoint notifications for the subtasks, delivered with the next epoch
        self.notifications: list[tuple[str, int]] = []
        self._listeners: bool | None = None
        self.savepoints = SavepointRequests()
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
        job = self.parts
        state = job.state
        while True:
            if job.cancel_requested.is_set():
                if job.lifecycle.status is JobStatus.RUNNING:
                    job.lifecycle.transition(JobStatus.CANCELLING)
                raise JobCancelled()
            now = job.clock()
            for st in job.plan.sources:
                uid = source_uid(st)
                state.source_states[uid] = st.source.discover(state.source_states[uid], now)
            final = state.all_sources_finished()
            if final and (state.end_of_input_sent or not job.plan.needs_end_of_input()):
                if not job.checkpointing:
                    self._commit_all(state.epoch)
                    return
                if state.epoch > 0 and state.committed_epoch >= state.epoch:
                    # the epoch that read the last records ended the input and carried a
                    # checkpoint that completed: no input-free epoch for a final one
                    self._notify_last_checkpoint()
                    return
            if job.settings.max_epochs and state.epoch >= job.settings.max_epochs:
                self._final_checkpoint("execution.epoch.max-epochs reached")
                return
            pending = self._take_savepoint(now)
            finishing = self._sources_finishing(pending, False)
            if pending is None and job.checkpointing:
                # a rescale restores the checkpoint of its boundary (runtime/rescale.py)
                if (
                    final
                    or job.coordinator.should_trigger(now)
                    or job.rescales.due()
                    or (not self.unbounded and all(finishing.values()))
                ):
                    # the epoch that reads the last records carries the final checkpoint:
                    # a bounded job then ends with it, no input-free epoch for one
                    pending = job.coordinator.trigger(now)
            started = time.monotonic()
            ran = self._run_one_epoch(pending, now, finishing=finishing)
            if self.stop_requested:
                return  # stop-with-savepoint: the savepoint completed, the job ends
            if final:
                self._final_checkpoint("every bounded source is finished")
                self._notify_last_checkpoint()
                return
            verdict = ran.checkpoint
            if (
                verdict is not None
                and verdict.completed
                and not verdict.is_savepoint
                and job.rescales.due()
            ):
                raise RescaleAtBoundary(job.rescales.take())
            interval = job.settings.epoch_interval_s
            if interval > 0 and ran.records_read < self.full_budget:
                # slow sources: an epoch at most every interval, so epochs do not shrink to
                # a few records each (a full epoch, max-records per source subtask, goes on)
                job.cancel_requested.wait(max(0.0, started + interval - time.monotonic()))
            elif ran.records_read == 0 and job.settings.idle_wait_s > 0:
                # unbounded sources with nothing new: don't spin Spark jobs back to back
                job.cancel_requested.wait(job.settings.idle_wait_s)

    def _notify_last_checkpoint(self) -> None:
        if self.notifications and self._listens_to_checkpoints():
            # deliver the last checkpoint's notify_checkpoint_complete: one input-free epoch
            self._run_one_epoch(None, self.parts.clock(), notify_only=True)

    @property
    def full_budget(self) -> int:
        """Records an epoch reads when every source subtask fills its budget."""
        sources = self.parts.plan.sources
        return self.parts.settings.epoch_records * sum(st.parallelism for st in sources)

    def _take_savepoint(self, now: int) -> PendingCheckpoint | None:
        """A requested savepoint, triggered for the coming epoch (None: none asked for)."""
        request = self.savepoints.take()
        if request is None:
            return None
        pending = self.parts.coordinator.trigger(now, is_savepoint=True, target=request.target)
        self.savepoints.started(pending.checkpoint_id, request)
        return pending

    def _final_checkpoint(self, why: str) -> None:
        """A job that ends commits what it promised: with checkpointing, its last epoch must
        be covered by a completed checkpoint. If the checkpoint of that epoch failed (e.g. it
        expired), input-free epochs carrying a new barrier are run until one completes; each
        failure counts against the tolerable checkpoint failures, beyond which the job fails
        with :class:`CheckpointError` and its uncommitted output is kept for a restore."""
        job = self.parts
        if not job.checkpointing:
            return
        while job.state.committed_epoch < job.state.epoch:
            if job.cancel_requested.is_set():
                raise JobCancelled()
            log.warning(
                "job %s: %s, but epochs %d..%d are not covered by a completed checkpoint: "
                "taking a final checkpoint",
                job.job_id,
                why,
                job.state.committed_epoch + 1,
                job.state.epoch,
            )
            now = job.clock()
            self._run_one_epoch(job.coordinator.trigger(now), now, notify_only=True, ending=True)

    def _run_one_epoch(
        self,
        pending: PendingCheckpoint | None,
        started_ms: int,
        notify_only: bool = False,
        ending: bool = False,
        finishing: dict[int, bool] | None = None,
    ) -> EpochRun:
        """Run epoch ``epoch + 1`` (with ``pending``'s barrier, if any).

        ``notify_only``: the sources read nothing (the epoch only delivers notifications).
        ``finishing``: :meth:`_sources_finishing` of this epoch, when the caller has it.
        """
        t0 = time.perf_counter()
        job = self.parts
        state = job.state
        epoch = state.epoch + 1
        full = pending is None and (epoch - state.last_full_epoch) >= job.settings.full_every
        finished = finishing
        if finished is None:
            finished = self._sources_finishing(pending, notify_only)
        savepoint = pending.target if pending is not None and pending.is_savepoint else None
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
            acks = job.runner.run_epoch(job.plan, especs)
        except BaseException as e:
            if pending is not None:
                job.coordinator.abort(pending, "the epoch carrying its barrier failed")
                self.notifications.append(("aborted", pending.checkpoint_id))
                self.savepoints.failed(pending.checkpoint_id, f"its epoch failed: {e}")
            raise
        del self.notifications[:delivered]
        by_subtask = self._absorb(epoch, acks, notify_only)
        if finished and all(finished.values()):
            state.end_of_input_sent = True
        if full or (pending is not None and savepoint is None):
            job.coordinator.discard_deferred()  # no version is based on them any more
            state.last_full_epoch = epoch
        state.epoch = epoch
        verdict = None
        if pending is not None:
            verdict = self._conclude_checkpoint(pending, epoch, by_subtask)
        elif not job.checkpointing:
            self._commit_all(epoch)
        stats = job.metrics.epoch_finished(
            epoch,
            state.attempt,
            started_ms,
            (time.perf_counter() - t0) * 1000.0,
            pending.checkpoint_id if pending else None,
            by_subtask.values(),
            [source_uid(st) for st in job.plan.sources],
        )
        job.lifecycle.notify("on_epoch", stats)
        if not notify_only:
            job.history.epoch_read(epoch, stats.source_records, self.full_budget, self.unbounded)
        return EpochRun(stats.source_records, verdict)

    def _sources_finishing(
        self, pending: PendingCheckpoint | None, notify_only: bool
    ) -> dict[int, bool]:
        """Source stage id -> whether the coming epoch reads that source to its end."""
        job = self.parts
        if job.settings.batch:
            return {st.id: True for st in job.plan.sources}  # BATCH: one epoch reads all
        savepoint = pending.target if pending is not None and pending.is_savepoint else None
        if savepoint is not None and savepoint.advance_to_end_of_event_time:
            return {st.id: True for st in job.plan.sources}  # the final watermark fires all
        return {
            st.id: reads_to_end(
                st,
                job.state.source_states[source_uid(st)],
                notify_only,
                job.settings.epoch_records,
                job.settings.epoch_interval_s > 0,
            )
            for st in job.plan.sources
        }

    def _absorb(
        self, epoch: int, acks: Iterable[SubtaskAck], notify_only: bool = False
    ) -> dict[tuple[int, int], SubtaskAck]:
        """Fold the acks into the job state, metrics and sink committers; returns them by
        (stage, subtask)."""
        job = self.parts
        by, superseded = job.state.absorb(epoch, acks, notify_only)
        # before the superseded files go (a feature may still read them until it moved on)
        job.features.epoch_completed(epoch, job.state, by)
        for a in by.values():
            job.metrics.absorb(a.stage, a)
        for st in job.plan.stages:
            for n in st.nodes.values():
                if n.uid in job.committers:
                    results = [by[(st.id, i)].sinks.get(n.uid) for i in range(st.parallelism)]
                    committer = job.committers[n.uid]
                    committer.prepare(epoch, results)
                    if epoch <= self.discard_through.get(n.uid, 0):
                        committer.abort(epoch - 1)  # committed before the fallback
                    elif any(results):
                        self._output_epoch[n.uid] = epoch
        if superseded:
            job.storage.discard_epoch_state(superseded)
        return by

    def _conclude_checkpoint(
        self,
        pending: PendingCheckpoint,
        epoch: int,
        acks: dict[tuple[int, int], SubtaskAck],
    ) -> CheckpointVerdict:
        """Ask the coordinator what became of ``pending``, and act on its verdict."""
        job = self.parts
        verdict = job.coordinator.conclude(
            pending,
            job.plan,
            acks,
            lambda: self._checkpoint_contents(epoch),
            job_id=job.job_id,
            uncommitted=(job.state.committed_epoch + 1, epoch),
            now_ms=job.clock(),
        )
        checkpoint_id = verdict.checkpoint_id
        if not verdict.completed:
            self.notifications.append(("aborted", checkpoint_id))
            if verdict.is_savepoint:
                self.savepoints.failed(checkpoint_id, verdict.failure or "")
            if verdict.expired:
                job.state.last_full_epoch = -(10**9)  # its files were bases: write full ones
                job.metrics.bump("checkpoints_failed")
            elif not job.checkpointing:
                self._commit_all(epoch)  # the epoch's output does not wait for a savepoint
            if verdict.job_failure is not None:
                raise verdict.job_failure
            return verdict
        self.notifications.append(("complete", checkpoint_id))
        if not verdict.is_savepoint and verdict.metadata is not None:  # completed: it has one
            job.features.checkpoint_completed(verdict.metadata, job.state)
        job.metrics.bump("savepoints" if verdict.is_savepoint else "checkpoints")
        job.state.committed_epoch = epoch
        self._commit_all(epoch)
        request = self.savepoints.completed(checkpoint_id)
        if request is not None and request.target.stop:
            self.stop_requested = True
        return verdict

    def _checkpoint_contents(self, epoch: int) -> CheckpointContents:
        """What the checkpoint of ``epoch`` stores besides operator state."""
        job = self.parts
        return CheckpointContents(
            source_offsets=job.state.source_offsets(),
            sink_state={uid: c.snapshot(epoch) for uid, c in job.committers.items()},
            properties={
                "epoch": epoch,
                "attempt": job.state.attempt,
                "job_name": job.job_name,
                "watermarks": job.state.watermark_property(),
                **job.features.checkpoint_properties(),
                REPLAY_PROPERTY: job.history.to_property(),
            },
        )

    def _listens_to_checkpoints(self) -> bool:
        """Whether any operator wants checkpoint notifications (built here, never opened)."""
        if self._listeners is None:
            self._listeners = self.parts.plan.listens_to_checkpoints()
        return self._listeners

    def _commit_all(self, epoch: int) -> None:
        for uid, c in self.parts.committers.items():
            c.commit(epoch)
            if uid in self._output_epoch:
                self.committed_output[uid] = self._output_epoch[uid]


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
