"""Where a savepoint's files go: one self-contained, relocatable directory.

A savepoint (``JobClient.trigger_savepoint``) is written into a fresh directory
``<target dir>/savepoint-<job id prefix>-<random>``: every state file of every subtask (in
the NATIVE format of RocksDB, every SST file too: nothing is shared with checkpoints), then
``_metadata`` last, once and atomically, so a directory without ``_metadata`` is never a
savepoint. File handles in its ``_metadata`` hold paths relative to the directory: move or
copy it (to another disk, to ``s3://``) and it restores from there.

:class:`SavepointTarget` is picklable: the driver sends it to the subtasks of the epoch
that carries the savepoint; they write through it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from streamstate.errors import CheckpointStorageError
from streamstate.runtime.checkpoint.handles import FileStateHandle, checksum, digest
from streamstate.runtime.checkpoint.lock import is_local, make_private
from streamstate.runtime.checkpoint.metadata import CheckpointMetadata
from streamstate.runtime.checkpoint.storage import (
    METADATA_FILE_NAME,
    _check_relative_name,
    _join,
    _url_to_fs,
    atomic_write,
    write_once_or_fail,
)

__all__ = ["SavepointTarget"]


@dataclass
class SavepointTarget:
    """The directory of one savepoint, and how to write into it."""

    url: str
    #: True: the state backend's own files (RocksDB SSTs); False: the canonical format
    native: bool = False
    #: stop the job once the savepoint completed (stop-with-savepoint)
    stop: bool = False
    #: emit the final watermark before the savepoint (stop_with_savepoint's flag)
    advance_to_end_of_event_time: bool = False
    #: savepoints never share files with checkpoints or with other savepoints
    self_contained: bool = field(default=True, init=False)

    @staticmethod
    def create(directory: str, job_id: str, native: bool = False, **kw: Any) -> SavepointTarget:
        """A fresh savepoint directory under ``directory`` (created now, on the driver)."""
        fs, root = _url_to_fs(directory)
        path = _join(root, f"savepoint-{job_id[:6]}-{uuid.uuid4().hex[:12]}")
        try:
            fs.makedirs(path, exist_ok=False)
            make_private(fs, path)
        except OSError as e:
            raise CheckpointStorageError(
                f"cannot create a savepoint under {directory}: {e}. Pass a directory that "
                f"can be created and written (or set execution.checkpointing.savepoint-dir)"
            ) from e
        # a plain path on the local file system, a URL elsewhere
        return SavepointTarget(path if is_local(fs) else fs.unstrip_protocol(path), native, **kw)

    def _write(self, name: str, data: bytes) -> FileStateHandle:
        _check_relative_name(name, "savepoint file name")
        fs, root = _url_to_fs(self.url)
        atomic_write(fs, _join(root, name), data)
        # relative path: resolved against the savepoint's directory when it is loaded
        return FileStateHandle(name, len(data), checksum(data), digest(data))

    def write_state(self, checkpoint_id: int, name: str, data: bytes) -> FileStateHandle:
        """A state file of the savepoint (``checkpoint_id`` names nothing here)."""
        return self._write(name, data)

    def write_shared_state(self, name: str, data: bytes) -> FileStateHandle:
        """RocksDB's SST files: in the savepoint's own directory, never shared."""
        return self._write(f"sst-{name}", data)

    def write_shared_file(self, name: str, local_path: str) -> FileStateHandle:
        """:meth:`write_shared_state` of the bytes of the local file ``local_path``."""
        with open(local_path, "rb") as f:
            return self.write_shared_state(name, f.read())

    def store_metadata(self, metadata: CheckpointMetadata) -> str:
        """Write ``_metadata`` last (atomically): only now is this a savepoint."""
        fs, root = _url_to_fs(self.url)
        path = _join(root, METADATA_FILE_NAME)
        write_once_or_fail(fs, path, metadata.to_file_bytes(), "this savepoint")
        return self.url
