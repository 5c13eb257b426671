"""PyFlink's ``StreamExecutionEnvironment`` methods about defaults, chaining and slots.

Mixed into :class:`~streamstate.datastream.StreamExecutionEnvironment`. The default
savepoint directory and the default local parallelism act as in Flink; chaining, buffer
timeouts and slot sharing groups are accepted and read back but place nothing (Spark
schedules the subtasks; docs/pyflink-compat.md lists each).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Self

from streamstate.errors import ConfigurationError

if TYPE_CHECKING:
    from streamstate.common.configuration import Configuration
    from streamstate.datastream.checkpoint_config import CheckpointConfig
    from streamstate.datastream.checkpointing_mode import CheckpointingMode
    from streamstate.datastream.slot_sharing_group import SlotSharingGroup
    from streamstate.runtime.graph import Transformation

__all__ = ["EnvironmentMethods"]

SAVEPOINT_DIR = "execution.checkpointing.savepoint-dir"
#: Flink's default buffer timeout (ms)
DEFAULT_BUFFER_TIMEOUT = 100


class EnvironmentMethods:
    """Needs ``_configuration``, ``_checkpoint_config`` and ``_sinks``."""

    _configuration: Configuration
    _checkpoint_config: CheckpointConfig
    _sinks: list[Transformation]

    def _env_extras(self) -> dict[str, Any]:
        extras: dict[str, Any] | None = self.__dict__.get("_extras")
        if extras is None:
            extras = {
                "chaining": True,
                "buffer_timeout": DEFAULT_BUFFER_TIMEOUT,
                "local_parallelism": None,
                "slot_sharing_groups": {},
            }
            self.__dict__["_extras"] = extras
        return extras

    # -- Python dependencies (shipped by Spark: spark/python_deps.py) ------------------
    def _append_entry(self, key: str, entry: str) -> None:
        current = self._configuration.get_string(key, None)
        self._configuration.set_string(key, f"{entry},{current}" if current else entry)

    def add_python_file(self, file_path: str) -> None:
        """A ``.py`` file, a ``.zip``/``.egg``, or a directory (a package) the job's
        functions import: Spark ships it to every executor and puts it on its Python
        workers' ``sys.path`` (``python.files``)."""
        from streamstate.spark.python_deps import FILES_KEY

        self._append_entry(FILES_KEY, str(file_path))

    def set_python_requirements(
        self, requirements_file_path: str, requirements_cache_dir: str | None = None
    ) -> None:
        """Packages of a ``requirements.txt``, pip-installed into a directory of the job
        when it starts (offline from ``requirements_cache_dir`` when given, as PyFlink) and
        shipped to the executors (``python.requirements``). Pure-Python packages only: a
        compiled one is refused at start (install it into the executors' Python)."""
        from streamstate.spark.python_deps import REQUIREMENTS_KEY

        spec = str(requirements_file_path)
        if requirements_cache_dir:
            spec += f"#{requirements_cache_dir}"
        self._configuration.set_string(REQUIREMENTS_KEY, spec)

    def add_python_archive(self, archive_path: str, target_dir: str | None = None) -> None:
        """An archive Spark extracts on every executor into ``SparkFiles.get(target_dir)``
        (default: the archive's file name), e.g. data files a function reads
        (``python.archives``; see docs/limitations.md about relative paths)."""
        from streamstate.spark.python_deps import ARCHIVES_KEY

        entry = str(archive_path) + (f"#{target_dir}" if target_dir else "")
        self._append_entry(ARCHIVES_KEY, entry)

    # -- savepoints --------------------------------------------------------------------
    def set_default_savepoint_directory(self, directory: str) -> Self:
        """Where ``JobClient.trigger_savepoint()`` / ``stop_with_savepoint()`` and the
        CLI's ``savepoint`` write when given no directory
        (``execution.checkpointing.savepoint-dir``)."""
        self._configuration.set_string(SAVEPOINT_DIR, str(directory))
        return self

    def get_default_savepoint_directory(self) -> str | None:
        value: str | None = self._configuration.get_string(SAVEPOINT_DIR, None)
        return value

    # -- parallelism defaults ----------------------------------------------------------
    def set_default_local_parallelism(self, parallelism: int) -> Self:
        """The parallelism of jobs that set none (default: the CPU count, at most 8)."""
        if not isinstance(parallelism, int) or parallelism < 1:
            raise ConfigurationError(f"parallelism must be a positive int, got {parallelism!r}")
        self._env_extras()["local_parallelism"] = parallelism
        return self

    def get_default_local_parallelism(self) -> int:
        p: int | None = self._env_extras()["local_parallelism"]
        return p if p is not None else max(1, min(os.cpu_count() or 1, 8))

    # -- chaining and buffers (kept, no effect) ------------------------------------------
    def disable_operator_chaining(self) -> Self:
        """Accepted and read back by ``is_chaining_enabled()``: outputs are the same
        chained or not, and a stage's operators always run in one process."""
        self._env_extras()["chaining"] = False
        return self

    def is_chaining_enabled(self) -> bool:
        return bool(self._env_extras()["chaining"])

    def is_chaining_of_operators_with_different_max_parallelism_enabled(self) -> bool:
        return True

    def set_buffer_timeout(self, timeout_millis: int) -> Self:
        """Accepted and read back: records cross stages once per epoch, not in buffers."""
        if not isinstance(timeout_millis, int) or timeout_millis < -1:
            raise ConfigurationError(f"buffer timeout must be an int >= -1, got {timeout_millis!r}")
        self._env_extras()["buffer_timeout"] = timeout_millis
        return self

    def get_buffer_timeout(self) -> int:
        return int(self._env_extras()["buffer_timeout"])

    # -- checkpointing views -------------------------------------------------------------
    def get_checkpointing_consistency_mode(self) -> CheckpointingMode:
        return self._checkpoint_config.get_checkpointing_mode()

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self._checkpoint_config.is_unaligned_checkpoints_enabled()

    def is_force_unaligned_checkpoints(self) -> bool:
        return self._checkpoint_config.is_force_unaligned_checkpoints()

    # -- slot sharing groups ---------------------------------------------------------------
    def register_slot_sharing_group(self, slot_sharing_group: SlotSharingGroup) -> Self:
        """Kept by name (``get_slot_sharing_groups()``); places nothing."""
        name = getattr(slot_sharing_group, "get_name", None)
        if not callable(name):
            raise ConfigurationError(
                f"register_slot_sharing_group() takes a SlotSharingGroup, got {slot_sharing_group!r}"
            )
        self._env_extras()["slot_sharing_groups"][name()] = slot_sharing_group
        return self

    def get_slot_sharing_groups(self) -> dict[str, SlotSharingGroup]:
        return dict(self._env_extras()["slot_sharing_groups"])

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Drop the operators defined and not executed yet (Flink releases the
        environment's resources). Running jobs go on; the environment stays usable."""
        self._sinks.clear()
