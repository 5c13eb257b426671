"""Write-ahead sinks: Flink's ``GenericWriteAheadSink`` and ``CheckpointCommitter``.

A :class:`GenericWriteAheadSink` keeps every record it receives in operator state (the
write-ahead log) until a checkpoint covering it completes; then (on
``notify_checkpoint_complete``, in the subtask) it hands that checkpoint's records to
``send_values`` and, when that returns True, records the (checkpoint, subtask) as
written in its :class:`CheckpointCommitter`. A replay (after a failure, or a restore)
asks the committer first and skips what was written, so no checkpoint is sent twice,
*except* when the failure falls between ``send_values`` and ``commit_checkpoint``: then
that one checkpoint's records are sent again (as in Flink). Make ``send_values``
idempotent (e.g. upserts, files named by checkpoint and subtask), or write the values
and the commit record in one transaction (:class:`PostgresCheckpointCommitter` offers
``commit_checkpoint(..., connection=...)`` for that).

Committers: :class:`FileSystemCheckpointCommitter` (one marker file per job, operator,
subtask and checkpoint, written atomically, under a base directory; any fsspec URL) and
``streamstate.connectors.postgres.PostgresCheckpointCommitter`` (a table).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from typing import Any

from streamstate.api.checkpointing import CheckpointedFunction, CheckpointListener
from streamstate.api.functions import SinkFunction
from streamstate.errors import ConfigurationError

__all__ = ["CheckpointCommitter", "FileSystemCheckpointCommitter", "GenericWriteAheadSink"]

WAL_STATE = "_write_ahead_log_"


class CheckpointCommitter(ABC):
    """Records which checkpoints of which subtask a write-ahead sink has written.

    ``job_id`` and ``operator_id`` are set by the sink before ``open`` (a write-ahead
    sink keeps its job id in its state, so a restored job asks about its own
    checkpoints, and a new job never mistakes an earlier job's records for its own).
    """

    job_id: str = ""
    operator_id: str = ""

    def set_job_id(self, job_id: str) -> None:
        self.job_id = job_id

    def set_operator_id(self, operator_id: str) -> None:
        self.operator_id = operator_id

    def open(self) -> None:  # noqa: B027 - optional hook
        """Connect (called in the subtask before the first use)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Disconnect."""

    def create_resource(self) -> None:  # noqa: B027 - optional hook
        """Create what the committer needs (a table, a directory); idempotent."""

    @abstractmethod
    def commit_checkpoint(self, subtask_idx: int, checkpoint_id: int) -> None:
        """Record that ``subtask_idx`` wrote everything of ``checkpoint_id``."""

    @abstractmethod
    def is_checkpoint_committed(self, subtask_idx: int, checkpoint_id: int) -> bool:
        """Whether ``commit_checkpoint(subtask_idx, checkpoint_id)`` happened."""


class FileSystemCheckpointCommitter(CheckpointCommitter):
    """One empty marker file ``<base>/<job>/<operator>/<subtask>/<checkpoint>`` per commit."""

    def __init__(self, base_path: str) -> None:
        self.base_path = base_path.rstrip("/")

    def _path(self, subtask_idx: int, checkpoint_id: int) -> str:
        return f"{self.base_path}/{self.job_id}/{self.operator_id}/{subtask_idx}/{checkpoint_id}"

    def create_resource(self) -> None:
        import fsspec

        fs, p = fsspec.core.url_to_fs(self.base_path)
        fs.makedirs(p, exist_ok=True)

    def commit_checkpoint(self, subtask_idx: int, checkpoint_id: int) -> None:
        import fsspec

        from streamstate.runtime.checkpoint.storage import atomic_write

        fs, p = fsspec.core.url_to_fs(self._path(subtask_idx, checkpoint_id))
        atomic_write(fs, p, b"")

    def is_checkpoint_committed(self, subtask_idx: int, checkpoint_id: int) -> bool:
        import fsspec

        fs, p = fsspec.core.url_to_fs(self._path(subtask_idx, checkpoint_id))
        return bool(fs.exists(p))


class GenericWriteAheadSink(SinkFunction, CheckpointedFunction, CheckpointListener):
    """Base class of sinks that write a checkpoint's records once it completed.

    Subclasses implement ``send_values(values, checkpoint_id, timestamp) -> bool``
    (True: written; False: keep them and try again at the next completed checkpoint).
    Use with ``ds.add_sink(sink)`` and checkpointing on: without a checkpoint nothing
    is ever written. ``job_id``: the committer's job id (default: drawn when the job
    starts fresh, then kept in the sink's state across restores).
    """

    def __init__(self, committer: CheckpointCommitter, job_id: str | None = None) -> None:
        if not isinstance(committer, CheckpointCommitter):
            raise ConfigurationError(
                f"GenericWriteAheadSink needs a CheckpointCommitter (e.g. "
                f"FileSystemCheckpointCommitter(path)), got {type(committer).__name__}"
            )
        self.committer = committer
        self.job_id = job_id
        self._buffer: list[Any] = []
        self._pending: list[dict[str, Any]] = []
        self._state: Any = None
        self._subtask = 0
        #: the subtask whose values ``send_values`` is writing (its index before a rescale)
        self._sending_subtask = 0
        self._restored_jobs: dict[int, str] = {}

    @abstractmethod
    def send_values(self, values: list[Any], checkpoint_id: int, timestamp: int) -> bool:
        """Write ``values`` (all records of one subtask up to ``checkpoint_id``)."""

    # -- lifecycle --------------------------------------------------------------------------
    def initialize_state(self, context: Any) -> None:
        from streamstate.api.state import ListStateDescriptor

        self._state = context.get_operator_state_store().get_list_state(
            ListStateDescriptor(WAL_STATE)
        )
        self._buffer, self._pending, self._restored_jobs = [], [], {}
        for entry in self._state.get() if context.is_restored() else []:
            if entry["kind"] == "job":
                self._restored_jobs[entry["subtask"]] = entry["job"]
            elif entry["kind"] == "pending":
                self._pending.append(entry)
            else:
                self._buffer.extend(entry["values"])
        self._pending.sort(key=lambda e: e["checkpoint"])

    def open(self, runtime_context: Any) -> None:
        self._subtask = runtime_context.get_index_of_this_subtask()
        if self.job_id is None:
            self.job_id = self._restored_jobs.get(self._subtask) or uuid.uuid4().hex
        self.committer.set_job_id(self.job_id)
        self.committer.set_operator_id(runtime_context.get_task_name().replace("/", "_"))
        self.committer.open()
        self.committer.create_resource()

    def close(self) -> None:
        self.committer.close()

    # -- records and checkpoints ------------------------------------------------------------
    def invoke(self, value: Any, context: Any) -> None:
        self._buffer.append(value)

    def snapshot_state(self, context: Any) -> None:
        cid = context.get_checkpoint_id()
        if cid is not None and self._buffer:
            self._pending.append(
                {
                    "kind": "pending",
                    "job": self.job_id,
                    "subtask": self._subtask,
                    "checkpoint": cid,
                    "timestamp": context.get_checkpoint_timestamp(),
                    "values": self._buffer,
                }
            )
            self._buffer = []
        entries: list[Any] = [{"kind": "job", "subtask": self._subtask, "job": self.job_id}]
        entries.extend(self._pending)
        if self._buffer:
            entries.append({"kind": "buffer", "values": list(self._buffer)})
        self._state.update(entries)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Write every pending checkpoint up to ``checkpoint_id`` not yet committed."""
        kept = []
        for entry in self._pending:
            if entry["checkpoint"] > checkpoint_id or not self._write(entry):
                kept.append(entry)
        self._pending = kept

    def _write(self, entry: dict[str, Any]) -> bool:
        committer = self.committer
        committer.set_job_id(entry["job"])
        try:
            if committer.is_checkpoint_committed(entry["subtask"], entry["checkpoint"]):
                return True  # written before a failure: never twice
            self._sending_subtask = entry["subtask"]
            if not self.send_values(entry["values"], entry["checkpoint"], entry["timestamp"]):
                return False
            committer.commit_checkpoint(entry["subtask"], entry["checkpoint"])
            return True
        finally:
            committer.set_job_id(str(self.job_id))
