"""The driver: the epoch loop, checkpoint barriers, recovery (Flink's JobManager role).

One :class:`JobExecutor` runs one job. Each epoch it plans the source slices, asks the
:class:`EpochRunner` (Spark, or in-process for tests) to run every stage once, and folds
the :class:`~streamstate.runtime.protocol.SubtaskAck` s back: source positions, state
versions, sink results, counters. When the coordinator says a checkpoint is due, the epoch
runs with a barrier: every stateful subtask writes a snapshot and acknowledges it to the
:class:`~streamstate.runtime.checkpoint.coordinator.CheckpointCoordinator`, which stores
``_metadata``; only then are sinks committed. On a failure the restart strategy decides;
a restart restores the latest valid checkpoint (state, source positions, pending sink
commits) and replays from there.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

import cloudpickle

from streamstate.common.job_execution_result import JobExecutionResult
from streamstate.common.job_status import JobStatus
from streamstate.errors import (
    CheckpointError,
    CorruptCheckpointError,
    JobExecutionError,
    TaskFailure,
)
from streamstate.runtime.checkpoint.coordinator import CheckpointCoordinator, PendingCheckpoint
from streamstate.runtime.checkpoint.metadata import CheckpointMetadata
from streamstate.runtime.checkpoint.storage import CheckpointStorageAccess
from streamstate.runtime.graph import ExecutionPlan, Stage
from streamstate.runtime.job_metrics import JobMetrics
from streamstate.runtime.job_state import JobState, source_uid
from streamstate.runtime.job_status import FailureInfo, JobLifecycle, JobObserver
from streamstate.runtime.protocol import EpochSpec, StageTaskSpec, SubtaskAck, SubtaskSpec
from streamstate.runtime.restart import RestartStrategy
from streamstate.runtime.settings import JobSettings

__all__ = ["EpochRunner", "JobCancelled", "JobExecutor", "build_task_specs"]

log = logging.getLogger("streamstate")


class JobCancelled(Exception):
    """Raised inside the loop when ``cancel()`` was requested; the job stops at an epoch boundary."""


class EpochRunner(ABC):
    """Runs every stage of a plan once per epoch and returns all acks."""

    @abstractmethod
    def start(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None: ...

    @abstractmethod
    def run_epoch(
        self, plan: ExecutionPlan, epoch_specs: dict[int, EpochSpec]
    ) -> list[SubtaskAck]: ...

    @abstractmethod
    def stop(self) -> None: ...

    def describe(self) -> str:
        return type(self).__name__


class JobExecutor:
    """Runs one job to its end; ``cancel()`` may be called from another thread."""

    def __init__(
        self,
        plan: ExecutionPlan,
        settings: JobSettings,
        storage: CheckpointStorageAccess,
        restart: RestartStrategy,
        runner: EpochRunner,
        observers: Sequence[JobObserver] = (),
    ) -> None:
        self.plan = plan
        self.settings = settings
        self.job_name = settings.job_name
        self.clock = settings.clock
        self.runner = runner
        self.restart = restart
        self.job_id = uuid.uuid4().hex[:16]
        self.checkpointing = settings.checkpoint.enabled
        self.storage = storage
        self.storage.initialize_job(self.job_id)
        self.coordinator = CheckpointCoordinator.from_settings(
            settings.checkpoint, storage, clock=settings.clock
        )
        self.lifecycle = JobLifecycle(self.job_id, settings.clock, tuple(observers))
        self.cancel_requested = threading.Event()
        self.state = JobState(plan)
        self.metrics = JobMetrics()
        #: sink operator uid -> its driver-side committer
        self.committers: dict[str, Any] = {}
        #: checkpoint notifications for the subtasks, delivered with the next epoch
        self.notifications: list[tuple[str, int]] = []
        self._listeners: bool | None = None
        self.restored_from: str | None = None
        #: ids of aborted checkpoints whose files are still state-version bases
        self._deferred_discard: list[int] = []

    # -- public view ------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The last epoch that ran to completion."""
        return self.state.epoch

    @property
    def status(self) -> JobStatus:
        return self.lifecycle.status

    def cancel(self) -> None:
        """Stop at the next epoch boundary (the retention policy of checkpoints applies)."""
        self.cancel_requested.set()

    # -- setup and restore ------------------------------------------------------------------
    def _make_committers(self) -> None:
        exactly_once = self.settings.checkpoint.exactly_once or not self.checkpointing
        for st in self.plan.stages:
            for n in st.nodes.values():
                if n.committer_factory is not None:
                    self.committers[n.uid] = n.committer_factory(exactly_once)

    def _restore(self, md: CheckpointMetadata, path: str | None) -> None:
        self.state.restore(md)
        for uid, c in self.committers.items():
            c.abort(self.state.epoch)
            c.restore(md.sink_state.get(uid))
        self.coordinator.stats.reported_restored(
            md.checkpoint_id, path or "", self.clock(), md.is_savepoint
        )

    def _initial_restore(self) -> None:
        self.state.reset()
        path = self.settings.recovery_path
        if not path:
            return
        try:
            md = self.storage.load_metadata(path, verify=True)
        except FileNotFoundError as e:
            raise CorruptCheckpointError(f"no checkpoint at {path}: {e}") from e
        self._restore(md, path)
        self.restored_from = path
        log.info("job %s restored from %s (epoch %d)", self.job_id, path, self.state.epoch)

    def _recover_after_failure(self) -> None:
        self.state.attempt += 1
        # newest checkpoint that loads and verifies: a corrupt latest one falls back to an older one
        md = self.storage.latest_valid_checkpoint() if self.metrics.stats["checkpoints"] else None
        path = None if md is None else self.storage.checkpoint_location(md.checkpoint_id)
        if md is None and self.restored_from:
            md, path = self.storage.load_metadata(self.restored_from, verify=True), self.restored_from
        self.state.reset()
        if md is not None:
            self._restore(md, path)
        else:
            for c in self.committers.values():
                c.abort(0)
        log.warning(
            "job %s restarting (attempt %d) from %s",
            self.job_id,
            self.state.attempt,
            f"checkpoint {md.checkpoint_id}" if md else "the beginning",
        )

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> JobExecutionResult:
        t0 = time.time()
        self._make_committers()
        try:
            self._initial_restore()
        except BaseException:
            self.lifecycle.transition(JobStatus.FAILED)
            raise
        self.runner.start(self.job_id, self.plan, build_task_specs(self.plan, self.job_id, self.storage, self.settings))
        self.lifecycle.transition(JobStatus.RUNNING)
        cancelled = False
        try:
            while True:
                try:
                    self._run_epochs()
                    break
                except (JobCancelled, KeyboardInterrupt):
                    cancelled = True
                    log.warning("job %s cancelled at epoch %d", self.job_id, self.state.epoch)
                    break
                except Exception as e:  # noqa: BLE001 - every failure goes to the restart strategy
                    self._on_failure(e)
        finally:
            self.runner.stop()
        self.coordinator.on_job_terminal(cancelled=cancelled)
        for c in self.committers.values():
            c.finish()
        self._cleanup_epoch_versions()
        if cancelled:
            if self.lifecycle.status is not JobStatus.CANCELLING:
                self.lifecycle.transition(JobStatus.CANCELLING)
            self.lifecycle.transition(JobStatus.CANCELED)
        else:
            self.lifecycle.transition(JobStatus.FINISHED)
        latest = self.coordinator.latest_completed
        acc = self.metrics.accumulators(
            self.job_id,
            self.storage.checkpoint_location(latest.checkpoint_id) if latest is not None else None,
        )
        return JobExecutionResult(self.job_id, int((time.time() - t0) * 1000), acc)

    def _on_failure(self, e: Exception) -> None:
        """Restart (after the back-off) or fail the job with JobExecutionError."""
        self.metrics.bump("epochs_failed")
        self.restart.notify_failure()
        will_restart = self.restart.can_restart()
        failure = FailureInfo(
            self.clock(),
            self.state.epoch + 1,
            self.state.attempt,
            getattr(e, "error_type", type(e).__name__),
            str(e).split("\n\nworker traceback:", 1)[0],
            e.remote_traceback if isinstance(e, TaskFailure) else "",
            will_restart,
        )
        self.metrics.failures.append(failure)
        self.lifecycle.notify("on_failure", failure)
        if not will_restart:
            self.lifecycle.transition(JobStatus.FAILING)
            self._terminate_failed()
            self.lifecycle.transition(JobStatus.FAILED)
            raise JobExecutionError(
                f"job {self.job_name!r} ({self.job_id}) failed and the restart strategy "
                f"({self.restart.describe()}) allows no further attempt: {e}"
            ) from e
        log.warning("epoch %d failed: %s", self.state.epoch + 1, _first_line(e))
        self.lifecycle.transition(JobStatus.RESTARTING)
        self.cancel_requested.wait(self.restart.get_backoff_time_ms() / 1000.0)
        self.metrics.bump("restarts")
        self._recover_after_failure()
        self.lifecycle.transition(JobStatus.RUNNING)

    def _terminate_failed(self) -> None:
        try:
            self.runner.stop()
            self.coordinator.on_job_terminal(cancelled=False, failed=True)
            self._cleanup_epoch_versions()
        except Exception as e:  # noqa: BLE001 - the job failure is what the caller must see
            log.warning("cleanup after job failure failed: %s", e)

    def _has_listeners(self) -> bool:
        """Whether any operator wants checkpoint notifications (built here, never opened)."""
        if self._listeners is None:
            self._listeners = any(
                n.factory().listens_to_checkpoints()
                for st in self.plan.stages
                for n in st.nodes.values()
                if n.factory is not None
            )
        return self._listeners

    def _run_epochs(self) -> None:
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
            if (
                final
                and not self.checkpointing
                and (state.end_of_input_sent or not self._needs_final_watermark())
            ):
                self._commit_all(state.epoch)
                return
            if self.settings.max_epochs and state.epoch >= self.settings.max_epochs:
                return
            pending = None
            if self.checkpointing and (final or self.coordinator.should_trigger(now)):
                pending = self.coordinator.trigger(now)
            read = self._run_one_epoch(pending, now)
            if final:
                if self.notifications and self._has_listeners():
                    # deliver the last checkpoint's notify_checkpoint_complete: one input-free epoch
                    self._run_one_epoch(None, self.clock(), notify_only=True)
                return
            if read == 0 and self.settings.idle_wait_s > 0:
                # unbounded sources with nothing new: don't spin Spark jobs back to back
                self.cancel_requested.wait(self.settings.idle_wait_s)

    def _needs_final_watermark(self) -> bool:
        """Keyed operators may hold event-time timers/windows: a bounded job without
        checkpointing runs one more (empty) epoch to send them the final watermark."""
        return any(n.keyed for st in self.plan.stages for n in st.nodes.values())

    def _epoch_specs(
        self, epoch: int, pending: PendingCheckpoint | None, started_ms: int, full: bool,
        notify_only: bool, finished: dict[int, bool],
    ) -> dict[int, EpochSpec]:
        state = self.state
        notes = tuple(self.notifications)
        especs: dict[int, EpochSpec] = {}
        for st in self.plan.stages:
            assignments = (
                st.source.plan_epoch(state.source_states[source_uid(st)], st.parallelism)
                if st.is_source and not notify_only
                else [None] * st.parallelism
            )
            op_uids = [n.uid for n in st.nodes.values()]
            subs = tuple(
                SubtaskSpec(
                    assignments[i],
                    state.versions.keyed_for(st.keyed_uids, i),
                    state.wm_states.get((st.id, i), {}),
                    state.versions.operator_for(op_uids, i),
                )
                for i in range(st.parallelism)
            )
            especs[st.id] = EpochSpec(
                epoch,
                state.attempt,
                pending.checkpoint_id if pending else None,
                full,
                subs,
                processing_time_ms=started_ms,
                end_of_input=finished.get(st.id, False),
                timestamp_ms=pending.trigger_ms if pending else started_ms,
                notifications=notes,
                notify_only=notify_only,
            )
        return especs

    def _run_one_epoch(
        self, pending: PendingCheckpoint | None, started_ms: int, notify_only: bool = False
    ) -> int:
        """Run epoch ``epoch + 1``; returns how many records the sources read.

        ``notify_only``: the sources read nothing (the epoch only delivers notifications).
        """
        t0 = time.perf_counter()
        state = self.state
        epoch = state.epoch + 1
        full = pending is None and (epoch - state.last_full_epoch) >= self.settings.full_every
        finished = {
            st.id: st.source.is_finished(state.source_states[source_uid(st)])
            for st in self.plan.sources
        }
        especs = self._epoch_specs(epoch, pending, started_ms, full, notify_only, finished)
        delivered = len(self.notifications)
        try:
            acks = self.runner.run_epoch(self.plan, especs)
        except BaseException:
            if pending is not None:
                self.coordinator.abort(pending, "the epoch carrying its barrier failed")
                self.notifications.append(("aborted", pending.checkpoint_id))
            raise
        del self.notifications[:delivered]
        by_subtask = self._absorb(epoch, acks, notify_only)
        if finished and all(finished.values()):
            state.end_of_input_sent = True
        for cid in self._deferred_discard:
            if not (full or pending is not None):
                break
            self.storage.discard_checkpoint(cid)
        if full or pending is not None:
            self._deferred_discard = []
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
        return stats.source_records

    def _absorb(
        self, epoch: int, acks: Iterable[SubtaskAck], notify_only: bool = False
    ) -> dict[tuple[int, int], SubtaskAck]:
        """Check that every subtask acked, then fold the acks in; returns them by (stage, subtask)."""
        by = {(a.stage, a.subtask): a for a in acks}
        missing = [
            (st.id, i)
            for st in self.plan.stages
            for i in range(st.parallelism)
            if (st.id, i) not in by
        ]
        if missing:
            raise CheckpointError(f"epoch {epoch}: no ack from (stage, subtask) {missing}")
        state = self.state
        superseded: list[Any] = []
        for st in self.plan.stages:
            sacks = [by[(st.id, i)] for i in range(st.parallelism)]
            if st.is_source and not notify_only:
                uid = source_uid(st)
                state.source_states[uid] = st.source.apply_progress(
                    state.source_states[uid], [a.source for a in sacks]
                )
            for a in sacks:
                self.metrics.absorb(st.id, a)
                state.wm_states[(st.id, a.subtask)] = dict(a.watermarks)
                superseded.extend(state.versions.fold(a))
            for n in st.nodes.values():
                if n.uid in self.committers:
                    self.committers[n.uid].prepare(epoch, [a.sinks.get(n.uid) for a in sacks])
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
        if self.coordinator.is_expired(pending, now):
            # The subtasks' lineages already point at this checkpoint's files: keep them until
            # the next epoch has written full versions, then delete them.
            self.coordinator.abort(
                pending, "checkpoint timeout expired", discard=False, now_ms=now
            )
            self.notifications.append(("aborted", pending.checkpoint_id))
            self._deferred_discard.append(pending.checkpoint_id)
            self.state.last_full_epoch = -(10**9)
            self.metrics.bump("checkpoints_failed")
            if self.coordinator.should_fail_job():
                raise CheckpointError(
                    "more checkpoints failed than the tolerable failure number allows"
                )
            return
        self._acknowledge(pending, acks)
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
            },
            now_ms=now,
        )
        self.notifications.append(("complete", pending.checkpoint_id))
        self.metrics.bump("checkpoints")
        self._commit_all(epoch)

    def _acknowledge(
        self, pending: PendingCheckpoint, acks: dict[tuple[int, int], SubtaskAck]
    ) -> None:
        """Every subtask of every operator that has checkpoint state acknowledges it
        (with empty state where that subtask has none), so the coordinator can check that
        none is missing."""
        stateful = {uid for a in acks.values() for uid in (*a.checkpoint, *a.op_checkpoint)}
        for st in self.plan.stages:
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

    def _commit_all(self, epoch: int) -> None:
        for c in self.committers.values():
            c.commit(epoch)

    def _cleanup_epoch_versions(self) -> None:
        try:
            self.storage.discard_epoch_state(list(self.state.versions.handles()))
        except Exception as e:  # noqa: BLE001 - cleanup is best effort
            log.debug("epoch version cleanup failed: %s", e)


