"""How PyFlink's ``print()`` shows a record: Java's ``toString`` of its typed form.

PyFlink prints in the JVM. A stream whose type is ``Types.PICKLED_BYTE_ARRAY()`` (no
type declared) is first mapped to ``str(value)`` in Python, so it prints as Python
shows it. A typed stream prints its Java objects: ``Types.TUPLE`` as Flink's
``Tuple.toString`` (``(hi,3)``), ``Types.ROW``/``ROW_NAMED`` as ``Row.toString``
(``+I[hi, 3]``), ``FLOAT``/``DOUBLE`` as ``Float``/``Double.toString`` (``1.0``,
``1.0E7``), ``BOOLEAN`` as ``true``/``false``, ``None`` as ``null``, lists as
``[a, b]`` and maps as ``{k=v}``. :func:`flink_string` renders a value that way.
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal
from typing import Any

from streamstate.common.typeinfo import (
    BasicType,
    BasicTypeInfo,
    InstantTypeInfo,
    MapTypeInfo,
    PickledBytesTypeInfo,
    RowTypeInfo,
    SqlTimeTypeInfo,
    TupleTypeInfo,
    TypeInformation,
    _ElementTypeInfo,
)

__all__ = ["flink_string", "java_double_string", "java_float_string", "to_float32"]

_F32 = struct.Struct("<f")


def to_float32(value: float) -> float:
    """``value`` rounded to the nearest IEEE float32 (what ``Types.FLOAT()`` keeps)."""
    return float(_F32.unpack(_F32.pack(value))[0])


def _java_fp(digits: str, exponent: int, negative: bool) -> str:
    """Java's ``Double.toString`` layout of ``0.<digits> * 10**exponent``."""
    sign = "-" if negative else ""
    # value = 0.d1d2d3... * 10**exponent; Java: plain for 10^-3 <= |v| < 10^7
    if -2 <= exponent <= 7:
        if exponent <= 0:
            return f"{sign}0.{'0' * -exponent}{digits}"
        whole, frac = digits[:exponent], digits[exponent:]
        whole = whole + "0" * (exponent - len(whole))
        return f"{sign}{whole}.{frac or '0'}"
    frac = digits[1:] or "0"
    return f"{sign}{digits[0]}.{frac}E{exponent - 1}"


def _special(value: float) -> str | None:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    return None


def _layout(shortest: str, value: float) -> str:
    """Java's layout of the positive decimal ``shortest`` (the digits to show)."""
    _sign, digit_tuple, exp = Decimal(shortest).as_tuple()
    assert isinstance(exp, int)  # finite: specials are handled before
    stripped = "".join(map(str, digit_tuple)).lstrip("0")
    # value = int(stripped) * 10**exp = 0.<stripped> * 10**(exp + len(stripped))
    return _java_fp(stripped.rstrip("0") or "0", exp + len(stripped), value < 0)


def java_double_string(value: float) -> str:
    """``Double.toString(value)`` (shortest digits that read back as ``value``)."""
    special = _special(value)
    return special if special is not None else _layout(repr(abs(value)), value)


def java_float_string(value: float) -> str:
    """``Float.toString((float) value)``: the shortest digits naming the float32."""
    f = to_float32(value)
    special = _special(f)
    if special is not None:
        return special
    for precision in range(1, 10):
        text = f"{abs(f):.{precision}g}"
        if to_float32(float(text)) == abs(f):
            return _layout(text, f)
    return _layout(repr(abs(f)), f)  # unreachable: 9 digits name every float32


def _basic(value: Any, kind: BasicType) -> str:
    if kind is BasicType.BOOLEAN:
        return "true" if value else "false"
    if kind is BasicType.DOUBLE and isinstance(value, float | int):
        return java_double_string(float(value))
    if kind is BasicType.FLOAT and isinstance(value, float | int):
        return java_float_string(float(value))
    return str(value)


def flink_string(value: Any, type_info: TypeInformation | None) -> str:
    """The line PyFlink's ``print()`` writes for ``value`` of a stream of ``type_info``."""
    if type_info is None or isinstance(type_info, PickledBytesTypeInfo):
        return value if isinstance(value, str) else str(value)
    return _typed(value, type_info)


def _typed(value: Any, ti: TypeInformation | None) -> str:
    if value is None:
        return "null"
    if isinstance(ti, BasicTypeInfo):
        return _basic(value, ti.basic_type)
    if isinstance(ti, TupleTypeInfo):
        return "(" + ",".join(_fields(value, ti.field_types)) + ")"
    if isinstance(ti, RowTypeInfo):
        kind = getattr(value, "get_row_kind", None)
        short = kind().short_string() if callable(kind) else "+I"
        return short + "[" + ", ".join(_fields(value, ti.field_types)) + "]"
    if isinstance(ti, _ElementTypeInfo):
        return "[" + ", ".join(_typed(v, ti.element_type) for v in value) + "]"
    if isinstance(ti, MapTypeInfo):
        return (
            "{"
            + ", ".join(
                f"{_typed(k, ti.key_type)}={_typed(v, ti.value_type)}" for k, v in value.items()
            )
            + "}"
        )
    if isinstance(ti, SqlTimeTypeInfo):
        return _sql_time(value)
    if isinstance(ti, InstantTypeInfo):
        return _instant(value)
    if isinstance(ti, PickledBytesTypeInfo) or ti is None:
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _fields(value: Any, types: tuple[TypeInformation, ...]) -> list[str]:
    values = list(value)
    return [_typed(v, types[i] if i < len(types) else None) for i, v in enumerate(values)]


def _sql_time(value: Any) -> str:
    """``java.sql.Date/Time/Timestamp.toString``: ``2024-01-02``, ``03:04:05``,
    ``2024-01-02 03:04:05.0`` (fraction without trailing zeros, at least one digit)."""
    import datetime as dt

    if isinstance(value, dt.datetime):
        frac = f"{value.microsecond:06d}".rstrip("0") or "0"
        return f"{value:%Y-%m-%d %H:%M:%S}.{frac}"
    if isinstance(value, dt.time):
        return f"{value:%H:%M:%S}"
    return str(value)  # a date: ISO, as java.sql.Date


def _instant(value: Any) -> str:
    """``Instant.toString``: ISO-8601 in UTC, fraction in groups of 3 digits."""
    import datetime as dt

    seconds, nanos = getattr(value, "seconds", None), getattr(value, "nanos", 0)
    if seconds is None:
        return str(value)
    base = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)
    text = f"{base:%Y-%m-%dT%H:%M:%S}"
    if nanos:
        digits = f"{nanos:09d}"
        for width in (3, 6, 9):
            if digits[width:].strip("0") == "":
                text += "." + digits[:width]
                break
    return text + "Z"
