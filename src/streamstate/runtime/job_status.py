"""A job's lifecycle and what the driver tells observers about it.

:class:`JobLifecycle` holds a job's :class:`~streamstate.common.JobStatus` and allows only
Flink's transitions (anything else raises
:class:`~streamstate.errors.IllegalLifecycleTransition`)::

    CREATED -> RUNNING | CANCELLING | FAILED
    RUNNING -> FINISHED | CANCELLING | FAILING | RESTARTING
    RESTARTING -> RUNNING | CANCELLING | FAILING
    FAILING -> FAILED
    CANCELLING -> CANCELED

:class:`JobObserver` is the driver's hook for the control plane and tests: status changes,
finished epochs (:class:`EpochStats`) and failures, called synchronously on the driver
thread between epochs. Observers must be quick and must not raise (an exception is logged
and dropped: an observer never fails a job). With no observer the cost is one empty loop.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamstate.common.job_status import JobStatus
from streamstate.errors import IllegalLifecycleTransition, TaskFailure

__all__ = [
    "EpochStats",
    "FailureInfo",
    "JobLifecycle",
    "JobObserver",
    "PROGRESS_KEY",
    "RestoredCheckpoint",
    "StageEpochStats",
]

log = logging.getLogger("streamstate")

#: the job's own progress on the terminal (``auto``, ``live``, ``lines``, ``none``): the
#: observer of control/progress.py; Spark's console bar stays off while it shows
#: (spark/console_progress.py)
PROGRESS_KEY = "execution.progress"

_S = JobStatus
_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    _S.CREATED: frozenset({_S.RUNNING, _S.CANCELLING, _S.FAILED}),
    _S.RUNNING: frozenset({_S.FINISHED, _S.CANCELLING, _S.FAILING, _S.RESTARTING}),
    _S.RESTARTING: frozenset({_S.RUNNING, _S.CANCELLING, _S.FAILING}),
    _S.FAILING: frozenset({_S.FAILED}),
    _S.CANCELLING: frozenset({_S.CANCELED}),
    _S.FAILED: frozenset(),
    _S.CANCELED: frozenset(),
    _S.FINISHED: frozenset(),
    _S.SUSPENDED: frozenset(),
    _S.RECONCILING: frozenset(),
}


@dataclass(frozen=True)
class StageEpochStats:
    """One stage in one epoch, summed over its subtasks (seconds)."""

    stage: int
    restore_s: float
    process_s: float
    commit_s: float
    #: the slowest subtask's total (restore + process + commit)
    max_subtask_s: float


@dataclass(frozen=True)
class EpochStats:
    """What one finished epoch did."""

    epoch: int
    attempt: int
    #: the driver's clock when the epoch started
    start_ms: int
    #: how long the epoch took on the driver (wall time, measured apart from the clock)
    duration_ms: float
    #: the checkpoint whose barrier the epoch carried (completed or not)
    checkpoint_id: int | None
    #: node uid -> records it processed in this epoch
    records: Mapping[str, int] = field(default_factory=dict)
    #: records read by the sources in this epoch
    source_records: int = 0
    stages: tuple[StageEpochStats, ...] = ()
    cache_hits: int = 0
    cache_misses: int = 0


@dataclass(frozen=True)
class FailureInfo:
    """One failure of a job (Flink's exception history entry)."""

    timestamp_ms: int
    epoch: int
    attempt: int
    exception_type: str
    message: str
    #: the worker's Python traceback when the failure came from a subtask
    traceback: str
    will_restart: bool

    @staticmethod
    def of(
        e: BaseException, timestamp_ms: int, epoch: int, attempt: int, will_restart: bool
    ) -> FailureInfo:
        """The entry of failure ``e`` (a worker's TaskFailure keeps its remote traceback;
        another error, raised in this process, its own)."""
        return FailureInfo(
            timestamp_ms,
            epoch,
            attempt,
            getattr(e, "error_type", type(e).__name__),
            str(e).split("\n\nworker traceback:", 1)[0].split(": ", 1)[-1]
            if isinstance(e, TaskFailure)
            else str(e),
            getattr(e, "remote_traceback", "") or "".join(traceback.format_exception(e)),
            will_restart,
        )


@dataclass(frozen=True)
class RestoredCheckpoint:
    """The checkpoint or savepoint a job started from (``--from-checkpoint``)."""

    checkpoint_id: int
    #: the job that wrote it (another run of this job, usually)
    job_id: str
    #: its ``_metadata`` URL
    path: str
    is_savepoint: bool
    #: the epoch it was taken at (the restored job goes on from the next)
    epoch: int

    def describe(self) -> str:
        kind = "savepoint" if self.is_savepoint else "checkpoint"
        return f"restored from {kind} {self.checkpoint_id} of job {self.job_id} ({self.path})"


class JobObserver:
    """Callbacks from a running job's driver; override what you need (all no-ops here)."""

    def on_restore(self, job_id: str, restored: RestoredCheckpoint) -> None:
        """The job starts from ``restored`` (before its first epoch)."""

    def on_status_change(self, job_id: str, status: JobStatus, timestamp_ms: int) -> None:
        """The job entered ``status``."""

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        """An epoch finished (its acks were absorbed; its checkpoint, if any, decided)."""

    def on_failure(self, job_id: str, failure: FailureInfo) -> None:
        """An epoch failed; ``failure.will_restart`` says what the restart strategy decided."""


class JobLifecycle:
    """A job's status with guarded transitions, the time it entered each, and observers.

    Reads are thread-safe (a REST thread may ask while the driver loop runs).
    """

    def __init__(self, job_id: str, clock: Any, observers: tuple[JobObserver, ...] = ()) -> None:
        self.job_id = job_id
        self._clock = clock
        self._lock = threading.Lock()
        self._status = JobStatus.CREATED
        self.timestamps: dict[str, int] = {JobStatus.CREATED.name: clock()}
        self.observers = observers

    @property
    def status(self) -> JobStatus:
        return self._status

    def transition(self, to: JobStatus) -> None:
        with self._lock:
            if to not in _TRANSITIONS[self._status]:
                raise IllegalLifecycleTransition(
                    f"job {self.job_id} cannot go from {self._status.name} to {to.name}"
                )
            self._status = to
            now = self._clock()
            self.timestamps[to.name] = now
        self.notify("on_status_change", to, now)

    def notify(self, method: str, *args: Any) -> None:
        for o in self.observers:
            try:
                getattr(o, method)(self.job_id, *args)
            except Exception as e:  # noqa: BLE001 - an observer must never fail the job
                log.warning("job observer %r failed in %s: %s", o, method, e)
