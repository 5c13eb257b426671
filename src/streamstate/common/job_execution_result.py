"""The result of ``execute()``, as ``pyflink.common.JobExecutionResult``."""

from __future__ import annotations

from typing import Any

from streamstate.common.job_id import JobID

__all__ = ["JobExecutionResult"]


class JobExecutionResult:
    """Job id, net runtime and accumulators (record counts per operator, epochs,
    checkpoints, restarts, state cache hits/misses)."""

    def __init__(self, job_id: str, net_runtime_ms: int, accumulators: dict[str, Any]) -> None:
        self._job_id = job_id
        self._net_runtime = net_runtime_ms
        self._accumulators = dict(accumulators)

    def get_job_id(self) -> JobID:
        return JobID(self._job_id)

    def get_net_runtime(self) -> int:
        """Milliseconds from the first epoch to the end of the job."""
        return self._net_runtime

    def get_accumulator_result(self, accumulator_name: str) -> Any:
        return self._accumulators.get(accumulator_name)

    def get_all_accumulator_results(self) -> dict[str, Any]:
        return dict(self._accumulators)

    def is_job_execution_result(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"JobExecutionResult(job_id={self._job_id}, net_runtime={self._net_runtime} ms)"
