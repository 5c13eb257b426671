"""``JobClient``, as ``pyflink.common.job_client``: a job started with ``execute_async()``."""

from __future__ import annotations

from typing import Any

from streamstate.common.job_execution_result import JobExecutionResult
from streamstate.common.job_id import JobID
from streamstate.common.job_status import JobStatus
from streamstate.common.savepoint import CompletableFuture, SavepointFormatType

__all__ = ["JobClient"]


class JobClient:
    """A job started with ``execute_async()`` (PyFlink's ``JobClient``)."""

    def __init__(self, executor: Any, control: Any = None) -> None:
        import threading

        self._executor = executor
        self._control = control
        self._result: JobExecutionResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"streamstate-{executor.job_id}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = self._executor.run()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
            self._error = e
        finally:
            if self._control is not None:
                self._control.detach()

    def get_job_id(self) -> JobID:
        return JobID(self._executor.job_id)

    def get_job_status(self) -> JobStatus:
        """The job's current :class:`~streamstate.common.JobStatus`."""
        return JobStatus(self._executor.status)

    def cancel(self) -> None:
        """Stop at the next epoch boundary (the retention policy of checkpoints applies)."""
        self._executor.cancel()

    def get_job_execution_result(self, timeout: float | None = None) -> JobExecutionResult:
        """Wait for the job to end; re-raises its failure."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"job {self.get_job_id()} still running after {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def trigger_savepoint(
        self,
        savepoint_directory: str | None = None,
        format_type: SavepointFormatType = SavepointFormatType.CANONICAL,
    ) -> CompletableFuture:
        """Take a savepoint at the next epoch boundary; the job goes on. The future's
        result is the savepoint's directory (under ``savepoint_directory``, default
        ``execution.checkpointing.savepoint-dir``)."""
        return CompletableFuture(
            self._executor.trigger_savepoint(
                savepoint_directory, native=format_type is SavepointFormatType.NATIVE
            )
        )

    def stop_with_savepoint(
        self,
        advance_to_end_of_event_time: bool = False,
        savepoint_directory: str | None = None,
        format_type: SavepointFormatType = SavepointFormatType.CANONICAL,
    ) -> CompletableFuture:
        """Take a savepoint and end the job with it (FINISHED): what the savepoint covers
        is committed, so a job restored from it writes nothing twice.
        ``advance_to_end_of_event_time`` first sends the final watermark (every event-time
        timer fires), as at the end of input."""
        return CompletableFuture(
            self._executor.trigger_savepoint(
                savepoint_directory,
                native=format_type is SavepointFormatType.NATIVE,
                stop=True,
                advance_to_end_of_event_time=advance_to_end_of_event_time,
            )
        )

    def get_accumulators(self) -> dict[str, Any]:
        """The job's accumulators so far, as the ``JobExecutionResult`` will have them:
        record counts per operator, epochs, checkpoints, restarts, ... and the user
        metrics (``metrics.<operator>.<group>.<name>``, from
        ``RuntimeContext.get_metrics_group()``), summed over subtasks."""
        for _ in range(3):  # the job's thread may add an entry while we copy
            try:
                acc: dict[str, Any] = self._executor.metrics.accumulators(
                    self._executor.job_id, None
                )
                return acc
            except RuntimeError:
                continue
        return {}

    @property
    def epochs_completed(self) -> int:
        return int(self._executor.epoch)
