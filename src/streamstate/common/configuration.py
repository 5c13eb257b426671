"""``Configuration``, as in ``pyflink.common.Configuration``, plus Flink's duration syntax.

A :class:`Configuration` is a mutable mapping of string keys to string values
(Flink stores every option as a string and parses on read). Typed getters parse
the stored string and raise :class:`ConfigurationError` naming the key when it
does not parse. :func:`parse_duration_ms` reads Flink's duration strings
(``"10 s"``, ``"1min"``, ``"500 ms"``, ``"2 h"``; a bare number is milliseconds).
"""

from __future__ import annotations

import base64
import copy
import datetime as _dt
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from streamstate.common.time import Duration, Time, to_millis
from streamstate.errors import ConfigurationError

__all__ = [
    "Configuration",
    "parse_duration_ms",
]

# unit -> (numerator, denominator) to milliseconds; the unit spellings of Flink's TimeUtils
_UNITS: dict[str, tuple[int, int]] = {}
for _names, _ratio in (
    (("d", "day", "days"), (86_400_000, 1)),
    (("h", "hour", "hours"), (3_600_000, 1)),
    (("min", "m", "minute", "minutes"), (60_000, 1)),
    (("s", "sec", "secs", "second", "seconds"), (1000, 1)),
    (("ms", "milli", "millis", "millisecond", "milliseconds"), (1, 1)),
    (("µs", "us", "micro", "micros", "microsecond", "microseconds"), (1, 1000)),
    (("ns", "nano", "nanos", "nanosecond", "nanoseconds"), (1, 1_000_000)),
):
    for _n in _names:
        _UNITS[_n] = _ratio

_DURATION_RE = re.compile(r"^\s*(\d+)\s*([^\d\s]*)\s*$")


def parse_duration_ms(value: str | int) -> int:
    """Milliseconds of a Flink duration string.

    ``"<digits> [unit]"`` with an optional space; units (case-insensitive) are
    ``d/day/days``, ``h/hour/hours``, ``min/m/minute/minutes``,
    ``s/sec/secs/second/seconds``, ``ms/milli/millis/millisecond/milliseconds``,
    ``us/µs/micro(s)/microsecond(s)`` and ``ns/nano(s)/nanosecond(s)`` (floored
    to whole milliseconds). No unit means milliseconds. A non-negative ``int``
    is returned as is. Anything else raises :class:`ConfigurationError`.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ConfigurationError(f"duration must not be negative, got {value}")
        return value
    if not isinstance(value, str):
        raise ConfigurationError(
            f"duration must be a string like '10 s' or int milliseconds, got "
            f"{type(value).__name__} {value!r}"
        )
    m = _DURATION_RE.match(value)
    if m is None:
        raise ConfigurationError(
            f"cannot parse duration {value!r}: expected a non-negative whole number followed "
            f"by an optional unit, e.g. '500 ms', '10 s', '1 min', '2 h', '1 d'"
        )
    amount, unit = int(m.group(1)), m.group(2).lower()
    if not unit:
        return amount
    ratio = _UNITS.get(unit)
    if ratio is None:
        raise ConfigurationError(
            f"cannot parse duration {value!r}: unknown time unit {m.group(2)!r}; use one of "
            f"{', '.join(sorted(_UNITS))}"
        )
    return amount * ratio[0] // ratio[1]


def _to_config_string(value: Any) -> str:
    """The string Flink would store for ``value``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, _dt.timedelta | Time | Duration):
        return f"{to_millis(value, 'duration value')} ms"
    if isinstance(value, list | tuple):
        return ";".join(_to_config_string(v) for v in value)
    raise ConfigurationError(
        f"configuration values must be str, bool, int, float, timedelta, Time, Duration or a "
        f"list of these; got {type(value).__name__} {value!r}"
    )


