"""State backends, as ``pyflink.datastream.state_backend``.

A state backend is configuration only: it names the keyed/operator state backend
implementation (``backend_name``, looked up in :mod:`streamstate.runtime.state.registry`
by the runtime) that holds working state inside the subtasks. Where checkpoints go is the
job's :class:`~streamstate.datastream.checkpoint_storage.CheckpointStorage`; the legacy
backends (:class:`MemoryStateBackend`, :class:`FsStateBackend`) bundle both, as in Flink:
they expose the storage they imply through :meth:`StateBackend.get_implied_checkpoint_storage`.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from streamstate.datastream.checkpoint_storage import (
    CheckpointStorage,
    FileSystemCheckpointStorage,
    JobManagerCheckpointStorage,
)
from streamstate.runtime.errors import ConfigurationError

__all__ = [
    "FsStateBackend",
    "HashMapStateBackend",
    "MemoryStateBackend",
    "StateBackend",
]


def _check_async_flag(value: bool | None) -> None:
    if value not in (None, True, False):
        raise ConfigurationError(
            f"using_asynchronous_snapshots must be None, True or False, got {value!r}"
        )


class StateBackend:
    """Defines how working state is held inside subtasks.

    ``backend_name``: the keyed state backend implementation in the runtime registry.
    """

    backend_name: ClassVar[str] = ""

    def create_keyed_backend(self, **kwargs: Any) -> Any:
        """A keyed state backend of kind ``backend_name`` from the runtime registry.

        ``kwargs`` are the ``KeyedStateBackend`` constructor arguments (see
        :func:`streamstate.runtime.state.registry.create_keyed_backend`).
        """
        # Imported lazily: the public API must stay importable without the runtime backends.
        from streamstate.runtime.state.registry import create_keyed_backend

        return create_keyed_backend(self.backend_name, **kwargs)

    def get_implied_checkpoint_storage(self) -> CheckpointStorage | None:
        """The checkpoint storage this backend implies (legacy backends), else None."""
        return None

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return (type(self), self.backend_name).__hash__()

    def __repr__(self) -> str:
        args = ", ".join(f"{k.lstrip('_')}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class HashMapStateBackend(StateBackend):
    """Working state as Python objects in per-key-group hash maps inside each subtask.

    Checkpoints go to the configured checkpoint storage.
    """

    backend_name = "hashmap"

    def __init__(self) -> None:
        pass


class MemoryStateBackend(HashMapStateBackend):
    """Deprecated: :class:`HashMapStateBackend` + :class:`JobManagerCheckpointStorage`.

    ``max_state_size`` limits every state (default 5 MiB); ``checkpoint_path`` optionally
    persists checkpoint metadata; ``using_asynchronous_snapshots`` has no effect.
    """

    #: The default maximal size that the snapshotted memory state may have (5 MiBytes).
    DEFAULT_MAX_STATE_SIZE = JobManagerCheckpointStorage.DEFAULT_MAX_STATE_SIZE

    def __init__(
        self,
        checkpoint_path: str | os.PathLike[str] | None = None,
        savepoint_path: str | os.PathLike[str] | None = None,
        max_state_size: int | None = None,
        using_asynchronous_snapshots: bool | None = None,
    ) -> None:
        _check_async_flag(using_asynchronous_snapshots)
        self._storage = JobManagerCheckpointStorage(checkpoint_path, max_state_size)
        self._savepoint_path = None if savepoint_path is None else os.fspath(savepoint_path)
        self._using_asynchronous_snapshots = using_asynchronous_snapshots

    def get_max_state_size(self) -> int:
        return self._storage.get_max_state_size()

    def get_checkpoint_path(self) -> str | None:
        return self._storage.get_checkpoint_path()

    def get_savepoint_path(self) -> str | None:
        return self._savepoint_path

    def is_using_asynchronous_snapshots(self) -> bool:
        """Always True: snapshots are taken at epoch boundaries and written asynchronously."""
        return True

    def get_implied_checkpoint_storage(self) -> JobManagerCheckpointStorage:
        return self._storage


class FsStateBackend(HashMapStateBackend):
    """Deprecated: :class:`HashMapStateBackend` + :class:`FileSystemCheckpointStorage`.

    Prefer ``env.set_state_backend(HashMapStateBackend())`` and
    ``env.get_checkpoint_config().set_checkpoint_storage_dir(uri)``.
    """

    def __init__(
        self,
        checkpoint_directory_uri: str | os.PathLike[str] | None = None,
        default_savepoint_directory_uri: str | os.PathLike[str] | None = None,
        file_state_size_threshold: int | None = None,
        write_buffer_size: int | None = None,
        using_asynchronous_snapshots: bool | None = None,
    ) -> None:
        if checkpoint_directory_uri is None:
            raise ConfigurationError("The parameter 'checkpoint_directory_uri' is required!")
        _check_async_flag(using_asynchronous_snapshots)
        self._storage = FileSystemCheckpointStorage(
            checkpoint_directory_uri,
            file_state_size_threshold,
            -1 if write_buffer_size is None else write_buffer_size,
        )
        self._savepoint_path = (
            None
            if default_savepoint_directory_uri is None
            else os.fspath(default_savepoint_directory_uri)
        )
        self._using_asynchronous_snapshots = using_asynchronous_snapshots

    def get_checkpoint_path(self) -> str:
        return self._storage.get_checkpoint_path()

    def get_savepoint_path(self) -> str | None:
        return self._savepoint_path

    def get_min_file_size_threshold(self) -> int:
        return self._storage.get_min_file_size_threshold()

    def get_write_buffer_size(self) -> int:
        return self._storage.get_write_buffer_size()

    def is_using_asynchronous_snapshots(self) -> bool:
        """Always True: snapshots are taken at epoch boundaries and written asynchronously."""
        return True

    def get_implied_checkpoint_storage(self) -> FileSystemCheckpointStorage:
        return self._storage
