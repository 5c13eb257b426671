"""Typed values of configuration keys, read once when a job starts.

Every reader takes the key's full name (``job.autoscaler.target.utilization``, not a
suffix), returns the default when the key is unset and raises
:class:`~streamstate.errors.ConfigurationError` naming that full key and what it must be
when the value is bad, so a user is always told the key they wrote. ``conf`` is a
:class:`~streamstate.common.Configuration` or anything with ``get_string(key, default)``;
``None`` reads as an empty configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from streamstate.errors import ConfigurationError

__all__ = [
    "conf_bool",
    "conf_duration_ms",
    "conf_fraction",
    "conf_int",
    "conf_positive_float",
    "conf_str",
]

T = TypeVar("T")


def conf_str(conf: Any, *keys: str) -> str | None:
    """The first of ``keys`` set to a non-blank value (stripped), else ``None``."""
    for key in keys:
        raw = conf.get_string(key, None) if conf is not None else None
        if raw is not None and str(raw).strip():
            return str(raw).strip()
    return None


def conf_bool(conf: Any, *keys: str, default: bool = False) -> bool:
    """``true``/``false`` (any case) of the first of ``keys`` that is set."""
    raw = conf_str(conf, *keys)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise ConfigurationError(f"{keys[0]} must be true or false, got {raw!r}")
    return raw.lower() == "true"


def _number(conf: Any, key: str, parse: Callable[[str], T], what: str) -> T | None:
    """``key``'s value parsed by ``parse`` (``None`` when unset); a bad one names ``what``
    it must be."""
    raw = conf_str(conf, key)
    if raw is None:
        return None
    try:
        return parse(raw)
    except ValueError as e:
        raise ConfigurationError(f"{key} must be {what}, got {raw!r}") from e


def conf_int(conf: Any, key: str, default: int, minimum: int | None = None) -> int:
    """An integer, at least ``minimum``."""
    value = _number(conf, key, int, "an integer")
    if value is None:
        return default
    if minimum is not None and value < minimum:
        raise ConfigurationError(f"{key} must be >= {minimum}, got {value}")
    return value


def conf_positive_float(conf: Any, key: str, default: float) -> float:
    """A number > 0."""
    value = _number(conf, key, float, "a number")
    if value is None:
        return default
    if not value > 0:
        raise ConfigurationError(f"{key} must be > 0, got {value!r}")
    return value


def conf_fraction(conf: Any, key: str, default: float) -> float:
    """A number in (0, 1]."""
    value = conf_positive_float(conf, key, default)
    if value > 1:
        raise ConfigurationError(f"{key} must be in (0, 1], got {value!r}")
    return value


def conf_duration_ms(conf: Any, key: str, default_ms: int) -> int:
    """A duration in milliseconds from Flink's duration syntax (``30 s``, ``5 min``, ``100``)."""
    from streamstate.common.configuration import parse_duration_ms

    raw = conf_str(conf, key)
    if raw is None:
        return default_ms
    try:
        return int(parse_duration_ms(raw))
    except (ValueError, ConfigurationError) as e:
        raise ConfigurationError(f"{key} must be a duration (e.g. 30 s, 5 min), got {raw!r}") from e