def _parse_bool(key: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low == "true":
        return True
    if low == "false":
        return False
    raise ConfigurationError(f"configuration {key!r} = {raw!r} is not a boolean (true/false)")


def _parse_int(key: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigurationError(f"configuration {key!r} = {raw!r} is not an integer") from None


def _parse_float(key: str, raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise ConfigurationError(f"configuration {key!r} = {raw!r} is not a number") from None


def _parse_duration(key: str, raw: str) -> int:
    try:
        return parse_duration_ms(raw)
    except ConfigurationError as e:
        raise ConfigurationError(f"configuration {key!r}: {e}") from None


class Configuration:
    """Key/value configuration backed by a dict of strings.

    ``Configuration()`` is empty; ``Configuration(other)`` copies another
    configuration or a mapping (values are converted to Flink's string forms).
    """

    def __init__(
        self, other: Configuration | Mapping[str, Any] | None = None, j_configuration: Any = None
    ) -> None:
        self._data: dict[str, str] = {}
        if other is None and j_configuration is not None:
            other = j_configuration
        if isinstance(other, Configuration):
            self._data.update(other._data)
        elif other is not None:
            for k, v in other.items():
                self.set(k, v)

    @classmethod
    def from_dict(cls, map: Mapping[str, Any]) -> Configuration:  # PyFlink's parameter name
        return cls(map)

    def get_bytearray(self, key: str, default_value: bytes | bytearray) -> bytearray:
        """Bytes stored with :meth:`set_bytearray` (kept base64-encoded, as Flink prints them)."""
        raw = self._data.get(key)
        if raw is None:
            return bytearray(default_value)
        try:
            return bytearray(base64.b64decode(raw, validate=True))
        except (ValueError, TypeError) as e:
            raise ConfigurationError(f"{key!r} = {raw!r} is not a base64 byte array: {e}") from e

    def set_bytearray(self, key: str, value: bytes | bytearray) -> Configuration:
        if not isinstance(value, (bytes, bytearray)):
            raise ConfigurationError(f"set_bytearray({key!r}) needs bytes, got {value!r}")
        self._data[self._check_key(key)] = base64.b64encode(bytes(value)).decode("ascii")
        return self

    @staticmethod
    def parse_list_value(value: str) -> list[str]:
        """Flink's list syntax: ``a;b;c``, a part quoted with ``'`` or ``"`` may contain
        ``;`` (a doubled quote inside quotes is one quote)."""
        out: list[str] = []
        buf: list[str] = []
        quote: str | None = None
        i = 0
        while i < len(value):
            c = value[i]
            if quote is not None:
                if c == quote and value[i + 1 : i + 2] == quote:
                    buf.append(c)
                    i += 1
                elif c == quote:
                    quote = None
                else:
                    buf.append(c)
            elif c in "'\"" and not "".join(buf).strip():
                quote, buf = c, []
            elif c == ";":
                out.append("".join(buf).strip())
                buf = []
            else:
                buf.append(c)
            i += 1
        if quote is not None:
            raise ConfigurationError(f"unclosed quote in list value {value!r}")
        if buf or out:
            out.append("".join(buf).strip())
        return out

    # -- PyFlink API ----------------------------------------------------------------------------

    def get_string(self, key: str, default_value: str | None = None) -> str | None:
        return self._data.get(key, default_value)

    def set_string(self, key: str, value: str) -> Configuration:
        if not isinstance(value, str):
            raise ConfigurationError(
                f"set_string({key!r}) needs a str, got {type(value).__name__}; use set()"
            )
        self._data[self._check_key(key)] = value
        return self

    def get_integer(self, key: str, default_value: int = 0) -> int:
        return self._typed(key, default_value, _parse_int)

    def set_integer(self, key: str, value: int) -> Configuration:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(f"set_integer({key!r}) needs an int, got {value!r}")
        self._data[self._check_key(key)] = str(value)
        return self

    def get_boolean(self, key: str, default_value: bool = False) -> bool:
        return self._typed(key, default_value, _parse_bool)

    def set_boolean(self, key: str, value: bool) -> Configuration:
        if not isinstance(value, bool):
            raise ConfigurationError(f"set_boolean({key!r}) needs a bool, got {value!r}")
        self._data[self._check_key(key)] = "true" if value else "false"
        return self

    def get_float(self, key: str, default_value: float = 0.0) -> float:
        return self._typed(key, default_value, _parse_float)

    def set_float(self, key: str, value: float) -> Configuration:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigurationError(f"set_float({key!r}) needs a float, got {value!r}")
        self._data[self._check_key(key)] = repr(float(value))
        return self

    def get_duration_ms(self, key: str, default_value: int | None = None) -> int | None:
        """The value of ``key`` parsed by :func:`parse_duration_ms`, or the default."""
        return self._typed(key, default_value, _parse_duration)

    def key_set(self) -> set[str]:
        return set(self._data)

    def keys(self) -> list[str]:
        """The keys, in insertion order."""
        return list(self._data)

    def items(self) -> list[tuple[str, str]]:
        """``(key, value)`` pairs in insertion order, as ``to_dict().items()`` (PyFlink's
        tests iterate a configuration this way)."""
        return list(self._data.items())

    def contains_key(self, key: str) -> bool:
        return key in self._data

    def remove_config(self, key: str) -> bool:
        """Remove ``key``; True if it was present."""
        return self._data.pop(key, None) is not None

    def add_all(self, other: Configuration, prefix: str | None = None) -> Configuration:
        """Copy every entry of ``other`` into this configuration, keys prefixed by ``prefix``."""
        if not isinstance(other, Configuration):
            raise ConfigurationError(f"add_all needs a Configuration, got {type(other).__name__}")
        p = prefix or ""
        for k, v in other._data.items():
            self._data[p + k] = v
        return self

    def add_all_to_dict(self, target_dict: dict[str, Any]) -> None:
        target_dict.update(self._data)

    def to_dict(self) -> dict[str, str]:
        return dict(self._data)

    # -- Pythonic helpers -----------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` parsed as the type of ``default``.

        With a ``bool``/``int``/``float`` default the stored string is parsed as
        that type; with a ``timedelta``/``Time``/``Duration`` default it is
        parsed as a duration and returned as a ``timedelta``; otherwise the raw
        string (or ``default`` when the key is absent) is returned. ``key`` may be a
        :class:`~streamstate.common.config_options.ConfigOption`: its type parses the
        value and its default is the default.
        """
        option_key = getattr(key, "key", None)
        if callable(option_key):
            raw = self._data.get(option_key())
            if raw is None:
                return key.default_value() if default is None else default  # type: ignore[attr-defined]  # a ConfigOption (it has key())
            parse = _PARSERS.get(key.value_type())  # type: ignore[attr-defined]  # a ConfigOption
            return raw if parse is None else parse(option_key(), raw)
        raw = self._data.get(key)
        if raw is None:
            return default
        parse = _PARSERS.get(type(default))
        return raw if parse is None else parse(key, raw)

    def set(self, key: str, value: Any) -> Configuration:
        """Store ``value`` in Flink's string form (bools as ``true``/``false``, durations in ms);
        ``key`` may be a ``ConfigOption``."""
        option_key = getattr(key, "key", None)
        if callable(option_key):
            key = option_key()
        self._data[self._check_key(key)] = _to_config_string(value)
        return self

    def _typed(self, key: str, default: Any, parse: Callable[[str, str], Any]) -> Any:
        raw = self._data.get(key)
        return default if raw is None else parse(key, raw)

    @staticmethod
    def _check_key(key: str) -> str:
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"configuration keys must be non-empty str, got {key!r}")
        return key

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Configuration) and self._data == other._data

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __copy__(self) -> Configuration:
        return Configuration(self)

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Configuration:
        return Configuration(self)

    def copy(self) -> Configuration:
        return copy.copy(self)

    def __repr__(self) -> str:
        return f"Configuration({self._data!r})"


def _duration_as_timedelta(key: str, raw: str) -> _dt.timedelta:
    return _dt.timedelta(milliseconds=_parse_duration(key, raw))


_PARSERS: dict[type, Callable[[str, str], Any]] = {
    bool: _parse_bool,
    int: _parse_int,
    float: _parse_float,
    _dt.timedelta: _duration_as_timedelta,
    Time: _duration_as_timedelta,
    Duration: _duration_as_timedelta,
}
