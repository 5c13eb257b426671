"""``JobID``, as ``pyflink.common.job_id``."""

from __future__ import annotations

__all__ = ["JobID"]


class JobID(str):
    """A job's id (``JobClient.get_job_id()``, ``JobExecutionResult.get_job_id()``).

    A ``str`` of hex digits, so ``str(job_id)`` is what the REST API, the CLI
    (``streamstate info <id>``) and the job registry show, and it compares equal to it.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JobID({str(self)!r})"
