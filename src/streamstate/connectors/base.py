"""The contracts of replayable sources and of transactional sinks.

Sources
    A :class:`Source` is split between the driver (its *enumerator state*: a
    JSON-compatible value holding every split's read position; it is what a
    checkpoint stores) and the workers (``read``). Each epoch the driver calls
    ``plan_epoch`` to hand every reader subtask its splits, the readers read at
    most ``budget`` records each and report their new positions, and the driver
    folds them back with ``apply_progress``. Reading is a pure function of
    (positions, budget), so replaying from a checkpointed state reproduces the
    same records in the same order: that is what makes recovery exactly-once.

Sinks
    A sink operator returns a ``sink_result()`` per subtask and epoch; the
    driver-side :class:`SinkCommitter` receives them. ``prepare`` is called when
    the epoch completed, ``commit`` when a checkpoint covering those epochs
    completed (the second phase of a two-phase commit), ``abort`` when the job
    rolls back to a checkpoint (results of later epochs are discarded).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from streamstate.runtime.replay import NO_REPLAY, ReplayPlan

__all__ = ["SinkCommitter", "Source"]


class Source(ABC):
    """A replayable, checkpointable source (picklable; shipped to workers)."""

    #: parallelism used when the user set none (None: the environment's)
    default_parallelism: int | None = None
    bounded: bool = True
    #: ``read`` can go on where it stopped (``advance``): with ``execution.epoch.interval``
    #: a reader then reads in slices and its epoch is cut by time (``runtime/sliced_read.py``);
    #: otherwise an epoch reads the whole budget in one ``read``
    sliced_reads: bool = False
    #: a reader keeps nothing between epochs that is costly to rebuild (no connection, no
    #: open file, no thread): on Spark, a source stage of such a source with no operator
    #: chained to it runs in the task's Python worker instead of a subtask host
    stateless_reader: bool = False
    #: what Spark jobs the driver runs for this source while the job runs (None: none);
    #: each needs a task slot the job's own tasks do not hold (the barrier runner's tasks
    #: hold theirs for the job's life)
    driver_spark_jobs: str | None = None

    @abstractmethod
    def create_enumerator_state(self, parallelism: int) -> Any:
        """Initial positions of all splits for a job reading with ``parallelism`` readers."""

    def restore_enumerator_state(self, state: Any, parallelism: int) -> Any:
        """Re-distribute a checkpointed state over ``parallelism`` readers (rescaling)."""
        return state

    def discover(self, state: Any, now_ms: int) -> Any:
        """Driver hook before planning an epoch (e.g. list new files); returns the new state."""
        return state

    @abstractmethod
    def plan_epoch(self, state: Any, parallelism: int) -> list[Any]:
        """The assignment (splits and positions) of every reader subtask for the next epoch."""

    @abstractmethod
    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        """Worker: read at most ``budget`` records of ``assignment``; return (records, progress)."""

    def slices_at(self, parallelism: int) -> bool:
        """Whether ``parallelism`` readers of this source may be cut by time (default:
        ``sliced_reads``)."""
        return self.sliced_reads

    def advance(self, assignment: Any, progress: Any) -> Any:
        """Worker (``sliced_reads`` sources): the assignment that continues where ``read`` of
        ``assignment`` stopped, having reported ``progress``. The progress reported by reading
        it must include ``progress`` (the driver only sees the last slice's)."""
        raise NotImplementedError(f"{type(self).__name__} sets sliced_reads but has no advance")

    @abstractmethod
    def apply_progress(self, state: Any, progress: list[Any]) -> Any:
        """Driver: fold every reader's reported progress (index = subtask) into the state."""

    @abstractmethod
    def is_finished(self, state: Any) -> bool:
        """True once a bounded source has nothing left to read (always False when unbounded)."""

    def finishes_within(self, state: Any, parallelism: int, budget: int) -> bool:
        """Whether an epoch planned from ``state`` (``budget`` records per reader) reads
        everything that is left. The driver then ends that same epoch with the final
        watermark instead of running one more epoch for it. False when unknown."""
        return False

    def prepare_worker(self) -> None:  # noqa: B027 - optional hook
        """Called once per worker process before the first ``read`` (e.g. load a broadcast)."""


class SinkCommitter(ABC):
    """Driver-side half of a sink: makes epoch results visible according to the guarantee.

    Replays over committed output (``runtime/replay.py``): before a restore the driver sets
    :attr:`replay`. A committer whose subtasks skip the records of parts already committed
    (``skips_replayed_records``: the FileSink) checks in ``restore`` whether it may; for the
    others the driver discards the results of replayed epochs it knows were committed, or
    refuses the restore (``DuplicateOutputError``) when it cannot tell.
    """

    #: the sink's subtasks skip replayed records that are already committed (FileSink)
    skips_replayed_records: ClassVar[bool] = False
    #: what it commits outlives the job's driver (False: results kept in the driver process)
    output_outlives_job: ClassVar[bool] = True
    #: what Spark jobs the driver runs for this sink's commits (None: none), as
    #: ``Source.driver_spark_jobs``
    driver_spark_jobs: ClassVar[str | None] = None
    #: how the current restore treats committed output (set by the driver)
    replay: ReplayPlan = NO_REPLAY

    @abstractmethod
    def prepare(self, epoch: int, results: list[Any]) -> None:
        """Results of all subtasks for ``epoch`` (the epoch completed; not yet durable)."""

    @abstractmethod
    def commit(self, up_to_epoch: int) -> None:
        """A checkpoint covering every epoch <= ``up_to_epoch`` completed: publish them."""

    @abstractmethod
    def abort(self, after_epoch: int) -> None:
        """The job rolls back to the checkpoint at ``after_epoch``: drop later results."""

    def snapshot(self, up_to_epoch: int) -> Any:
        """JSON-compatible pending work to store in the checkpoint (re-committed on restore)."""
        return None

    def restore(self, state: Any) -> None:  # noqa: B027 - optional hook
        """Re-commit what a restored checkpoint recorded as pending (idempotent)."""

    def finish(self) -> None:  # noqa: B027 - optional hook
        """The job ended; release resources."""
