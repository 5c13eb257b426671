"""State backends, as ``pyflink.datastream.state_backend``.

A state backend is configuration only: it names the keyed/operator state backend
implementation (``backend_name``, looked up in :mod:`streamstate.runtime.state.registry`
by the runtime) that holds working state inside the subtasks. Where checkpoints go is the
job's :class:`~streamstate.datastream.checkpoint_storage.CheckpointStorage`; the legacy
backends (:class:`MemoryStateBackend`, :class:`FsStateBackend`) bundle both, as in Flink:
they expose the storage they imply through :meth:`StateBackend.get_implied_checkpoint_storage`.
"""

from __future__ import annotations

import enum
import os
from typing import TYPE_CHECKING, Any, ClassVar

from streamstate.common._unsupported import unsupported_attribute
from streamstate.datastream.checkpoint_storage import (
    CheckpointStorage,
    FileSystemCheckpointStorage,
    JobManagerCheckpointStorage,
)
from streamstate.errors import ConfigurationError

__all__ = [
    "EmbeddedRocksDBStateBackend",
    "FsStateBackend",
    "HashMapStateBackend",
    "MemoryStateBackend",
    "PredefinedOptions",
    "RocksDBStateBackend",
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

        return create_keyed_backend(self.backend_name, **{**self.backend_options(), **kwargs})

    def backend_options(self) -> dict[str, Any]:
        """Extra keyword arguments for the runtime keyed backend (picklable; default none)."""
        return {}

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
        """False, whatever was asked: a subtask writes its snapshot at the end of the epoch
        a checkpoint covers, inside that epoch's task (its records wait for it), not in the
        background as Flink's asynchronous snapshots do."""
        return False

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
        """False, whatever was asked: a subtask writes its snapshot at the end of the epoch
        a checkpoint covers, inside that epoch's task (its records wait for it), not in the
        background as Flink's asynchronous snapshots do."""
        return False

    def get_implied_checkpoint_storage(self) -> FileSystemCheckpointStorage:
        return self._storage


class PredefinedOptions(enum.Enum):
    """Predefined RocksDB option profiles, as Flink's ``PredefinedOptions``.

    ``DEFAULT`` keeps RocksDB's defaults (plus what the backend always sets);
    ``SPINNING_DISK_OPTIMIZED`` favours large sequential I/O (bigger write buffers and
    files, fewer open files); ``SPINNING_DISK_OPTIMIZED_HIGH_MEM`` also uses a large
    block cache and write buffers; ``FLASH_SSD_OPTIMIZED`` uses more background threads.
    """

    DEFAULT = 0
    SPINNING_DISK_OPTIMIZED = 1
    SPINNING_DISK_OPTIMIZED_HIGH_MEM = 2
    FLASH_SSD_OPTIMIZED = 3


def _check_ternary(name: str, value: bool | None) -> None:
    if value not in (None, True, False):
        raise ConfigurationError(
            f"Unsupported input for {name!r}: {value!r}; the value of the parameter should be "
            f"None or True or False."
        )


class EmbeddedRocksDBStateBackend(StateBackend):
    """Keyed state in an embedded RocksDB database per subtask, on the executor's local disk.

    State can be much larger than memory: it spills to the local directories
    (:meth:`set_db_storage_paths`, ``state.backend.rocksdb.localdir``; default the first
    of ``SPARK_LOCAL_DIRS``, else the system temporary directory). Checkpoints go to the job's checkpoint storage; with
    ``enable_incremental_checkpointing`` only the RocksDB files created since the previous
    checkpoint are uploaded (to the checkpoint directory's ``shared/`` folder).
    ``None`` means "not set" (the default: full checkpoints, or the configuration's
    ``state.backend.incremental``).
    """

    backend_name = "rocksdb"

    def __init__(self, enable_incremental_checkpointing: bool | None = None) -> None:
        _check_ternary("enable_incremental_checkpointing", enable_incremental_checkpointing)
        self._incremental = enable_incremental_checkpointing
        self._paths: list[str] = []
        self._predefined = PredefinedOptions.DEFAULT
        self._options: dict[str, str] = {}
        self._write_buffer_size: int | None = None
        self._block_cache_size: int | None = None
        self._transfer_threads = 4

    def set_db_storage_paths(self, *paths: str | os.PathLike[str]) -> None:
        """Local directories for the databases (the first is used); none: the default."""
        self._paths = [os.fspath(p) for p in paths if p is not None]

    def get_db_storage_paths(self) -> list[str]:
        return list(self._paths)

    def is_incremental_checkpoints_enabled(self) -> bool:
        return bool(self._incremental)

    def set_predefined_options(self, options: PredefinedOptions) -> None:
        if not isinstance(options, PredefinedOptions):
            raise ConfigurationError(
                f"set_predefined_options() takes a PredefinedOptions member, got {options!r}"
            )
        self._predefined = options

    def get_predefined_options(self) -> PredefinedOptions:
        return self._predefined

    def set_options(self, options: dict[str, str] | str) -> None:
        """Raw RocksDB options applied on top of the predefined profile.

        PyFlink takes a Java options-factory class name here; in Python, pass RocksDB
        option strings instead: a dict ``{"write_buffer_size": "8388608"}`` or a string
        ``"write_buffer_size=8388608;level0_file_num_compaction_trigger=8"``. They are
        applied with RocksDB's ``SetOptions`` (mutable column family / DB options); an
        unknown or immutable option fails when the database opens, naming the option.
        """
        self._options = parse_raw_options(options)

    def get_options(self) -> dict[str, str] | None:
        return dict(self._options) or None

    def set_write_buffer_size(self, size: int | None) -> None:
        """Memtable size per state in bytes (``state.backend.rocksdb.writebuffer.size``)."""
        self._write_buffer_size = _positive_or_none("write buffer size", size)

    def set_block_cache_size(self, size: int | None) -> None:
        """Block cache size in bytes (``state.backend.rocksdb.block.cache-size``)."""
        self._block_cache_size = _positive_or_none("block cache size", size)

    def get_number_of_transfer_threads(self) -> int:
        """Accepted for API compatibility; files are transferred by the subtask itself."""
        return self._transfer_threads

    def set_number_of_transfer_threads(self, number_of_transfering_threads: int) -> None:
        self._transfer_threads = int(number_of_transfering_threads)

    def backend_options(self) -> dict[str, Any]:
        return {
            "local_dir": self._paths[0] if self._paths else None,
            "incremental": bool(self._incremental),
            "predefined_options": self._predefined.name,
            "write_buffer_size": self._write_buffer_size,
            "block_cache_size": self._block_cache_size,
            "raw_options": dict(self._options),
        }


class RocksDBStateBackend(EmbeddedRocksDBStateBackend):
    """Deprecated: :class:`EmbeddedRocksDBStateBackend` + :class:`FileSystemCheckpointStorage`.

    ``checkpoint_data_uri`` is where checkpoints go (as with ``FsStateBackend``);
    ``checkpoint_stream_backend`` may be an ``FsStateBackend`` to take it from instead.
    """

    def __init__(
        self,
        checkpoint_data_uri: str | os.PathLike[str] | None = None,
        enable_incremental_checkpointing: bool | None = None,
        checkpoint_stream_backend: FsStateBackend | None = None,
    ) -> None:
        super().__init__(enable_incremental_checkpointing)
        if checkpoint_stream_backend is not None:
            if not isinstance(checkpoint_stream_backend, FsStateBackend):
                raise ConfigurationError(
                    f"checkpoint_stream_backend must be an FsStateBackend, got "
                    f"{type(checkpoint_stream_backend).__name__}"
                )
            self._storage: FileSystemCheckpointStorage = (
                checkpoint_stream_backend.get_implied_checkpoint_storage()
            )
        elif checkpoint_data_uri is not None:
            self._storage = FileSystemCheckpointStorage(checkpoint_data_uri)
        else:
            raise ConfigurationError(
                "RocksDBStateBackend needs checkpoint_data_uri (or checkpoint_stream_backend); "
                "use EmbeddedRocksDBStateBackend with a checkpoint storage instead"
            )

    def get_checkpoint_backend(self) -> FsStateBackend:
        return FsStateBackend(self._storage.get_checkpoint_path())

    def get_implied_checkpoint_storage(self) -> FileSystemCheckpointStorage:
        return self._storage


def _positive_or_none(what: str, size: int | None) -> int | None:
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ConfigurationError(f"the RocksDB {what} must be a positive int (bytes), got {size!r}")
    return size


def parse_raw_options(options: dict[str, str] | str) -> dict[str, str]:
    """``{"k": "v"}`` or ``"k=v;k2=v2"`` as a dict of strings (ConfigurationError if malformed)."""
    if isinstance(options, str):
        out: dict[str, str] = {}
        for part in options.split(";"):
            part = part.strip()
            if not part:
                continue
            k, sep, v = part.partition("=")
            if not sep or not k.strip():
                raise ConfigurationError(
                    f"raw RocksDB option {part!r} is not of the form name=value "
                    f"(separate options with ';')"
                )
            out[k.strip()] = v.strip()
        return out
    if isinstance(options, dict):
        return {str(k): str(v) for k, v in options.items()}
    raise ConfigurationError(
        f"RocksDB options must be a dict of strings or a 'name=value;...' string, got "
        f"{type(options).__name__}"
    )


if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