def build_task_specs(
    plan: ExecutionPlan, job_id: str, storage: CheckpointStorageAccess, settings: JobSettings
) -> dict[int, bytes]:
    """One pickled :class:`StageTaskSpec` per stage (operator factories cloudpickled apart)."""
    specs = {}
    for st in plan.stages:
        factories = {
            tid: cloudpickle.dumps(n.factory) for tid, n in st.nodes.items() if n.factory is not None
        }
        spec = StageTaskSpec(
            job_id=job_id,
            stage=_strip_factories(st),
            factories=factories,
            storage=storage,
            backend_name=settings.backend_name,
            job_parameters=dict(settings.job_parameters),
            source_budget=settings.epoch_records,
            ttl_time_provider=settings.ttl_time_provider,
            backend_options=dict(settings.backend_options),
        )
        specs[st.id] = cloudpickle.dumps(spec)
    return specs


def _strip_factories(st: Stage) -> Stage:
    """A copy of the stage without operator factories (they travel pickled separately)."""
    s = copy.copy(st)
    s.nodes = {tid: copy.copy(n) for tid, n in st.nodes.items()}
    for n in s.nodes.values():
        if n.factory is not None:
            n.factory = True  # marker: "has an operator"; the worker unpickles factories[tid]
        n.committer_factory = None
    return s


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return f"{type(e).__name__}: {s[-1] if s else ''}"
