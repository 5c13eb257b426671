"""Flink's ``TwoPhaseCommitSinkFunction`` on the epoch model's sink commit protocol.

A subclass implements Flink's hooks (snake_case): ``begin_transaction``,
``invoke(transaction, value, context)``, ``pre_commit``, ``commit``, ``abort``,
and optionally ``recover_and_commit`` / ``recover_and_abort``.

How the hooks run (see ``docs/connectors.md``, *Sources and sinks contracts*,
"TwoPhaseCommitSinkFunction"):

* Worker, every epoch of every subtask: ``begin_transaction()`` before the
  epoch's first record, ``invoke`` per record, ``pre_commit`` at the epoch's
  end. The pre-committed transaction handle (picklable, e.g. a temp-file path
  or a PostgreSQL prepared-transaction id) goes to the driver in the subtask's
  ack, like every sink result.
* Driver (:class:`TwoPhaseCommitCommitter`, a :class:`SinkCommitter`): the
  pre-committed transactions of an epoch are *pending*; ``commit`` runs for
  each once a checkpoint covering the epoch completed (Flink:
  ``notify_checkpoint_complete``). The pending transactions covered by a
  checkpoint are stored in it: after a restore from that checkpoint each is
  handed to ``recover_and_commit`` (idempotent: it may already be committed).
  When the job rolls back to a checkpoint, the transactions of later epochs
  the driver knows of go to ``recover_and_abort``; a sink whose external
  system can list orphaned transactions (prepared by a driver that died)
  cleans them in ``recover_and_abort_orphans``.

Every transaction is wrapped in a :class:`TransactionHolder` whose
:class:`TransactionState` moves only along OPEN -> PRE_COMMITTED -> COMMITTED
(or -> ABORTED); any other move raises :class:`IllegalLifecycleTransition`.
"""

from __future__ import annotations

import base64
import enum
import pickle
from abc import abstractmethod
from typing import Any, Generic, TypeVar

from streamstate.api.functions import SinkFunction
from streamstate.connectors.base import SinkCommitter
from streamstate.errors import IllegalLifecycleTransition
from streamstate.runtime.operators.base import StreamOperator, close_function, open_function

__all__ = [
    "TransactionHolder",
    "TransactionState",
    "TwoPhaseCommitCommitter",
    "TwoPhaseCommitSinkFunction",
    "TwoPhaseCommitSinkOperator",
]

TXN = TypeVar("TXN")


class TransactionState(enum.Enum):
    OPEN = "open"
    PRE_COMMITTED = "pre-committed"
    COMMITTED = "committed"
    ABORTED = "aborted"


_EDGES: dict[TransactionState, frozenset[TransactionState]] = {
    TransactionState.OPEN: frozenset({TransactionState.PRE_COMMITTED, TransactionState.ABORTED}),
    TransactionState.PRE_COMMITTED: frozenset(
        {TransactionState.COMMITTED, TransactionState.ABORTED}
    ),
    TransactionState.COMMITTED: frozenset(),
    TransactionState.ABORTED: frozenset(),
}


class TransactionHolder(Generic[TXN]):
    """A user transaction handle and where it is in its lifecycle."""

    __slots__ = ("handle", "state")

    def __init__(self, handle: TXN, state: TransactionState = TransactionState.OPEN) -> None:
        self.handle = handle
        self.state = state

    def move_to(self, target: TransactionState) -> None:
        if target not in _EDGES[self.state]:
            raise IllegalLifecycleTransition(
                f"transaction {self.handle!r} cannot go from {self.state.value} to "
                f"{target.value} (allowed: open -> pre-committed -> committed, or -> aborted); "
                f"a TwoPhaseCommitSinkFunction hook was called out of order"
            )
        self.state = target


class TwoPhaseCommitSinkFunction(SinkFunction, Generic[TXN]):
    """Exactly-once sink base class (Flink's ``TwoPhaseCommitSinkFunction``).

    Contract of the hooks (the instance is pickled to the workers; ``commit``,
    ``abort`` and the recover hooks also run on the driver):

    * ``begin_transaction()`` -> a new picklable transaction handle;
    * ``invoke(transaction, value, context)`` writes one record into it;
    * ``pre_commit(transaction)`` makes it durable but invisible (after it,
      ``commit`` must succeed even from another process);
    * ``commit(transaction)`` makes it visible; ``abort(transaction)`` drops it;
    * ``recover_and_commit(transaction)`` commits a pre-committed transaction
      after a restore; it must be idempotent (default: ``commit``);
    * ``recover_and_abort(transaction)`` drops a transaction after a rollback
      (default: ``abort``).
    """

    @abstractmethod
    def begin_transaction(self) -> TXN:
        """Open a new transaction for one subtask and epoch."""

    @abstractmethod
    def invoke(self, transaction: TXN, value: Any, context: Any) -> None:  # type: ignore[override]  # Flink's signature: the transaction comes first
        """Write ``value`` into ``transaction``."""

    @abstractmethod
    def pre_commit(self, transaction: TXN) -> None:
        """Flush: after this the transaction survives the worker and can be committed."""

    @abstractmethod
    def commit(self, transaction: TXN) -> None:
        """Make a pre-committed transaction visible (may be retried: be idempotent)."""

    @abstractmethod
    def abort(self, transaction: TXN) -> None:
        """Drop a transaction (open or pre-committed)."""

    def recover_and_commit(self, transaction: TXN) -> None:
        """Commit a transaction recorded as pending in a restored checkpoint."""
        self.commit(transaction)

    def recover_and_abort(self, transaction: TXN) -> None:
        """Drop a transaction of an epoch the job rolled back over."""
        self.abort(transaction)

    def recover_and_abort_orphans(self, keep: list[TXN]) -> None:
        """After a restore: drop transactions this sink left in the external system that
        are neither committed nor in ``keep`` (e.g. prepared by a driver that died)."""

    # -- streamstate plumbing -------------------------------------------------------------
    def _sink_parts(self) -> tuple[str, Any, Any]:
        fn = self

        def operator() -> TwoPhaseCommitSinkOperator:
            return TwoPhaseCommitSinkOperator(fn)

        def committer(exactly_once: bool = True) -> TwoPhaseCommitCommitter:
            return TwoPhaseCommitCommitter(fn)

        return type(self).__name__, operator, committer


class TwoPhaseCommitSinkOperator(StreamOperator):
    """Worker half: one transaction per subtask and epoch, pre-committed at its end."""

    def __init__(self, fn: TwoPhaseCommitSinkFunction[Any]) -> None:
        super().__init__()
        self.fn = fn
        self.current: TransactionHolder[Any] | None = None

    def open(self) -> None:
        assert self.ctx is not None
        open_function(self.fn, self.ctx)

    def process_batch(self, batch: list[Any]) -> list[Any]:
        if self.current is None:
            self.current = TransactionHolder(self.fn.begin_transaction())
        txn, invoke = self.current.handle, self.fn.invoke
        for v in batch:
            invoke(txn, v, None)
        return []

    def sink_result(self) -> Any:
        holder, self.current = self.current, None
        if holder is None:
            return None  # no record this epoch: no transaction
        self.fn.pre_commit(holder.handle)
        holder.move_to(TransactionState.PRE_COMMITTED)
        return _encode(holder.handle)

    def close(self) -> None:
        holder, self.current = self.current, None
        if holder is not None:
            self.fn.abort(holder.handle)  # a failed epoch's open transaction
            holder.move_to(TransactionState.ABORTED)
        close_function(self.fn)


def _encode(handle: Any) -> str:
    return base64.b64encode(pickle.dumps(handle)).decode("ascii")


def _decode(blob: str) -> Any:
    return pickle.loads(base64.b64decode(blob))


class TwoPhaseCommitCommitter(SinkCommitter):
    """Driver half: commits an epoch's pre-committed transactions when a checkpoint
    covering it completes; stores the pending ones in the checkpoint."""

    def __init__(self, fn: TwoPhaseCommitSinkFunction[Any]) -> None:
        self.fn = fn
        self.pending: dict[int, list[TransactionHolder[Any]]] = {}
        self.blobs: dict[int, list[str]] = {}
        self.committed_blobs: list[str] = []

    def prepare(self, epoch: int, results: list[Any]) -> None:
        for blob in results:
            if blob:
                holder = TransactionHolder(_decode(blob), TransactionState.PRE_COMMITTED)
                self.pending.setdefault(epoch, []).append(holder)
                self.blobs.setdefault(epoch, []).append(blob)

    def commit(self, up_to_epoch: int) -> None:
        for e in sorted(e for e in self.pending if e <= up_to_epoch):
            for holder in self.pending.pop(e):
                self.fn.commit(holder.handle)
                holder.move_to(TransactionState.COMMITTED)
            self.blobs.pop(e, None)

    def abort(self, after_epoch: int) -> None:
        for e in sorted(e for e in self.pending if e > after_epoch):
            for holder in self.pending.pop(e):
                self.fn.recover_and_abort(holder.handle)
                holder.move_to(TransactionState.ABORTED)
            self.blobs.pop(e, None)
        if after_epoch == 0:
            # a restart from the beginning (no checkpoint): nothing pre-committed survives
            self.fn.recover_and_abort_orphans([])

    def snapshot(self, up_to_epoch: int) -> Any:
        return [b for e, bs in sorted(self.blobs.items()) if e <= up_to_epoch for b in bs]

    def restore(self, state: Any) -> None:
        handles = [_decode(b) for b in state or []]
        for h in handles:
            holder = TransactionHolder(h, TransactionState.PRE_COMMITTED)
            self.fn.recover_and_commit(h)
            holder.move_to(TransactionState.COMMITTED)
        self.fn.recover_and_abort_orphans(handles)
