"""PyFlink names streamstate does not support raise :class:`UnsupportedFeatureError`.

The names, each with why and what to do instead, are the ``[unsupported]`` table of the
reviewed file ``pyflink_compat.toml`` beside this module (also the source of
``docs/pyflink-compat.md``). A facade module hooks a module ``__getattr__`` for its
top-level names (``unsupported_attribute``); a facade package installs a descriptor on
its classes for every excluded member (``install_unsupported``), so a class or instance
lookup of, say, ``StreamExecutionEnvironment.add_jars`` raises the typed error instead
of ``AttributeError``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any, NoReturn

from streamstate.errors import UnsupportedFeatureError, UnsupportedModuleError

__all__ = [
    "UnsupportedMember",
    "install_module_finder",
    "install_unsupported",
    "unsupported_attribute",
    "unsupported_modules",
    "unsupported_names",
]


@cache
def _tables() -> Mapping[str, Mapping[str, Mapping[str, str]]]:
    text = resources.files("streamstate.common").joinpath("pyflink_compat.toml").read_text()
    tables: dict[str, Mapping[str, Mapping[str, str]]] = tomllib.loads(text)
    return tables


def unsupported_names() -> Mapping[str, Mapping[str, str]]:
    """``Name`` / ``Class.member`` -> ``{"reason", "instead"}`` (read once)."""
    return _tables().get("unsupported", {})


def unsupported_modules() -> Mapping[str, Mapping[str, str]]:
    """PyFlink module (``pyflink.table``, ``pyflink.datastream.connectors.kafka``, ...) ->
    ``{"reason", "instead"}``: modules with no streamstate counterpart."""
    return _tables().get("unsupported_modules", {})


class _UnsupportedModuleFinder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: importing the streamstate counterpart of an unsupported
    PyFlink module (or a submodule of it) raises UnsupportedModuleError (a
    ModuleNotFoundError too) saying why and what to use instead."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("streamstate."):
            return None
        pyflink = "pyflink" + fullname[len("streamstate") :]
        table = unsupported_modules()
        for name in (pyflink, *_parents(pyflink)):
            info = table.get(name)
            if info is not None:
                raise UnsupportedModuleError(name, info.get("reason", ""), info.get("instead", ""))
        return None


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 1, -1)]


def install_module_finder() -> None:
    """Put the finder of unsupported PyFlink modules last on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _UnsupportedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_UnsupportedModuleFinder())


def _error(name: str) -> UnsupportedFeatureError:
    info = unsupported_names()[name]
    return UnsupportedFeatureError(name, info.get("reason", ""), info.get("instead", ""))


class UnsupportedMember:
    """Descriptor standing for a PyFlink member streamstate does not support."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> NoReturn:
        raise _error(self.name)


def unsupported_attribute(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__``: an excluded PyFlink name raises the typed error."""

    def __getattr__(name: str) -> Any:
        if name in unsupported_names():
            raise _error(name)
        submodule = "pyflink" + module[len("streamstate") :] + "." + name
        info = unsupported_modules().get(submodule)
        if info is not None:  # e.g. streamstate.datastream.connectors.kafka as an attribute
            raise UnsupportedModuleError(
                submodule, info.get("reason", ""), info.get("instead", "")
            )
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def install_unsupported(namespace: Mapping[str, Any]) -> None:
    """Give every class in ``namespace`` (and the classes nested in it, ``Outer.Inner``) a
    descriptor per excluded member of its PyFlink namesake (``Class.member`` in the table)
    that it does not define itself; subclasses inherit it."""
    for key in unsupported_names():
        owner_path, _, member = key.rpartition(".")
        if not owner_path:
            continue
        head, *rest = owner_path.split(".")
        owner = namespace.get(head)
        for part in rest:
            owner = vars(owner).get(part) if isinstance(owner, type) else None
        if not isinstance(owner, type):
            continue
        if not any(member in vars(klass) for klass in owner.__mro__):
            setattr(owner, member, UnsupportedMember(key))
