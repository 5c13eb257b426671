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

import concurrent.futures
import copy
import logging
import threading
import time
import uuid
from collections.abc import Sequence

import cloudpickle

from streamstate.common.job_execution_result import JobExecutionResult
from streamstate.common.job_status import JobStatus
from streamstate.errors import (
    CheckpointStorageError,
    ConfigurationError,
    CorruptCheckpointError,
    DuplicateOutputError,
    JobExecutionError,
    RescaleError,
)
from streamstate.runtime.checkpoint import signing
from streamstate.runtime.checkpoint.coordinator import CheckpointCoordinator
from streamstate.runtime.checkpoint.metadata import CheckpointMetadata
from streamstate.runtime.checkpoint.savepoint import SavepointTarget
from streamstate.runtime.checkpoint.sharing import mark_shared
from streamstate.runtime.checkpoint.storage import (
    CheckpointStorageAccess,
    load_restore_point,
    newer_checkpoints,
)
from streamstate.runtime.epoch_loop import EpochLoop, JobCancelled
from streamstate.runtime.epoch_runner import EpochRunner
from streamstate.runtime.features import JobFeatures
from streamstate.runtime.graph import ExecutionPlan, Stage
from streamstate.runtime.interrupts import CtrlC, ctrl_c_stops
from streamstate.runtime.job_metrics import JobMetrics
from streamstate.runtime.job_parts import JobParts
from streamstate.runtime.job_state import JobState
from streamstate.runtime.job_status import (
    FailureInfo,
    JobLifecycle,
    JobObserver,
    RestoredCheckpoint,
)
from streamstate.runtime.protocol import StageTaskSpec
from streamstate.runtime.replay import PROPERTY as REPLAY_PROPERTY
from streamstate.runtime.replay import ReplayHistory, ReplayPlan, replay_stamp
from streamstate.runtime.rescale import (
    PlanScaler,
    RescaleAtBoundary,
    RescaleRequest,
    RescaleRequests,
    parallelism_by_uid,
    target_parallelism,
)
from streamstate.runtime.restart import RestartStrategy
from streamstate.runtime.savepoints import SavepointRequest
from streamstate.runtime.settings import JobSettings

__all__ = ["JobCancelled", "JobExecutor", "build_task_specs"]

