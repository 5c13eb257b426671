"""``JobClient``, as ``pyflink.common.job_client``: a job started with ``execute_async()``."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from streamstate.common.job_execution_result import JobExecutionResult
from streamstate.common.job_id import JobID
from streamstate.common.job_status import JobStatus
from streamstate.common.savepoint import CompletableFuture, SavepointFormatType

__all__ = ["JobClient"]


class JobClient:
    """A job started with ``execute_async()`` (PyFlink's ``JobClient``).

    As in PyFlink, the status, the result, the accumulators and a cancellation are
    :class:`CompletableFuture` s: ``client.get_job_execution_result().result()`` waits
    for the job (re-raising its failure), ``client.get_job_status().result()`` is the
    status now, ``client.cancel().result()`` waits until the cancelled job stopped.
    """

    def __init__(self, executor: Any, control: Any = None) -> None:
        import threading

        self._executor = executor
        self._control = control
        #: the JobExecutionResult (or the job's failure) once the job ended
        self._outcome: concurrent.futures.Future[JobExecutionResult] = concurrent.futures.Future()
        #: done (None) when the job's thread ended, whatever the outcome
        self._ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, name=f"streamstate-{executor.job_id}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        result: JobExecutionResult | None = None
        error: BaseException | None = None
        try:
            result = self._executor.run()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
            error = e
        finally:
            # the job is fully gone (registry file, REST handle) before anyone waiting
            # on the futures goes on
            if self._control is not None:
                self._control.detach()
            _settle(self._outcome, result=result, error=error)
            _settle(self._ended, result=None)

    def get_job_id(self) -> JobID:
        return JobID(self._executor.job_id)

    def get_job_status(self) -> CompletableFuture:
        """A completed future of the job's current :class:`~streamstate.common.JobStatus`."""
        return _done(JobStatus(self._executor.status))

    def cancel(self) -> CompletableFuture:
        """Stop at the next epoch boundary (the retention policy of checkpoints applies);
        the future completes when the job has stopped."""
        self._executor.cancel()
        return CompletableFuture(self._ended)

    def get_job_execution_result(self) -> CompletableFuture:
        """A future of the :class:`JobExecutionResult`; ``.result(timeout)`` waits for the
        job and re-raises its failure."""
        return CompletableFuture(self._outcome)

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

    def rescale(
        self, parallelism: int | None = None, operators: dict[str, int] | None = None
    ) -> CompletableFuture:
        """Change the parallelism while the job runs, at the next epoch boundary (what
        Flink's adaptive scheduler does on new resource requirements, without a restart):
        ``parallelism`` for the whole job, ``operators`` per uid. Keyed state moves by
        key-group ranges, operator state and source splits are redistributed as on a
        restore. The future's result is uid -> parallelism once applied. Raises
        :class:`~streamstate.errors.RescaleError` for a request that cannot apply (beyond
        the max parallelism, an unknown uid, no checkpointing)."""
        return CompletableFuture(self._executor.rescale(parallelism, operators))

    def get_accumulators(self) -> CompletableFuture:
        """A completed future of the job's accumulators so far, as the
        ``JobExecutionResult`` will have them: record counts per operator, epochs,
        checkpoints, restarts, ... and the user metrics
        (``metrics.<operator>.<group>.<name>``, from ``RuntimeContext.get_metrics_group()``),
        summed over subtasks."""
        acc: dict[str, Any] = {}
        for _ in range(3):  # the job's thread may add an entry while we copy
            try:
                acc = self._executor.parts.metrics.accumulators(self._executor.job_id, None)
                break
            except RuntimeError:
                continue
        return _done(acc)

    @property
    def epochs_completed(self) -> int:
        return int(self._executor.epoch)


def _done(value: Any) -> CompletableFuture:
    f: concurrent.futures.Future[Any] = concurrent.futures.Future()
    f.set_result(value)
    return CompletableFuture(f)


def _settle(
    future: concurrent.futures.Future[Any], result: Any = None, error: BaseException | None = None
) -> None:
    """Complete ``future`` unless a caller cancelled it (``CompletableFuture.cancel``)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass
