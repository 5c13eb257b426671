"""Sinks: print, discard, user ``SinkFunction``, collect (transactional); files: file_sink.py."""

from __future__ import annotations

import sys
from typing import Any

from streamstate.common.java_strings import flink_string
from streamstate.connectors.base import SinkCommitter
from streamstate.runtime.operators.base import StreamOperator, close_function, open_function

__all__ = [
    "CollectCommitter",
    "CollectSinkOperator",
    "DiscardingSinkOperator",
    "PrintSinkOperator",
    "SinkFunctionOperator",
]


class PrintSinkOperator(StreamOperator):
    """Flink's print format: ``identifier:subtask> value`` (the prefix only when useful).

    The lines go to the driver in the subtask's ack and :class:`PrintCommitter` writes them
    to the driver's stdout (stderr with ``to_stderr``) when the epoch completes: a job run
    from a terminal prints there, as PyFlink's local run does, whichever process ran the
    subtask. A replayed epoch prints again (print is not exactly-once, as in Flink).
    """

    def __init__(
        self, sink_identifier: str | None = None, to_stderr: bool = False, type_info: Any = None
    ) -> None:
        super().__init__()
        self.identifier = sink_identifier
        self.to_stderr = to_stderr
        #: the stream's declared type: records print as PyFlink prints them (Java's
        #: toString of the typed value; ``str(value)`` when untyped)
        self.type_info = type_info
        self.lines: list[str] = []

    def process_batch(self, batch: list[Any]) -> list[Any]:
        assert self.ctx is not None
        prefix = self.identifier or ""
        if self.ctx.parallelism > 1:
            prefix = (
                f"{prefix}:{self.ctx.subtask_index + 1}"
                if prefix
                else str(self.ctx.subtask_index + 1)
            )
        ti = self.type_info
        if prefix:
            self.lines.extend(f"{prefix}> {flink_string(v, ti)}\n" for v in batch)
        else:
            self.lines.extend(f"{flink_string(v, ti)}\n" for v in batch)
        return []

    def sink_result(self) -> Any:
        if not self.lines:
            return None
        text, self.lines = "".join(self.lines), []
        return (self.to_stderr, text)


class PrintCommitter(SinkCommitter):
    """Writes the printed lines of a completed epoch on the driver, subtask by subtask."""

    output_outlives_job = False  # at-least-once anyway (docs/guarantees.md)

    def __init__(self, exactly_once: bool = False) -> None:
        pass

    def prepare(self, epoch: int, results: list[Any]) -> None:
        for res in results:
            if res:
                to_stderr, text = res
                stream = sys.stderr if to_stderr else sys.stdout
                stream.write(text)
                stream.flush()

    def commit(self, up_to_epoch: int) -> None:
        pass

    def abort(self, after_epoch: int) -> None:
        pass

    def snapshot(self, up_to_epoch: int) -> Any:
        return None


class DiscardingSinkOperator(StreamOperator):
    def process_batch(self, batch: list[Any]) -> list[Any]:
        return []


class SinkFunctionOperator(StreamOperator):
    """A user :class:`~streamstate.api.functions.SinkFunction` (at-least-once on replay)."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn
        self.invoke = fn.invoke if hasattr(fn, "invoke") else (lambda v, c: fn(v))

    def open(self) -> None:
        assert self.ctx is not None
        open_function(self.fn, self.ctx)

    def process_batch(self, batch: list[Any]) -> list[Any]:
        invoke = self.invoke
        for v in batch:
            invoke(v, None)
        return []

    def close(self) -> None:
        close_function(self.fn)


class CollectSinkOperator(StreamOperator):
    """Hands every epoch's records to the driver in the subtask's ack."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer: list[Any] = []

    def process_batch(self, batch: list[Any]) -> list[Any]:
        self.buffer.extend(batch)
        return []

    def sink_result(self) -> Any:
        out, self.buffer = self.buffer, []
        return out


class CollectCommitter(SinkCommitter):
    """Collected records become visible when a checkpoint covers their epoch.

    They are kept in the driver process: a job restored by a new driver starts an empty
    collection (``output_outlives_job`` False).

    With ``exactly_once`` False (at-least-once mode) records are visible as
    soon as their epoch completed, so a replay after a failure adds duplicates.
    Records keep the order (epoch, subtask, arrival).

    An epoch is published at most once: when recovery falls back to a checkpoint
    older than the last committed one (the newest was corrupt), the replayed
    epochs reproduce records that are already visible and are not added again.
    """

    def __init__(self, exactly_once: bool) -> None:
        self.exactly_once = exactly_once
        self.committed: list[Any] = []
        self.pending: dict[int, list[Any]] = {}
        self.committed_up_to = 0

    def prepare(self, epoch: int, results: list[Any]) -> None:
        rows = [r for res in results if res for r in res]
        if self.exactly_once:
            self.pending.setdefault(epoch, []).extend(rows)
        else:
            self.committed.extend(rows)

    def commit(self, up_to_epoch: int) -> None:
        for e in sorted(e for e in self.pending if e <= up_to_epoch):
            rows = self.pending.pop(e)
            if e > self.committed_up_to:
                self.committed.extend(rows)
        self.committed_up_to = max(self.committed_up_to, up_to_epoch)

    def abort(self, after_epoch: int) -> None:
        for e in [e for e in self.pending if e > after_epoch]:
            del self.pending[e]