log = logging.getLogger("streamstate")


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
        job_id = uuid.uuid4().hex[:16]
        # the stores' endpoint and credentials, before the first store is touched (the
        # executors install the same from their stage specs)
        settings.storage_options.install()
        storage.initialize_job(job_id)
        metrics = JobMetrics()
        if settings.autoscaler.enabled:  # the autoscaler's one seam (runtime/autoscaling.py)
            from streamstate.runtime.autoscaling import AutoscalingObserver

            observers = (*observers, AutoscalingObserver(self, settings))
        #: the job's parts, shared with the epoch loop
        self.parts = JobParts(
            job_id=job_id,
            plan=plan,
            settings=settings,
            runner=runner,
            storage=storage,
            coordinator=CheckpointCoordinator.from_settings(
                settings.checkpoint, storage, clock=settings.clock
            ),
            lifecycle=JobLifecycle(job_id, settings.clock, tuple(observers)),
            cancel_requested=threading.Event(),
            state=JobState(plan),
            metrics=metrics,
            committers={},
            features=JobFeatures(job_id, plan, settings, metrics.stats),
            history=ReplayHistory(
                replay_stamp(plan, settings.epoch_records, settings.epoch_interval_s)
            ),
            rescales=RescaleRequests(),
        )
        self.restart = restart
        #: the running epoch was cut short on purpose (Ctrl-C twice): its failure is a cancel
        self.interrupted = threading.Event()
        self._ctrl_c: CtrlC | None = None
        self.restored_from: str | None = None
        #: ``settings.recovery_path`` loaded by :meth:`load_restore_point` (None: not yet)
        self._restore_point: tuple[CheckpointMetadata, str] | None = None
        self.scaler = PlanScaler(plan)
        self.loop = EpochLoop(self.parts)

    # -- public view ------------------------------------------------------------------------
    @property
    def job_id(self) -> str:
        return self.parts.job_id

    @property
    def job_name(self) -> str:
        return self.parts.job_name

    @property
    def epoch(self) -> int:
        """The last epoch that ran to completion."""
        return self.parts.state.epoch

    @property
    def status(self) -> JobStatus:
        return self.parts.lifecycle.status

    def cancel(self) -> None:
        """Stop at the next epoch boundary (the retention policy of checkpoints applies)."""
        self.parts.cancel_requested.set()

    def interrupt(self) -> None:
        """Stop now: cancel, and cut the running epoch short (it ends the job cancelled)."""
        job = self.parts
        self.interrupted.set()
        job.cancel_requested.set()
        job.runner.interrupt()

    def trigger_savepoint(
        self,
        directory: str | None,
        native: bool = False,
        stop: bool = False,
        advance_to_end_of_event_time: bool = False,
    ) -> concurrent.futures.Future[str]:
        """Ask for a savepoint at the next epoch boundary; the future holds its path.

        ``stop``: the job ends once it completed (stop-with-savepoint). Thread-safe."""
        directory = directory or self.parts.settings.savepoint_dir
        if not directory:
            raise ConfigurationError(
                "no savepoint directory: pass one, or set execution.checkpointing.savepoint-dir"
            )
        try:
            target = SavepointTarget.create(
                directory,
                self.job_id,
                native=native,
                stop=stop,
                advance_to_end_of_event_time=advance_to_end_of_event_time,
            )
        except CheckpointStorageError as e:
            # as in Flink: the request fails through its future, the job goes on
            failed: concurrent.futures.Future[str] = concurrent.futures.Future()
            failed.set_exception(e)
            return failed
        request = SavepointRequest(target)
        self.loop.savepoints.put(request)
        return request.future

    def rescale(
        self, parallelism: int | None = None, operators: dict[str, int] | None = None
    ) -> concurrent.futures.Future[dict[str, int]]:
        """Change the job's parallelism (``parallelism``: every stage but user
        SourceFunctions'; ``operators``: uid -> parallelism) at the next epoch boundary,
        without stopping it; the future holds uid -> parallelism once applied.

        Raises :class:`RescaleError` at once for a request that cannot apply. Thread-safe."""
        job = self.parts
        request = RescaleRequest(parallelism, tuple(sorted((operators or {}).items())))
        if not job.checkpointing or job.settings.batch:
            raise RescaleError(
                "rescaling a running job needs checkpointing in STREAMING mode (the rescale "
                "restores the checkpoint taken at its epoch boundary): call "
                "env.enable_checkpointing(interval), or restart from a savepoint at the new "
                "parallelism"
            )
        if parallelism is None and not request.operators:
            raise RescaleError("name a parallelism for the job or for at least one operator")
        target_parallelism(job.plan, request)
        job.rescales.put(request)
        return request.future

    def _rescale(self, requests: list[RescaleRequest]) -> None:
        """At the boundary after the rescale's checkpoint: set the new parallelism and
        restore that checkpoint into it, as a restore at the new parallelism would, under
        a new attempt (no worker reuses an instance built for other key-group ranges)."""
        job = self.parts
        md = job.coordinator.latest_completed
        assert md is not None  # the loop raises RescaleAtBoundary after it completed
        before = parallelism_by_uid(job.plan)
        after = before
        applied = []
        for r in requests:
            try:
                targets = target_parallelism(job.plan, r)
            except RescaleError as e:
                r.future.set_exception(e)
                continue
            after = self.scaler.apply(targets)
            applied.append(r)
        if after != before:
            path = job.storage.checkpoint_location(md.checkpoint_id)
            epoch = int(md.properties.get("epoch", 0))
            # the version every subtask's instance holds now: the checkpoint's (the
            # rescale happens right after the epoch that wrote it)
            in_place = (job.state.attempt, epoch)
            job.state.attempt += 1
            job.history.stamp = replay_stamp(
                job.plan, job.settings.epoch_records, job.settings.epoch_interval_s
            )
            self._plan_replay(epoch, job.history, epoch)
            job.features.rescaled(job.plan)
            job.state.reset()
            self._restore(md, path)
            if job.settings.rescale_in_place:
                job.state.versions.keep_in_place(in_place)
            try:
                job.storage.discard_epoch_attempts_before(job.state.attempt)
            except OSError as e:
                log.debug("could not delete the previous attempt's epoch versions: %s", e)
            job.runner.restage(
                self.job_id,
                job.plan,
                build_task_specs(job.plan, self.job_id, job.storage, job.settings, job.features),
            )
            job.metrics.bump("rescales")
            changed = {u: (before[u], p) for u, p in after.items() if before[u] != p}
            log.info(
                "job %s rescaled at epoch %d from checkpoint %d: %s",
                self.job_id,
                epoch,
                md.checkpoint_id,
                ", ".join(f"{u} {a}->{b}" for u, (a, b) in sorted(changed.items())),
            )
        for r in applied:
            r.future.set_result(dict(after))

    # -- setup and restore ------------------------------------------------------------------
    def _make_committers(self) -> None:
        job = self.parts
        exactly_once = job.settings.checkpoint.exactly_once or not job.checkpointing
        for st in job.plan.stages:
            for n in st.nodes.values():
                if n.committer_factory is not None:
                    job.committers[n.uid] = n.committer_factory(exactly_once)

    def _driver_spark_jobs(self) -> tuple[str, ...]:
        """What Spark jobs the driver runs while the job runs: its sources' and sinks'."""
        job = self.parts
        sources = [st.source.driver_spark_jobs for st in job.plan.stages if st.is_source]
        sinks = [c.driver_spark_jobs for c in job.committers.values()]
        return tuple(dict.fromkeys(w for w in (*sources, *sinks) if w))

    def _restore(self, md: CheckpointMetadata, path: str | None, initial: bool = False) -> None:
        job = self.parts
        # a job restores what its own checkpoints hold; a started-from path is checked
        job.state.restore(md, job.settings.allow_non_restored_state or not initial)
        job.coordinator.continue_ids_after(md.checkpoint_id)
        for uid, c in job.committers.items():
            c.abort(job.state.epoch)
            c.restore(md.sink_state.get(uid))
        job.coordinator.stats.reported_restored(
            md.checkpoint_id, path or "", job.clock(), md.is_savepoint
        )
        job.features.restored(md, job.state)

    def load_restore_point(self) -> None:
        """Load the checkpoint the job starts from (``settings.recovery_path``), if any.

        Called before the job is announced (its address, its status), so a bad path is one
        error and nothing else; :meth:`run` calls it when nobody did."""
        job = self.parts
        path = job.settings.recovery_path
        if not path or self._restore_point is not None:
            return
        try:
            with signing.allowing_unsigned(job.settings.allow_unsigned_checkpoints):
                self._restore_point = load_restore_point(path)
        except FileNotFoundError as e:
            raise CorruptCheckpointError(f"no checkpoint at {path}: {e}") from e

    def _plan_replay(
        self, restored_epoch: int, committed: ReplayHistory | None, committed_epoch: int
    ) -> ReplayPlan:
        """Whether the epochs after ``restored_epoch`` replay exactly the committed ones
        (``committed``: the history of the run that committed them, ``None``: unknown), and
        hand the decision to the committers and the subtasks (``runtime/replay.py``)."""
        job = self.parts
        stamp = job.history.stamp
        why = ""
        if stamp is None:
            why = "its epochs are cut by time (execution.epoch.interval)"
        elif committed is None:
            why = (
                "the job may have run on after this checkpoint and how an unbounded source "
                "cut those epochs is unknown (a savepoint, or newer checkpoints that cannot "
                "be read)"
            )
        elif committed.stamp != stamp:
            why = (
                "the job's operators, their parallelism or execution.epoch.max-records changed, "
                "or the checkpoints predate replay records"
            )
        elif committed.uncertain_epoch > restored_epoch:
            why = (
                f"epoch {committed.uncertain_epoch} read what an unbounded source held at the "
                f"time, not its full budget, so a replay cuts it elsewhere"
            )
        plan = ReplayPlan(
            None if why else stamp,
            # at-least-once checkpointing promises no more than that
            job.settings.allow_duplicate_output or not job.settings.checkpoint.exactly_once,
            committed_epoch,
            why,
        )
        for c in job.committers.values():
            c.replay = plan
        job.state.replay_stamp = plan.stamp
        return plan

    def _refuse_duplicates(self, plan: ReplayPlan, sinks: dict[str, int]) -> None:
        """``sinks``: uid -> the last epoch whose output it committed after the restored
        checkpoint, for committers the replay would write again."""
        if not sinks:
            return
        plan.duplicates(
            f"job {self.job_id}: the restore replays output that was already committed "
            f"({', '.join(f'sink {u!r} up to epoch {e}' for u, e in sorted(sinks.items()))}) "
            f"and cannot skip it"
            + (f" ({plan.why_not_exact})" if plan.why_not_exact else "")
            + ", so it would be written again"
        )

    def _initial_restore(self) -> None:
        job = self.parts
        job.state.reset()
        if not job.settings.recovery_path:
            # a fresh start rolls back to epoch 0: sinks drop what an earlier run left
            # pending (e.g. PostgreSQL transactions prepared before its first checkpoint)
            self._plan_replay(0, job.history, 0)
            for c in job.committers.values():
                c.abort(0)
            return
        self.load_restore_point()
        assert self._restore_point is not None
        md, where = self._restore_point
        epoch = int(md.properties.get("epoch", 0))
        saved = ReplayHistory.from_property(md.properties.get(REPLAY_PROPERTY))
        newer, newest = newer_checkpoints(where)
        if newest is not None:  # an older retained checkpoint: its job went on committing
            committed = ReplayHistory.from_property(newest.properties.get(REPLAY_PROPERTY))
        elif saved is not None and not self.loop.unbounded:
            committed = saved  # bounded sources only: every epoch is cut by its budget
        elif newer or md.is_savepoint:
            committed = None  # the job may have run on: how it cut those epochs is unknown
        else:
            committed = saved
        committed_epoch = int(newest.properties.get("epoch", 0)) if newest else 0
        plan = self._plan_replay(epoch, committed, committed_epoch)
        if newer:
            self._refuse_duplicates(
                plan,
                {
                    uid: committed_epoch
                    for uid, c in job.committers.items()
                    if c.output_outlives_job and not c.skips_replayed_records
                },
            )
        if saved is not None:
            job.history.uncertain_epoch = saved.uncertain_epoch
        self._restore(md, where, initial=True)
        self.restored_from = where
        restored = RestoredCheckpoint(
            md.checkpoint_id, md.job_id, where, md.is_savepoint, job.state.epoch
        )
        log.info("job %s %s (epoch %d)", self.job_id, restored.describe(), job.state.epoch)
        job.lifecycle.notify("on_restore", restored)

    def _recover_after_failure(self) -> None:
        job = self.parts
        job.state.attempt += 1
        # newest checkpoint that loads and verifies: a corrupt latest one falls back to an older one
        md = job.storage.latest_valid_checkpoint() if job.metrics.stats["checkpoints"] else None
        path = None if md is None else job.storage.checkpoint_location(md.checkpoint_id)
        if md is None and self.restored_from:
            md, path = (
                job.storage.load_metadata(self.restored_from, verify=True),
                self.restored_from,
            )
        restored_epoch = int(md.properties.get("epoch", 0)) if md is not None else 0
        committed = self.loop.committed_output
        plan = self._plan_replay(restored_epoch, job.history, max(committed.values(), default=0))
        beyond = {uid: e for uid, e in committed.items() if e > restored_epoch}
        if plan.skips_committed:
            # a fallback past committed output that replays exactly: the FileSink's subtasks
            # skip the committed records, other sinks' replayed epochs are discarded
            self.loop.discard_through = {
                uid: e
                for uid, e in beyond.items()
                if not job.committers[uid].skips_replayed_records
            }
        else:
            self.loop.discard_through = {}
            self._refuse_duplicates(
                plan,
                {
                    uid: e
                    for uid, e in beyond.items()
                    # a checkpoint's restore lets the FileSink check its parts itself
                    if md is None or not job.committers[uid].skips_replayed_records
                },
            )
        job.state.reset()
        if md is not None:
            saved = ReplayHistory.from_property(md.properties.get(REPLAY_PROPERTY))
            job.history.uncertain_epoch = saved.uncertain_epoch if saved is not None else 0
            self._restore(md, path)
        else:
            job.history.uncertain_epoch = 0
            for c in job.committers.values():
                c.abort(0)
        try:
            # the failed attempts' per-epoch versions are never read again
            job.storage.discard_epoch_attempts_before(job.state.attempt)
        except OSError as e:
            log.debug("could not delete the failed attempts' epoch versions: %s", e)
        log.info(
            "job %s restarting (attempt %d) from %s",
            self.job_id,
            job.state.attempt,
            f"checkpoint {md.checkpoint_id}" if md else "the beginning",
        )

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> JobExecutionResult:
        """Run the job to its end; returns its result or raises JobExecutionError.

        However it ends, its per-epoch versions are deleted and its storage released
        (checkpoints follow the retention policy)."""
        job = self.parts
        try:
            with (
                ctrl_c_stops(self.job_name, self.cancel, self.interrupt) as ctrl_c,
                signing.allowing_unsigned(job.settings.allow_unsigned_checkpoints),
            ):
                self._ctrl_c = ctrl_c
                return self._run()
        finally:
            self._ctrl_c = None
            job.features.ended(f"job {self.job_id} ended")
            self.loop.savepoints.close(f"job {self.job_id} ended")
            job.rescales.close(f"job {self.job_id} ended")
            self._cleanup_epoch_versions()
            job.storage.release_job()

    def _run(self) -> JobExecutionResult:
        job = self.parts
        t0 = time.time()
        self._make_committers()
        try:
            job.runner.prepare(self.job_id, job.plan, self._driver_spark_jobs())
            self._initial_restore()
        except BaseException:
            job.lifecycle.transition(JobStatus.FAILED)
            job.runner.stop()  # what prepare started
            raise
        try:
            # executors on other machines must see the job's state directory (sharing.py)
            mark_shared(job.storage)
            job.runner.start(
                self.job_id,
                job.plan,
                build_task_specs(job.plan, self.job_id, job.storage, job.settings, job.features),
            )
        except BaseException:
            job.runner.stop()  # what prepare (or start, in part) started
            raise
        if self._ctrl_c is not None:
            self._ctrl_c.reclaim()  # starting Spark installed PySpark's Ctrl-C handler
        job.lifecycle.transition(JobStatus.RUNNING)
        cancelled = False
        try:
            while True:
                try:
                    self.loop.run()
                    break
                except RescaleAtBoundary as boundary:
                    self._rescale(boundary.requests)
                except (JobCancelled, KeyboardInterrupt):
                    cancelled = True
                    log.info("job %s cancelled at epoch %d", self.job_id, job.state.epoch)
                    break
                except Exception as e:  # noqa: BLE001 - every failure goes to the restart strategy
                    if self.interrupted.is_set():  # the epoch was cut short on purpose
                        cancelled = True
                        log.info("job %s stopped in epoch %d", self.job_id, job.state.epoch + 1)
                        break
                    self._on_failure(e)
        finally:
            job.runner.stop()
        job.coordinator.on_job_terminal(cancelled=cancelled)
        for c in job.committers.values():
            c.finish()
        if cancelled:
            if job.lifecycle.status is not JobStatus.CANCELLING:
                job.lifecycle.transition(JobStatus.CANCELLING)
            job.lifecycle.transition(JobStatus.CANCELED)
        else:
            job.lifecycle.transition(JobStatus.FINISHED)
        latest = job.coordinator.latest_completed
        acc = job.metrics.accumulators(
            self.job_id,
            job.storage.checkpoint_location(latest.checkpoint_id) if latest is not None else None,
        )
        return JobExecutionResult(self.job_id, int((time.time() - t0) * 1000), acc)

    def _on_failure(self, e: Exception) -> None:
        """Restart (after the back-off) or fail the job with JobExecutionError."""
        job = self.parts
        job.metrics.bump("epochs_failed")
        self.restart.notify_failure()
        # an error that a restart cannot cure fails the job (SourceNotResumableError)
        will_restart = self.restart.can_restart() and not getattr(e, "suppresses_restarts", False)
        failure = FailureInfo.of(
            e, job.clock(), job.state.epoch + 1, job.state.attempt, will_restart
        )
        job.metrics.failures.append(failure)
        job.lifecycle.notify("on_failure", failure)
        if not will_restart:
            job.lifecycle.transition(JobStatus.FAILING)
            self._terminate_failed()
            job.lifecycle.transition(JobStatus.FAILED)
            raise JobExecutionError.caused_by(
                f"job {self.job_name!r} ({self.job_id}) failed and the restart strategy "
                f"({self.restart.describe()}) allows no further attempt: "
                f"{failure.exception_type}: {failure.message}",
                e,
            )
        backoff_ms = self.restart.get_backoff_time_ms()
        log.warning(
            "job %s: epoch %d failed (%s: %s); restarting in %d ms (restart %d, %s)",
            self.job_id,
            job.state.epoch + 1,
            failure.exception_type,
            failure.message.strip().splitlines()[0] if failure.message.strip() else "",
            backoff_ms,
            job.metrics.stats["restarts"] + 1,
            self.restart.describe(),
        )
        job.features.failed(f"the job is restarting after a failure in epoch {job.state.epoch + 1}")
        job.lifecycle.transition(JobStatus.RESTARTING)
        job.cancel_requested.wait(backoff_ms / 1000.0)
        job.metrics.bump("restarts")
        try:
            self._recover_after_failure()
        except DuplicateOutputError as refused:
            # the fallback would write committed output again: fail instead (as Flink fails
            # rather than fall back silently), naming the option that allows it
            job.lifecycle.transition(JobStatus.FAILING)
            self._terminate_failed()
            job.lifecycle.transition(JobStatus.FAILED)
            raise JobExecutionError.caused_by(
                f"job {self.job_name!r} ({self.job_id}) failed ({failure.exception_type}: "
                f"{failure.message.strip()}) and cannot restart: {refused}",
                refused,
            ) from refused
        job.lifecycle.transition(JobStatus.RUNNING)

    def _terminate_failed(self) -> None:
        job = self.parts
        try:
            job.runner.stop()
            job.coordinator.on_job_terminal(cancelled=False, failed=True)
        except Exception as e:  # noqa: BLE001 - the job failure is what the caller must see
            log.warning("cleanup after job failure failed: %s", e)

    def _cleanup_epoch_versions(self) -> None:
        """The job is over: no per-epoch version is read again (checkpoints never point
        into ``epochs/``), so the whole directory goes, stragglers of failed epochs too."""
        try:
            self.parts.storage.discard_all_epoch_state()
        except Exception as e:  # noqa: BLE001 - cleanup is best effort
            log.debug("epoch version cleanup failed: %s", e)


def build_task_specs(
    plan: ExecutionPlan,
    job_id: str,
    storage: CheckpointStorageAccess,
    settings: JobSettings,
    features: JobFeatures,
) -> dict[int, bytes]:
    """One pickled :class:`StageTaskSpec` per stage (operator factories cloudpickled apart)."""
    specs = {}
    for st in plan.stages:
        factories = {
            tid: cloudpickle.dumps(n.factory)
            for tid, n in st.nodes.items()
            if n.factory is not None
        }
        spec = StageTaskSpec(
            job_id=job_id,
            stage=_strip_factories(st),
            factories=factories,
            storage=storage,
            backend_name=settings.backend_name,
            job_parameters=dict(settings.job_parameters),
            source_budget=settings.epoch_records,
            source_interval_s=0.0 if settings.batch else settings.epoch_interval_s,
            source_slice=settings.epoch_slice_records,
            ttl_time_provider=settings.ttl_time_provider,
            backend_options=dict(settings.backend_options),
            batch=settings.batch,
            storage_options=settings.storage_options,
            features=features.stage_options(st),
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
