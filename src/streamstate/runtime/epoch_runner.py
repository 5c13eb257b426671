"""The runner contract: what runs every stage of a plan once per epoch.

The driver (:mod:`streamstate.runtime.executor`) plans epochs; an :class:`EpochRunner`
executes them: in this process (:mod:`streamstate.runtime.local_runner`) or on Spark
(:mod:`streamstate.spark.runner`, :mod:`streamstate.spark.dataframe_runner`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from streamstate.runtime.graph import ExecutionPlan
from streamstate.runtime.protocol import EpochSpec, SubtaskAck

__all__ = ["EpochRunner"]


class EpochRunner(ABC):
    """Runs every stage of a plan once per epoch and returns all acks."""

    def prepare(  # noqa: B027 - optional
        self, job_id: str, plan: ExecutionPlan, driver_spark_jobs: tuple[str, ...] = ()
    ) -> None:
        """The job's plan is known and its stage specs are not built yet: start what takes
        long and needs no spec, so that it overlaps the driver's restore and the specs'
        pickling (the barrier runner submits its Spark job here). ``driver_spark_jobs``:
        the Spark jobs the driver itself will run while the job runs, in words (its
        sources' and sinks' ``driver_spark_jobs``). ``stop`` undoes it when the job fails
        before ``start``. Most runners have nothing to start early."""

    @abstractmethod
    def start(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None: ...

    @abstractmethod
    def run_epoch(
        self, plan: ExecutionPlan, epoch_specs: dict[int, EpochSpec]
    ) -> list[SubtaskAck]: ...

    @abstractmethod
    def stop(self) -> None: ...

    def interrupt(self) -> None:  # noqa: B027 - optional: most runners finish their epoch
        """Cancel the epoch running now, from another thread (a second Ctrl-C): its
        ``run_epoch`` then raises. Runners that cannot cut an epoch short do nothing."""

    def restage(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None:
        """The plan's parallelism changed between two epochs (runtime/rescale.py): use
        ``specs`` from the next epoch on. Runners that keep nothing else start again."""
        self.start(job_id, plan, specs)

    def describe(self) -> str:
        return type(self).__name__
