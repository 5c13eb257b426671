"""Line formats of the file source: a line of text -> a record (or nothing).

The file source keeps a byte offset per file (its checkpointed position) and hands each
line to its format. ``TextLine`` yields the line; ``CsvLines`` parses one CSV record per
line into a ``Row`` of the schema's columns; ``JsonLines`` parses one JSON object per
line into a ``Row`` of a ``Types.ROW_NAMED`` (or a dict without a type). Values are
converted by the field type's serializer name (a registry, see ``CONVERTERS``).
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
from collections.abc import Callable
from typing import Any

from streamstate.errors import InputFormatError

__all__ = ["CONVERTERS", "CsvLines", "JsonLines", "TextLine", "converter"]


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


def _int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError(f"not a number: {v!r}")
    return int(v) if not isinstance(v, str) else int(v.strip())


def _datetime(v: Any) -> dt.datetime:
    return v if isinstance(v, dt.datetime) else dt.datetime.fromisoformat(str(v).strip())


#: type-info serializer name -> value converter (a str from CSV, a JSON value from JSON)
CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "string": str,
    "char": str,
    "boolean": _bool,
    "byte": _int,
    "short": _int,
    "int": _int,
    "long": _int,
    "big_int": _int,
    "float": float,
    "double": float,
    "big_dec": lambda v: decimal.Decimal(str(v).strip()),
    "sql_date": lambda v: dt.date.fromisoformat(str(v).strip()),
    "sql_time": lambda v: dt.time.fromisoformat(str(v).strip()),
    "sql_timestamp": _datetime,
    "pickle": lambda v: v,
}


def converter(type_info: Any) -> Callable[[Any], Any]:
    """The converter of ``type_info`` (lists, arrays, maps and rows of convertible types)."""
    name = getattr(type_info, "serializer_name", None) or ""
    conv = CONVERTERS.get(name)
    if conv is not None:
        return conv
    if name in ("list", "basic_array", "object_array", "primitive_array"):
        elem = converter(type_info.element_type)
        return lambda v: [None if x is None else elem(x) for x in v]
    if name == "map":
        kc, vc = converter(type_info.key_type), converter(type_info.value_type)
        return lambda v: {kc(k): (None if x is None else vc(x)) for k, x in dict(v).items()}
    if name == "row":
        return _row_converter(type_info, fail_on_missing=False)
    raise InputFormatError(
        f"cannot read values of type {type_info!r} from text; supported: "
        f"{', '.join(sorted(CONVERTERS))}, lists, maps and rows of them"
    )


def _row_converter(row_type: Any, fail_on_missing: bool) -> Callable[[Any], Any]:
    from streamstate.common.row import Row

    names = row_type.get_field_names()
    convs = [converter(t) for t in row_type.field_types]

    def convert(obj: Any) -> Any:
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object for {row_type!r}, got {obj!r}")
        values: list[Any] = []
        for n, c in zip(names, convs, strict=True):
            if n not in obj:
                if fail_on_missing:
                    raise ValueError(f"field {n!r} is missing")
                values.append(None)
                continue
            v = obj[n]
            values.append(None if v is None else c(v))
        return Row(**dict(zip(names, values, strict=True)))

    return convert


def _split_list(elem: Callable[[Any], Any], sep: str) -> Callable[[Any], Any]:
    return lambda s: [elem(x) for x in s.split(sep)] if s else []


class TextLine:
    """The line itself (without its line break)."""

    skip_first_line = False

    def decode(self, text: str, where: str) -> list[Any]:
        return [text]


class CsvLines:
    """One CSV record per line (quoted fields may not span lines)."""

    def __init__(
        self,
        columns: list[tuple[str, Any, str | None]],
        separator: str = ",",
        quote_char: str | None = '"',
        escape_char: str | None = None,
        null_value: str = "",
        skip_first_line: bool = False,
        allow_comments: bool = False,
    ) -> None:
        # columns: (name, type info, array element separator or None)
        self.names = [c[0] for c in columns]
        self.columns = columns
        self.separator = separator
        self.quote_char = quote_char
        self.escape_char = escape_char
        self.null_value = null_value
        self.skip_first_line = skip_first_line
        self.allow_comments = allow_comments
        self._convs: list[Callable[[Any], Any]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_convs": None}

    def _converters(self) -> list[Callable[[Any], Any]]:
        if self._convs is None:
            convs: list[Callable[[Any], Any]] = []
            for _, t, sep in self.columns:
                if sep is not None:
                    elem = converter(t.element_type)
                    convs.append(_split_list(elem, sep))
                else:
                    convs.append(converter(t))
            self._convs = convs
        return self._convs

    def decode(self, text: str, where: str) -> list[Any]:
        from streamstate.common.row import Row

        if not text.strip() or (self.allow_comments and text.lstrip().startswith("#")):
            return []
        reader = csv.reader(
            [text],
            delimiter=self.separator,
            quotechar=self.quote_char or '"',
            quoting=csv.QUOTE_MINIMAL if self.quote_char else csv.QUOTE_NONE,
            escapechar=self.escape_char,
        )
        fields = next(reader)
        if len(fields) != len(self.columns):
            raise InputFormatError(
                f"{where}: {len(fields)} CSV fields, the schema has {len(self.columns)} "
                f"({', '.join(self.names)}): {text[:200]!r}. Fix the line or the CsvSchema "
                f"(set_column_separator, set_quote_char)"
            )
        values: list[Any] = []
        for name, raw, conv in zip(self.names, fields, self._converters(), strict=True):
            if raw == self.null_value:
                values.append(None)
                continue
            try:
                values.append(conv(raw))
            except (ValueError, decimal.InvalidOperation) as e:
                raise InputFormatError(
                    f"{where}: column {name!r}: cannot read {raw!r} ({e}). Fix the value or "
                    f"the column's type in the CsvSchema"
                ) from None
        return [Row(**dict(zip(self.names, values, strict=True)))]


class JsonLines:
    """One JSON object per line (JSON lines / NDJSON)."""

    skip_first_line = False

    def __init__(
        self,
        type_info: Any = None,
        fail_on_missing_field: bool = False,
        ignore_parse_errors: bool = False,
    ) -> None:
        self.type_info = type_info
        self.fail_on_missing_field = fail_on_missing_field
        self.ignore_parse_errors = ignore_parse_errors
        self._conv: Callable[[Any], Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_conv": None}

    def _converter(self) -> Callable[[Any], Any]:
        if self._conv is None:
            t = self.type_info
            if t is None:
                self._conv = lambda v: v
            elif getattr(t, "serializer_name", None) == "row":
                self._conv = _row_converter(t, self.fail_on_missing_field)
            else:
                self._conv = converter(t)
        return self._conv

    def decode(self, text: str, where: str) -> list[Any]:
        if not text.strip():
            return []
        try:
            return [self._converter()(json.loads(text))]
        except (ValueError, TypeError, decimal.InvalidOperation) as e:
            if self.ignore_parse_errors:
                return []
            raise InputFormatError(
                f"{where}: cannot read the JSON line {text[:200]!r} as {self.type_info!r}: "
                f"{e}. Fix the line, or build the schema with ignore_parse_errors()"
            ) from None
