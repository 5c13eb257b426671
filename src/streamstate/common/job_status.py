"""The states of a job, as ``pyflink.common.JobStatus``."""

from __future__ import annotations

from enum import Enum

__all__ = ["JobStatus"]


class JobStatus(Enum):
    """Possible states of a job (PyFlink's names and values; an Enum as PyFlink's, so
    ``str(JobStatus.RUNNING)`` is ``"JobStatus.RUNNING"``).

    CREATED: nothing ran yet. RUNNING: epochs are running. FAILING: the job failed and is
    cleaning up. FAILED: it failed and the restart strategy allowed no further attempt.
    CANCELLING / CANCELED: a cancel was requested / it stopped at an epoch boundary.
    FINISHED: every bounded source was exhausted and everything was committed.
    RESTARTING: restoring the latest checkpoint after a failure. SUSPENDED and RECONCILING
    exist for API compatibility; a streamstate job never enters them.
    """

    CREATED = 0
    RUNNING = 1
    FAILING = 2
    FAILED = 3
    CANCELLING = 4
    CANCELED = 5
    FINISHED = 6
    RESTARTING = 7
    SUSPENDED = 8
    RECONCILING = 9

    def is_globally_terminal_state(self) -> bool:
        """FAILED, CANCELED or FINISHED: the job is over and will not run again."""
        return self in (JobStatus.FAILED, JobStatus.CANCELED, JobStatus.FINISHED)

    def is_terminal_state(self) -> bool:
        """A globally terminal state, or SUSPENDED."""
        return self.is_globally_terminal_state() or self is JobStatus.SUSPENDED
