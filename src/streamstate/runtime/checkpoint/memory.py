"""In-memory checkpoint storage (Flink's JobManagerCheckpointStorage).

State bytes travel inline in the subtasks' acks and are kept in the driver's memory with
the metadata. Each state is limited to ``max_state_size`` bytes (5 MiB by default, as in
Flink); larger state fails the subtask with :class:`StateSizeExceededError`.

If a ``checkpoint_path`` is given, ``_metadata`` (with the inline state) is also written
there, so the checkpoints survive a driver restart.

Epoch states cannot live in driver memory (workers must read them back), so they go to a
local working directory: ``working_dir`` or ``<tempdir>/streamstate-<uid>/jobs/<job-id>/epochs`` (this user's
private runtime directory, ``runtime/runtime_dir.py``). That
is only reachable by every worker in local mode or on a shared mount; use the file system
storage on a cluster.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from streamstate.errors import (
    CheckpointStorageError,
    ConfigurationError,
    CorruptCheckpointError,
    StateSizeExceededError,
)
from streamstate.runtime.checkpoint.handles import ByteStreamStateHandle, StreamStateHandle
from streamstate.runtime.checkpoint.lock import make_private
from streamstate.runtime.checkpoint.metadata import CheckpointMetadata
from streamstate.runtime.checkpoint.storage import (
    EPOCHS_DIR,
    CheckpointDirectory,
    CheckpointStorageAccess,
    _check_relative_name,
    _url_to_fs,
    load_metadata_from_path,
    verify_state_files,
)
from streamstate.runtime.runtime_dir import OWNER_FILE, claim, remove_empty, runtime_dir, sweep

__all__ = ["DEFAULT_MAX_STATE_SIZE", "MemoryCheckpointStorageAccess"]

log = logging.getLogger("streamstate")

DEFAULT_MAX_STATE_SIZE = 5 * 1024 * 1024


class MemoryCheckpointStorageAccess(CheckpointStorageAccess):
    """Checkpoints in driver memory (optionally mirrored to ``checkpoint_path``)."""

    name = "jobmanager"

    def __init__(
        self,
        max_state_size: int | None = None,
        checkpoint_path: str | None = None,
        working_dir: str | None = None,
    ) -> None:
        super().__init__(working_dir)
        self.max_state_size = DEFAULT_MAX_STATE_SIZE if max_state_size is None else max_state_size
        if self.max_state_size <= 0:
            raise ConfigurationError(f"max_state_size must be > 0, got {self.max_state_size}")
        self.checkpoint_path = checkpoint_path
        self._completed: dict[int, CheckpointMetadata] = {}
        self._dir: CheckpointDirectory | None = None
        #: the driver's default epoch-state base, resolved at initialize_job (no working_dir)
        self._default_base: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Workers never need the driver's completed checkpoints: don't ship them.
        state = dict(self.__dict__)
        state["_completed"] = {}
        return state

    def initialize_job(self, job_id: str) -> None:
        super().initialize_job(job_id)
        if not self.working_dir:
            # the driver's runtime directory, for every worker too: the driver decides where
            # versions go (a worker's own TMPDIR may differ) and checks that the workers see
            # it (checkpoint/sharing.py)
            self._default_base = os.path.join(runtime_dir(), "jobs")
        if self.checkpoint_path is not None:
            self._dir = CheckpointDirectory(self.checkpoint_path, job_id)
        fs, root = self._job_fs()
        try:
            fs.makedirs(root, exist_ok=True)
            make_private(fs, root)
            if not self.working_dir:
                # the default directory is ours: a driver that was killed left its job's
                # epoch state there; this driver's goes when it ends (or by the next sweep)
                claim(root)
                sweep(os.path.dirname(root))
        except OSError as e:
            raise CheckpointStorageError(
                f"cannot create the epoch state directory {root}: {e}"
            ) from e

    def _job_fs(self) -> tuple[Any, str]:
        job = self._require_job()
        # not <tmp>/streamstate: a directory anyone could have made first (runtime_dir.py)
        base = self.working_dir or self._default_base or os.path.join(runtime_dir(), "jobs")
        fs, root = _url_to_fs(base)
        return fs, f"{root.rstrip('/')}/{job}"

    def release_job(self) -> None:
        """The job ended: remove its epoch state directory when nothing is left in it."""
        fs, root = self._job_fs()
        try:
            if not fs.exists(root):
                return
            files = [
                f
                for f in fs.find(root)
                if not f.rstrip("/").endswith("/") and os.path.basename(f) != OWNER_FILE
            ]
            if not files:
                fs.rm(root, recursive=True)
                if not self.working_dir:
                    remove_empty(os.path.dirname(root))  # what is ours in the temp dir
        except OSError as e:
            log.debug("could not remove the empty job directory %s: %s", root, e)

    # -- worker side -------------------------------------------------------------------------

    def write_state(self, checkpoint_id: int, name: str, data: bytes) -> StreamStateHandle:
        """Inline handle; raises :class:`StateSizeExceededError` above ``max_state_size``."""
        _check_relative_name(name, "state name")
        if len(data) > self.max_state_size:
            raise StateSizeExceededError(
                f"state {name!r} of checkpoint {checkpoint_id} is {len(data)} bytes, more than "
                f"the maximum of {self.max_state_size} bytes that JobManagerCheckpointStorage "
                f"keeps in the driver's memory. Use FileSystemCheckpointStorage (e.g. "
                f"env.get_checkpoint_config().set_checkpoint_storage_dir('file:///...')) or "
                f"raise max_state_size"
            )
        return ByteStreamStateHandle.of(bytes(data))

    def _epoch_fs(self) -> tuple[Any, str]:
        fs, root = self._job_fs()
        return fs, f"{root}/{EPOCHS_DIR}"

    # -- driver side -------------------------------------------------------------------------

    def store_metadata(self, metadata: CheckpointMetadata) -> str:
        self._require_job()
        location = f"memory:{self.job_id}/chk-{metadata.checkpoint_id}"
        if self._dir is not None:
            location = self._dir.store_metadata(metadata)
        self._completed[metadata.checkpoint_id] = metadata
        return location

    def list_checkpoints(self) -> list[int]:
        ids = set(self._completed)
        if self._dir is not None:
            ids.update(self._dir.list_checkpoints())
        return sorted(ids)

    def max_checkpoint_id_in_use(self) -> int:
        n = max(self._completed, default=0)
        if self._dir is not None:
            n = max(n, self._dir.max_checkpoint_id_in_use())
        return n

    def checkpoint_location(self, checkpoint_id: int) -> str | None:
        return None if self._dir is None else self._dir.checkpoint_url(checkpoint_id)

    def load_metadata(self, checkpoint: int | str, verify: bool = True) -> CheckpointMetadata:
        if isinstance(checkpoint, str):
            return load_metadata_from_path(checkpoint, verify)
        self._require_job()
        md = self._completed.get(checkpoint)
        if md is not None:
            if verify:
                verify_state_files(md, f"{self.job_id}/chk-{checkpoint} (in memory)")
            return md
        if self._dir is not None:
            return self._dir.load_metadata(checkpoint, verify)
        raise CorruptCheckpointError(
            f"checkpoint {checkpoint} of job {self.job_id} is not in the driver's memory: it "
            f"never completed or was discarded"
        )

    def discard_checkpoint(self, checkpoint_id: int) -> None:
        self._completed.pop(checkpoint_id, None)
        if self._dir is not None:
            self._dir.discard_checkpoint(checkpoint_id)
