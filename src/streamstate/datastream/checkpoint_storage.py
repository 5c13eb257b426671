"""Checkpoint storage, as ``pyflink.datastream.checkpoint_storage``.

A :class:`CheckpointStorage` is configuration only (cheap, picklable). At job start the
runtime asks it for a :class:`~streamstate.runtime.checkpoint.storage.CheckpointStorageAccess`
(:meth:`CheckpointStorage.create_access`), which does the actual reading and writing.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from streamstate.common._unsupported import unsupported_attribute
from streamstate.errors import ConfigurationError

if TYPE_CHECKING:
    from streamstate.runtime.checkpoint.storage import CheckpointStorageAccess

__all__ = [
    "CheckpointStorage",
    "FileSystemCheckpointStorage",
    "JobManagerCheckpointStorage",
    "checkpoint_storage_from_name",
]


def _normalize_path(path: str | os.PathLike[str] | None) -> str | None:
    """Local paths become absolute (Spark workers run in other working directories)."""
    if path is None:
        return None
    p = os.fspath(path)
    if not p:
        raise ConfigurationError("a checkpoint path must not be empty")
    if "://" in p:
        return p
    return os.path.abspath(os.path.expanduser(p))


class CheckpointStorage(ABC):
    """Where checkpoints go: :class:`JobManagerCheckpointStorage` (driver memory, small state,
    testing) or :class:`FileSystemCheckpointStorage` (any fsspec URL; production).

    ``storage_name`` is the name under which the runtime access class is registered
    (``execution.checkpointing.storage``).
    """

    storage_name: ClassVar[str] = ""

    @abstractmethod
    def create_access(self, working_dir: str | None = None) -> CheckpointStorageAccess:
        """A fresh runtime access object (call ``initialize_job`` on it before use)."""

    def get_checkpoint_path(self) -> str | None:
        return None

    def get_savepoint_path(self) -> str | None:
        return None

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return (type(self), tuple(sorted(vars(self).items()))).__hash__()

    def __repr__(self) -> str:
        args = ", ".join(f"{k.lstrip('_')}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class JobManagerCheckpointStorage(CheckpointStorage):
    """Checkpoints state into the driver's memory (Flink: the JobManager's).

    For experimentation and small state only: every state must fit ``max_state_size``
    (default :data:`DEFAULT_MAX_STATE_SIZE`, 5 MiB); a larger state fails the subtask with
    :class:`~streamstate.errors.StateSizeExceededError`. If ``checkpoint_path`` is
    given, checkpoint metadata (with the inline state) is also persisted there.
    """

    storage_name = "jobmanager"

    #: The default maximal size that the snapshotted memory state may have (5 MiBytes).
    DEFAULT_MAX_STATE_SIZE = 5 * 1024 * 1024

    def __init__(
        self,
        checkpoint_path: str | os.PathLike[str] | None = None,
        max_state_size: int | None = None,
    ) -> None:
        if max_state_size is None:
            max_state_size = self.DEFAULT_MAX_STATE_SIZE
        if isinstance(max_state_size, bool) or not isinstance(max_state_size, int):
            raise ConfigurationError(f"max_state_size must be an int, got {max_state_size!r}")
        if max_state_size <= 0:
            raise ConfigurationError(f"max_state_size must be > 0, got {max_state_size}")
        self._checkpoint_path = _normalize_path(checkpoint_path)
        self._max_state_size = max_state_size

    def get_checkpoint_path(self) -> str | None:
        """The directory checkpoint metadata is persisted to, or None (memory only)."""
        return self._checkpoint_path

    def get_max_state_size(self) -> int:
        """The maximum size an individual state may have, in bytes."""
        return self._max_state_size

    def create_access(self, working_dir: str | None = None) -> CheckpointStorageAccess:
        from streamstate.runtime.checkpoint.registry import get_checkpoint_storage_class

        cls = get_checkpoint_storage_class(self.storage_name)
        return cls(  # type: ignore[call-arg]  # every registered access class takes these keyword arguments
            max_state_size=self._max_state_size,
            checkpoint_path=self._checkpoint_path,
            working_dir=working_dir,
        )


class FileSystemCheckpointStorage(CheckpointStorage):
    """Checkpoints state as files under ``checkpoint_path`` (local path or fsspec URL:
    ``file:///...``, ``memory://...``, ``s3://...``, ``hdfs://...``).

    Each checkpoint stores its files in ``<checkpoint_path>/<job-id>/chk-<n>/``.

    ``file_state_size_threshold``: state smaller than this is kept inline in the metadata
    rather than in a file (``None``/-1: every state goes to a file; at most
    :data:`MAX_FILE_STATE_THRESHOLD`). ``write_buffer_size`` is accepted for PyFlink
    compatibility (fsspec buffers writes itself).
    """

    storage_name = "filesystem"

    #: Maximum size of state that is stored with the metadata, rather than in files (1 MiByte).
    MAX_FILE_STATE_THRESHOLD = 1024 * 1024
    #: Write buffer size used when ``write_buffer_size`` is -1 (as Flink's default).
    DEFAULT_WRITE_BUFFER_SIZE = 4096

    def __init__(
        self,
        checkpoint_path: str | os.PathLike[str] | None = None,
        file_state_size_threshold: int | None = None,
        write_buffer_size: int = -1,
    ) -> None:
        if checkpoint_path is None:
            raise ConfigurationError(
                "checkpoint_path must not be None: FileSystemCheckpointStorage needs a "
                "directory (local path or fsspec URL such as 'file:///data/checkpoints')"
            )
        if file_state_size_threshold is None:
            file_state_size_threshold = -1
        if not -1 <= file_state_size_threshold <= self.MAX_FILE_STATE_THRESHOLD:
            raise ConfigurationError(
                f"file_state_size_threshold must be -1 (default) or in [0, "
                f"{self.MAX_FILE_STATE_THRESHOLD}], got {file_state_size_threshold}"
            )
        if write_buffer_size is None:
            write_buffer_size = -1
        if write_buffer_size < -1 or write_buffer_size == 0:
            raise ConfigurationError(
                f"write_buffer_size must be -1 (default) or > 0, got {write_buffer_size}"
            )
        self._checkpoint_path = _normalize_path(checkpoint_path)
        self._file_state_size_threshold = file_state_size_threshold
        self._write_buffer_size = write_buffer_size

    def get_checkpoint_path(self) -> str:
        """The base directory; the job's directory ``<job-id>/`` is created inside it."""
        assert self._checkpoint_path is not None
        return self._checkpoint_path

    def get_min_file_size_threshold(self) -> int:
        """Bytes below which state is inlined in the metadata (0: never inlined)."""
        return max(0, self._file_state_size_threshold)

    def get_write_buffer_size(self) -> int:
        return (
            self.DEFAULT_WRITE_BUFFER_SIZE
            if self._write_buffer_size == -1
            else self._write_buffer_size
        )

    def create_access(self, working_dir: str | None = None) -> CheckpointStorageAccess:
        from streamstate.runtime.checkpoint.registry import get_checkpoint_storage_class

        cls = get_checkpoint_storage_class(self.storage_name)
        return cls(  # type: ignore[call-arg]  # every registered access class takes these keyword arguments
            checkpoint_path=self.get_checkpoint_path(),
            file_state_size_threshold=self.get_min_file_size_threshold(),
            working_dir=working_dir,
        )


# the concrete classes, whose constructors take checkpoint_path first (the ABC's takes nothing)
_BY_NAME: dict[str, Callable[..., CheckpointStorage]] = {
    JobManagerCheckpointStorage.storage_name: JobManagerCheckpointStorage,
    FileSystemCheckpointStorage.storage_name: FileSystemCheckpointStorage,
}


def checkpoint_storage_from_name(
    name: str, checkpoint_path: str | None = None, **kwargs: Any
) -> CheckpointStorage:
    """The storage ``name`` ("jobmanager" | "filesystem") configured with ``checkpoint_path``.

    Raises ConfigurationError listing the accepted names for any other name.
    """
    cls = _BY_NAME.get(name.strip().lower())
    if cls is None:
        raise ConfigurationError(
            f"unknown checkpoint storage {name!r}; accepted: {', '.join(sorted(_BY_NAME))}"
        )
    return cls(checkpoint_path, **kwargs)


if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
