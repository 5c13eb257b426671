"""Registry of keyed state backends by name (``"hashmap"``: heap, ``"rocksdb"``: RocksDB).

``create_keyed_backend(name, **kwargs)`` calls the registered factory with the
``KeyedStateBackend`` constructor arguments (``operator_name``,
``key_group_range``, ``max_parallelism``, ``key_serializer``). Built-in
backends are imported on first use, so callers need not import them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from streamstate.errors import ConfigurationError

__all__ = ["create_keyed_backend", "register_keyed_backend", "registered_keyed_backends"]

_FACTORIES: dict[str, Callable[..., Any]] = {}

#: built-in backends: name -> module that registers it on import
_BUILTINS: dict[str, str] = {
    "hashmap": "streamstate.runtime.state.heap.backend",
    "rocksdb": "streamstate.runtime.state.rocksdb.backend",
}


def register_keyed_backend(name: str, factory: Callable[..., Any]) -> None:
    """Register ``factory`` (e.g. a backend class) under ``name`` (case-insensitive)."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a keyed state backend name must be a non-empty str: {name!r}")
    if not callable(factory):
        raise ConfigurationError(f"the factory of keyed state backend {name!r} is not callable")
    _FACTORIES[name.lower()] = factory


def registered_keyed_backends() -> list[str]:
    """Sorted names of all known backends (registered and built-in)."""
    return sorted(set(_FACTORIES) | set(_BUILTINS))


def create_keyed_backend(name: str, **kwargs: Any) -> Any:
    """A new keyed state backend of kind ``name``.

    Raises ``ConfigurationError`` listing the known names when ``name`` is unknown.
    """
    key = name.lower() if isinstance(name, str) else name
    if key not in _FACTORIES and key in _BUILTINS:
        importlib.import_module(_BUILTINS[key])
    factory = _FACTORIES.get(key)
    if factory is None:
        raise ConfigurationError(
            f"unknown keyed state backend {name!r}; registered backends: "
            f"{', '.join(registered_keyed_backends())}"
        )
    return factory(**kwargs)
