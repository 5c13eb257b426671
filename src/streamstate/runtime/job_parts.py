"""The parts of one running job, shared by the driver's pieces.

:class:`~streamstate.runtime.executor.JobExecutor` builds one :class:`JobParts` per job
and owns the job's lifecycle, failures and restores;
:class:`~streamstate.runtime.epoch_loop.EpochLoop` runs the epochs with the same parts.
The value is frozen: a part is never swapped for another during the job (a part's own
state changes, e.g. the epoch in :class:`JobState`), so both pieces always see the same.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from streamstate.runtime.checkpoint.coordinator import CheckpointCoordinator
from streamstate.runtime.checkpoint.storage import CheckpointStorageAccess
from streamstate.runtime.clock import Clock
from streamstate.runtime.epoch_runner import EpochRunner
from streamstate.runtime.features import JobFeatures
from streamstate.runtime.graph import ExecutionPlan
from streamstate.runtime.job_metrics import JobMetrics
from streamstate.runtime.job_state import JobState
from streamstate.runtime.job_status import JobLifecycle
from streamstate.runtime.replay import ReplayHistory
from streamstate.runtime.rescale import RescaleRequests
from streamstate.runtime.settings import JobSettings

__all__ = ["JobParts"]


@dataclass(frozen=True)
class JobParts:
    """One job's plan, settings and the driver-side objects that run it."""

    job_id: str
    #: the job's operators and stages (a rescale changes their parallelism in place)
    plan: ExecutionPlan
    settings: JobSettings
    runner: EpochRunner
    storage: CheckpointStorageAccess
    #: owns every checkpoint decision: when to trigger, complete, abort or expire one
    coordinator: CheckpointCoordinator
    lifecycle: JobLifecycle
    #: set by ``JobExecutor.cancel()``: the job stops at the next epoch boundary
    cancel_requested: threading.Event
    #: epoch counter, source positions, state versions and watermarks
    state: JobState
    metrics: JobMetrics
    #: sink operator uid -> its driver-side committer
    committers: dict[str, Any]
    #: the optional features that follow the job (runtime/features.py)
    features: JobFeatures
    #: how this job's epochs were cut: may a restore skip committed output?
    history: ReplayHistory
    #: rescale requests waiting for the next epoch boundary (runtime/rescale.py)
    rescales: RescaleRequests

    @property
    def job_name(self) -> str:
        return self.settings.job_name

    @property
    def clock(self) -> Clock:
        return self.settings.clock

    @property
    def checkpointing(self) -> bool:
        """Periodic checkpoints are enabled (savepoints work either way)."""
        return self.settings.checkpoint.enabled
