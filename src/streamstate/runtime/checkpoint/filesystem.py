"""File system checkpoint storage (Flink's FileSystemCheckpointStorage) over fsspec.

``checkpoint_path`` is a local path or any fsspec URL (``file://``, ``memory://``,
``s3://``, ``hdfs://``, ...). Layout: see :mod:`streamstate.runtime.checkpoint.storage`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from streamstate.errors import CheckpointStorageError, ConfigurationError
from streamstate.runtime.checkpoint.handles import (
    ByteStreamStateHandle,
    FileStateHandle,
    StreamStateHandle,
)
from streamstate.runtime.checkpoint.lock import JobLock, is_local, make_private
from streamstate.runtime.checkpoint.metadata import CheckpointMetadata
from streamstate.runtime.checkpoint.storage import (
    EPOCHS_DIR,
    SHARED_DIR,
    CheckpointDirectory,
    CheckpointStorageAccess,
    _check_relative_name,
    _join,
    _url_to_fs,
    abort_open_uploads,
    load_metadata_from_path,
)
from streamstate.runtime.stores import explain_access_error
from streamstate.runtime.stores.files import link_file

__all__ = ["FileSystemCheckpointStorageAccess"]

log = logging.getLogger("streamstate")


class FileSystemCheckpointStorageAccess(CheckpointStorageAccess):
    """Checkpoint files and ``_metadata`` under ``<checkpoint_path>/<job-id>/chk-<n>/``.

    ``file_state_size_threshold``: state smaller than this many bytes is kept inline in the
    metadata instead of in a file (Flink's small-file optimisation). The default 0 means
    every state goes to a file: our subtasks write one file per operator and epoch, so
    there are few small files to avoid.
    """

    name = "filesystem"

    def __init__(
        self,
        checkpoint_path: str,
        file_state_size_threshold: int = 0,
        working_dir: str | None = None,
    ) -> None:
        super().__init__(working_dir)
        if not checkpoint_path:
            raise ConfigurationError(
                "FileSystemCheckpointStorage needs a checkpoint directory: set "
                "'execution.checkpointing.dir' or call set_checkpoint_storage_dir(...)"
            )
        self.checkpoint_path = str(checkpoint_path)
        self.file_state_size_threshold = max(0, int(file_state_size_threshold))
        self._dir: CheckpointDirectory | None = None

    def initialize_job(self, job_id: str) -> None:
        super().initialize_job(job_id)
        self._dir = CheckpointDirectory(self.checkpoint_path, job_id)
        url = self._dir.url(self._dir.job_path)
        try:
            self._dir.fs.makedirs(self._dir.job_path, exist_ok=True)
            make_private(self._dir.fs, self._dir.job_path)
            self._lock = JobLock(self._dir.fs, self._dir.job_path, job_id).acquire()
        except CheckpointStorageError:
            raise
        except Exception as e:
            explained = explain_access_error(self._dir.fs, url, e)
            if explained is not None:
                raise explained from e
            if not isinstance(e, OSError):
                raise
            raise CheckpointStorageError(f"cannot create checkpoint directory {url}: {e}") from e

    def release_job(self) -> None:
        """The job ended: give up the job directory's lock, and remove the directory when
        no file is left in it (no checkpoint retained: an empty ``<dir>/<job-id>/`` would
        only make ``streamstate checkpoints`` list a job without checkpoints)."""
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()
        if self._dir is None:
            return
        fs, job_path = self._dir.fs, self._dir.job_path
        try:
            if fs.exists(job_path) and not fs.find(job_path):
                fs.rm(job_path, recursive=True)
        except OSError as e:
            log.debug("could not remove the empty job directory %s: %s", job_path, e)

    def _directory(self) -> CheckpointDirectory:
        self._require_job()
        assert self._dir is not None
        return self._dir

    @property
    def job_url(self) -> str:
        d = self._directory()
        return d.url(d.job_path)

    # -- worker side -------------------------------------------------------------------------

    def write_state(self, checkpoint_id: int, name: str, data: bytes) -> StreamStateHandle:
        """Atomically write ``chk-<checkpoint_id>/<name>``; returns a FileStateHandle.

        Below ``file_state_size_threshold`` bytes, returns an inline handle instead.
        """
        _check_relative_name(name, "state name")
        if name.split("/", 1)[0] == "_metadata":
            raise ConfigurationError("state name '_metadata' is reserved for checkpoint metadata")
        if 0 < len(data) < self.file_state_size_threshold:
            return ByteStreamStateHandle.of(bytes(data))
        d = self._directory()
        return d.write_file(_join(d.checkpoint_path(checkpoint_id), name), bytes(data))

    def write_shared_state(self, name: str, data: bytes) -> FileStateHandle | None:
        _check_relative_name(name, "shared state name")
        d = self._directory()
        return d.write_file(_join(d.job_path, SHARED_DIR, name), bytes(data))

    def link_shared_state(self, name: str, handle: FileStateHandle) -> FileStateHandle | None:
        """``handle``'s file as ``shared/<name>`` by a hard link, when both are local files
        (``None`` otherwise: the caller copies the bytes). The file must never change."""
        _check_relative_name(name, "shared state name")
        d = self._directory()
        src_fs, src = _url_to_fs(handle.path)
        if not (is_local(d.fs) and is_local(src_fs)):
            return None
        path = _join(d.job_path, SHARED_DIR, name)
        if not link_file(d.fs, src, path):
            return None
        return FileStateHandle(d.url(path), handle.size, handle.crc, handle.sha256)

    def shared_state_files(self) -> list[str]:
        d = self._directory()
        root = _join(d.job_path, SHARED_DIR)
        try:
            found = d.fs.find(root)
        except FileNotFoundError:
            return []
        return [d.fs.unstrip_protocol(p) for p in found]

    def cleanup_shared_state(
        self, referenced: set[str], up_to_checkpoint_id: int, checkpoint_id_of: Any
    ) -> list[str]:
        """As the base class, and on an object store also aborts the multipart uploads of
        ``shared/`` files by checkpoints up to ``up_to_checkpoint_id`` (an SST above the
        single-PUT size whose uploader died)."""
        deleted = super().cleanup_shared_state(referenced, up_to_checkpoint_id, checkpoint_id_of)
        d = self._directory()

        def abandoned(path: str) -> bool:
            cid = checkpoint_id_of(path.rstrip("/").rsplit("/", 1)[-1])
            return cid is not None and cid <= up_to_checkpoint_id

        abort_open_uploads(d.fs, _join(d.job_path, SHARED_DIR), abandoned)
        return deleted

    def _epoch_fs(self) -> tuple[Any, str]:
        d = self._directory()
        return d.fs, _join(d.job_path, EPOCHS_DIR)

    # -- driver side -------------------------------------------------------------------------

    def store_metadata(self, metadata: CheckpointMetadata) -> str:
        return self._directory().store_metadata(metadata)

    def list_checkpoints(self) -> list[int]:
        return self._directory().list_checkpoints()

    def max_checkpoint_id_in_use(self) -> int:
        return self._directory().max_checkpoint_id_in_use()

    def checkpoint_location(self, checkpoint_id: int) -> str | None:
        return self._directory().checkpoint_url(checkpoint_id)

    def load_metadata(self, checkpoint: int | str, verify: bool = True) -> CheckpointMetadata:
        if isinstance(checkpoint, str):
            return load_metadata_from_path(checkpoint, verify)
        return self._directory().load_metadata(checkpoint, verify)

    def discard_checkpoint(self, checkpoint_id: int) -> None:
        self._directory().discard_checkpoint(checkpoint_id)

    def discard_incomplete_checkpoints(self, before: int, keep: Iterable[int] = ()) -> list[int]:
        kept = set(keep)
        d = self._directory()
        gone = [n for n in d.incomplete_checkpoints() if n < before and n not in kept]
        for n in gone:
            d.discard_checkpoint(n)
        return gone
