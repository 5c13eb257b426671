"""Operator-state and checkpoint hooks of user functions, and user sources.

Re-exported by ``streamstate.api.functions``. PyFlink has none of these
as Python interfaces; the names follow Flink's Java API in snake_case
(``CheckpointedFunction``, ``ListCheckpointed``, ``CheckpointListener``,
``SourceFunction``, ``ParallelSourceFunction``).

When the hooks run, in the epoch model (see ``docs/architecture.md``):

* ``initialize_state(context)`` once per subtask instance, before ``open()``:
  at the job's start, after a restore (``context.is_restored()`` is True), and
  whenever the subtask's instance is rebuilt in another Python worker between
  epochs (then it is restored from the previous epoch's operator-state version,
  and ``is_restored()`` is True as well).
* ``snapshot_state(context)`` at the end of **every** epoch, not only at
  checkpoints: every epoch end is a consistent cut, and the operator state it
  produces is the version the next epoch starts from wherever it runs.
  ``context.get_checkpoint_id()`` is the checkpoint id when the epoch carries a
  checkpoint barrier, else ``None``.
* ``notify_checkpoint_complete(checkpoint_id)`` after the driver wrote the
  checkpoint's ``_metadata``, delivered to every subtask at the start of the
  next epoch (a last, input-free epoch delivers it when the job ends).
  ``notify_checkpoint_aborted(checkpoint_id)`` likewise after an abort.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from streamstate.api.functions import Function

__all__ = [
    "CheckpointListener",
    "CheckpointedFunction",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
    "ListCheckpointed",
    "ParallelSourceFunction",
    "SourceFunction",
]


class FunctionSnapshotContext(ABC):
    """What ``CheckpointedFunction.snapshot_state`` is told about the snapshot."""

    @abstractmethod
    def get_checkpoint_id(self) -> int | None:
        """The checkpoint id, or None when this epoch end is not a checkpoint."""

    @abstractmethod
    def get_checkpoint_timestamp(self) -> int:
        """Milliseconds since the epoch: the checkpoint's trigger time (or the epoch's start)."""


class FunctionInitializationContext(ABC):
    """What ``CheckpointedFunction.initialize_state`` gets: the state stores."""

    @abstractmethod
    def is_restored(self) -> bool:
        """True when state was restored (from a checkpoint or a previous epoch's version)."""

    @abstractmethod
    def get_operator_state_store(self) -> Any:
        """The :class:`~streamstate.api.state.OperatorStateStore` of this subtask."""

    @abstractmethod
    def get_keyed_state_store(self) -> Any:
        """Keyed state access (``get_state``, ``get_list_state``, ...); keyed streams only."""


class CheckpointedFunction(ABC):
    """A function with operator (non-keyed) state and/or keyed state initialised by hand."""

    @abstractmethod
    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        """Move the function's working data into its managed state."""

    @abstractmethod
    def initialize_state(self, context: FunctionInitializationContext) -> None:
        """Register managed state; read it back when ``context.is_restored()``."""


class ListCheckpointed(ABC):
    """The simple form of operator state: a list, split evenly across subtasks on rescale."""

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int | None, timestamp: int) -> list[Any]:
        """The function's state as a list (``checkpoint_id`` None: not a checkpoint)."""

    @abstractmethod
    def restore_state(self, state: list[Any]) -> None:
        """Called before ``open()`` with the elements this subtask restored."""


class CheckpointListener(ABC):  # noqa: B024 - both hooks optional
    """Notified after the driver completed (or aborted) a checkpoint."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # noqa: B027
        pass

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:  # noqa: B027
        pass


class SourceFunction(Function):
    """A user source: ``run(ctx)`` emits records with ``ctx.collect`` until done or cancelled.

    ``run`` executes in a thread of the worker running the source subtask, and
    is sliced into epochs: an epoch ends after the subtask collected
    ``execution.epoch.max-records`` records, after
    ``execution.epoch.source-function.max-wait-ms`` (default 500) without
    reaching that, or when ``run`` returns. An epoch ends only while the
    source thread does not hold the checkpoint lock: emit a record and update
    the state that records it inside ``with ctx.get_checkpoint_lock():`` and
    both are in the same epoch and the same snapshot. A non-parallel
    ``SourceFunction`` runs with parallelism 1.
    """

    class SourceContext(ABC):
        @abstractmethod
        def collect(self, element: Any) -> None: ...

        @abstractmethod
        def collect_with_timestamp(self, element: Any, timestamp: int) -> None: ...

        @abstractmethod
        def emit_watermark(self, watermark: Any) -> None: ...

        @abstractmethod
        def mark_as_temporarily_idle(self) -> None: ...

        @abstractmethod
        def get_checkpoint_lock(self) -> Any: ...

        @abstractmethod
        def close(self) -> None: ...

    @abstractmethod
    def run(self, ctx: SourceFunction.SourceContext) -> None: ...

    @abstractmethod
    def cancel(self) -> None: ...


class ParallelSourceFunction(SourceFunction):
    """A :class:`SourceFunction` that runs in every subtask of a parallel source."""
