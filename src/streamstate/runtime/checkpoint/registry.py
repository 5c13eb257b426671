"""Checkpoint storage accesses by name (``execution.checkpointing.storage``).

The built-in ``jobmanager`` (in memory) and ``filesystem`` accesses are registered here;
:func:`register_checkpoint_storage` adds another (or replaces one) for a custom storage.
"""

from __future__ import annotations

from typing import Any

from streamstate.errors import ConfigurationError
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.memory import MemoryCheckpointStorageAccess
from streamstate.runtime.checkpoint.storage import CheckpointStorageAccess

__all__ = [
    "create_checkpoint_storage_access",
    "get_checkpoint_storage_class",
    "register_checkpoint_storage",
]

_REGISTRY: dict[str, type[CheckpointStorageAccess]] = {
    cls.name: cls for cls in (MemoryCheckpointStorageAccess, FileSystemCheckpointStorageAccess)
}


def register_checkpoint_storage(name: str, cls: type[CheckpointStorageAccess]) -> None:
    """Register ``cls`` under ``name`` (case-insensitive). Re-registering replaces."""
    _REGISTRY[name.lower()] = cls


def get_checkpoint_storage_class(name: str) -> type[CheckpointStorageAccess]:
    """The access class registered as ``name``; ConfigurationError lists the known names."""
    try:
        return _REGISTRY[name.lower()]
    except KeyError:
        raise ConfigurationError(
            f"unknown checkpoint storage {name!r}; accepted: {', '.join(sorted(_REGISTRY))}"
        ) from None


def create_checkpoint_storage_access(name: str, **kwargs: Any) -> CheckpointStorageAccess:
    return get_checkpoint_storage_class(name)(**kwargs)
