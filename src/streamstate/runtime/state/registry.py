"""Registry of keyed state backends by name (``"hashmap"``: heap, ``"rocksdb"``: RocksDB).

A backend registers itself (its module calls :func:`register_keyed_backend`) with its
class and what the rest of the runtime needs to know about it: what
``state.changelog.enabled`` means for it, which checkpoint handles only it can restore,
the options of a queryable serving copy, and whether its state versions are its own
files rather than the canonical keyed format. Its optional abilities are
``typing.Protocol`` s (:class:`NativeSnapshots`), checked once here against the class;
callers ask the registration (:func:`native_snapshots`), never the object, and never
compare a backend's name.

``create_keyed_backend(name, **kwargs)`` calls the registered class with the
``KeyedStateBackend`` constructor arguments (``operator_name``, ``key_group_range``,
``max_parallelism``, ``key_serializer``) and the backend's own options. Built-in backends
are imported on first use, so callers need not import them.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from streamstate.errors import ConfigurationError

if TYPE_CHECKING:
    from streamstate.runtime.state.base import KeyedStateBackend

__all__ = [
    "DEFAULT_BACKEND",
    "backend_settings",
    "BackendRegistration",
    "ConfiguredBackend",
    "NativeSnapshots",
    "create_keyed_backend",
    "native_snapshots",
    "register_keyed_backend",
    "registered_keyed_backends",
    "registration",
    "registration_of",
    "restoring_backend",
]

#: the backend of a job that sets none (Flink's default, ``HashMapStateBackend``)
DEFAULT_BACKEND = "hashmap"

#: built-in backends: name -> module that registers it on import
_BUILTINS: dict[str, str] = {
    "hashmap": "streamstate.runtime.state.heap.backend",
    "rocksdb": "streamstate.runtime.state.rocksdb.backend",
}


@runtime_checkable
class NativeSnapshots(Protocol):
    """A backend whose checkpoints can be its own files (RocksDB's SST files), uploading
    only the files new since the previous checkpoint."""

    def snapshot_incremental(self, storage: Any, checkpoint_id: int, scope: str) -> Any:
        """An incremental checkpoint handle, or ``None`` (not enabled, or storage without
        a shared folder: the caller takes a full ``snapshot()``)."""

    def snapshot_native(self, storage: Any, checkpoint_id: int, scope: str) -> Any:
        """The backend's own files as a self-contained handle (a native savepoint)."""

    def snapshot_epoch_version(
        self, storage: Any, folder: str, tag: str, epoch: int, scope: str
    ) -> Any:
        """This epoch's state version as the backend's own files in the epoch-state
        directory (``<folder>/<tag>-*``)."""


@runtime_checkable
class ConfiguredBackend(Protocol):
    """What the runtime reads of a ``StateBackend`` object of the public API
    (``HashMapStateBackend()``, ``EmbeddedRocksDBStateBackend()``)."""

    backend_name: str

    def backend_options(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class BackendRegistration:
    """A registered keyed state backend: its class and the facts the runtime asks about it."""

    name: str
    factory: type[KeyedStateBackend]
    #: options ``state.changelog.enabled`` adds (checkpoints that upload only the changes)
    changelog_options: Mapping[str, Any] = field(default_factory=dict)
    #: checkpoint handle types only this backend can restore (its own files)
    native_handles: tuple[type, ...] = ()
    #: options of a queryable-state serving copy (e.g. not opening an empty database first)
    serving_copy_options: Mapping[str, Any] = field(default_factory=dict)
    #: its state versions are its own files, one per subtask, not the canonical keyed format
    #: (a serving copy then holds a subtask's whole range; lookups cannot search the files)
    native_versions: bool = False
    #: the class implements :class:`NativeSnapshots` (checked at registration)
    native_snapshots: bool = False


_REGISTERED: dict[str, BackendRegistration] = {}


def register_keyed_backend(
    name: str,
    factory: type[KeyedStateBackend],
    *,
    changelog_options: Mapping[str, Any] | None = None,
    native_handles: Iterable[type] = (),
    serving_copy_options: Mapping[str, Any] | None = None,
    native_versions: bool = False,
) -> BackendRegistration:
    """Register the backend class ``factory`` under ``name`` (case-insensitive).

    Its abilities are checked here, once: a backend with ``native_handles`` or
    ``native_versions`` must implement :class:`NativeSnapshots`.
    """
    from streamstate.runtime.state.base import KeyedStateBackend

    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a keyed state backend name must be a non-empty str: {name!r}")
    if not (isinstance(factory, type) and issubclass(factory, KeyedStateBackend)):
        raise ConfigurationError(
            f"keyed state backend {name!r} must be a KeyedStateBackend subclass, got {factory!r}"
        )
    native = issubclass(factory, NativeSnapshots)
    handles = tuple(native_handles)
    if (handles or native_versions) and not native:
        raise ConfigurationError(
            f"keyed state backend {name!r} declares native handles or versions but its class "
            f"{factory.__qualname__} does not implement NativeSnapshots"
        )
    reg = BackendRegistration(
        name.lower(),
        factory,
        dict(changelog_options or {}),
        handles,
        dict(serving_copy_options or {}),
        native_versions,
        native,
    )
    _REGISTERED[reg.name] = reg
    return reg


def registered_keyed_backends() -> list[str]:
    """Sorted names of all known backends (registered and built-in)."""
    return sorted(set(_REGISTERED) | set(_BUILTINS))


def registration(name: str) -> BackendRegistration:
    """The registration of backend ``name``; ``ConfigurationError`` listing the known names."""
    key = name.lower() if isinstance(name, str) else name
    if key not in _REGISTERED and key in _BUILTINS:
        importlib.import_module(_BUILTINS[key])
    reg = _REGISTERED.get(key)
    if reg is None:
        raise ConfigurationError(
            f"unknown keyed state backend {name!r}; registered backends: "
            f"{', '.join(registered_keyed_backends())}"
        )
    return reg


def registration_of(backend: KeyedStateBackend) -> BackendRegistration:
    """The registration of ``backend``'s class (or of the nearest registered base class)."""
    for cls in type(backend).__mro__:
        for reg in _REGISTERED.values():
            if reg.factory is cls:
                return reg
    raise ConfigurationError(f"{type(backend).__qualname__} is not a registered keyed backend")


def native_snapshots(backend: KeyedStateBackend) -> NativeSnapshots | None:
    """``backend`` as :class:`NativeSnapshots` if its registered class has that ability."""
    return cast(NativeSnapshots, backend) if registration_of(backend).native_snapshots else None


def restoring_backend(handles: Iterable[Any]) -> str | None:
    """The name of the backend that alone can restore some of ``handles`` (its own files),
    or ``None`` when any backend can (canonical keyed snapshots)."""
    handles = list(handles)
    for name in _BUILTINS:
        registration(name)
    for reg in _REGISTERED.values():
        if reg.native_handles and any(isinstance(h, reg.native_handles) for h in handles):
            return reg.name
    return None


def create_keyed_backend(name: str, **kwargs: Any) -> Any:
    """A new keyed state backend of kind ``name``.

    Raises ``ConfigurationError`` listing the known names when ``name`` is unknown.
    """
    return registration(name).factory(**kwargs)


def backend_settings(state_backend: ConfiguredBackend | None) -> tuple[str, dict[str, Any]]:
    """``(name, options)`` of a public ``StateBackend`` object (``None``: the default)."""
    if state_backend is None:
        return DEFAULT_BACKEND, {}
    return state_backend.backend_name, dict(state_backend.backend_options())
