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

import tomllib
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any, NoReturn

from streamstate.errors import UnsupportedFeatureError

__all__ = ["UnsupportedMember", "install_unsupported", "unsupported_attribute", "unsupported_names"]


@cache
def unsupported_names() -> Mapping[str, Mapping[str, str]]:
    """``Name`` / ``Class.member`` -> ``{"reason", "instead"}`` (read once)."""
    text = resources.files("streamstate.common").joinpath("pyflink_compat.toml").read_text()
    table: dict[str, Mapping[str, str]] = tomllib.loads(text).get("unsupported", {})
    return table


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
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def install_unsupported(namespace: Mapping[str, Any]) -> None:
    """Give every class in ``namespace`` a descriptor per excluded member of its PyFlink
    namesake (``Class.member`` in the table) that it does not define itself."""
    by_class: dict[str, list[str]] = {}
    for key in unsupported_names():
        owner, _, member = key.partition(".")
        if member and "." not in member:
            by_class.setdefault(owner, []).append(member)
    for obj in list(namespace.values()):
        if not isinstance(obj, type):
            continue
        for member in by_class.get(obj.__name__, ()):
            if not any(member in vars(klass) for klass in obj.__mro__):
                setattr(obj, member, UnsupportedMember(f"{obj.__name__}.{member}"))
