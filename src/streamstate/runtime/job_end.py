"""What a process does when a job it ran subtasks of has ended: one seam, hooks by name.

A job's end reaches every process that ran its subtasks (a subtask host told to stop, a
Spark worker running the runner's stop task, the in-process runner's own process).
There, :func:`end_job` closes the job's subtask instances (``task.end_job``) and runs
the hooks that parts of the runtime registered for what they keep per job, e.g. the
RocksDB backend's local recovery copies, which serve only restarts of that job. A part
that was never imported registered nothing and costs nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["end_job", "on_job_end"]

log = logging.getLogger("streamstate")

_HOOKS: dict[str, Callable[[str], None]] = {}


def on_job_end(name: str, hook: Callable[[str], None]) -> None:
    """Run ``hook(job_id)`` in this process when a job ends here (registered once by name)."""
    _HOOKS[name] = hook


def end_job(job_id: str) -> None:
    """Run every registered hook for ``job_id``; a failing hook is logged, not raised (the
    job is over: what is left is cleanup)."""
    for name, hook in list(_HOOKS.items()):
        try:
            hook(job_id)
        except Exception:  # cleanup after the job must not fail its end
            log.warning("cleaning up %s of job %s failed", name, job_id, exc_info=True)
