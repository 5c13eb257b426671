"""Write-ahead sinks (Flink's ``GenericWriteAheadSink`` and ``CheckpointCommitter``).

``ds.add_sink(MySink(FileSystemCheckpointCommitter(path)))`` where ``MySink`` subclasses
:class:`GenericWriteAheadSink` and implements ``send_values``; a checkpoint's records
are written once it completed, and the committer records which (checkpoint, subtask)
were written. :class:`PostgresWriteAheadSink` writes rows and the commit record in one
PostgreSQL transaction (exactly-once without prepared transactions).
"""

from __future__ import annotations

from streamstate.connectors.postgres import PostgresCheckpointCommitter, PostgresWriteAheadSink
from streamstate.connectors.write_ahead import (
    CheckpointCommitter,
    FileSystemCheckpointCommitter,
    GenericWriteAheadSink,
)

__all__ = [
    "CheckpointCommitter",
    "FileSystemCheckpointCommitter",
    "GenericWriteAheadSink",
    "PostgresCheckpointCommitter",
    "PostgresWriteAheadSink",
]
