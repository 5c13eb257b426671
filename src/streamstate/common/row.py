"""``Row`` and ``RowKind``, as in ``pyflink.common.types``.

A :class:`Row` is an ordered record of values, optionally with field names.
Fields are read by position (``row[0]``), by name (``row["a"]``, ``row.a``) or
by iteration. Rows compare equal when their field names, row kind and values
are equal; they hash by their values (like a tuple) and pickle with names and
kind.

One deliberate difference from PyFlink: ``Row(b=1, a=2)`` keeps the keyword
order (``Row(b=1, a=2)``) instead of sorting the names, as Python keyword
arguments have been ordered since 3.7 (PySpark made the same change in 3.0).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from enum import Enum
from typing import Any

__all__ = [
    "Row",
    "RowKind",
]


class RowKind(Enum):
    """The kind of change a row describes in a changelog."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def short_string(self) -> str:
        """Flink's short form: ``+I``, ``-U``, ``+U``, ``-D``."""
        return _SHORT[self.value]

    def to_byte_value(self) -> int:
        return self.value

    @staticmethod
    def from_byte_value(value: int) -> RowKind:
        return _KINDS[value]


_SHORT = ("+I", "-U", "+U", "-D")
_KINDS = tuple(RowKind)


def _create_row(fields: Sequence[str] | None, values: Sequence[Any], row_kind: Any = None) -> Row:
    row = Row(*values)
    if fields is not None:
        row._fields = list(fields)
    if row_kind is not None:
        row._row_kind = row_kind if isinstance(row_kind, RowKind) else RowKind(row_kind)
    return row


class Row:
    """A record with positional and (optionally) named fields.

    ``Row(1, "x")`` has positional fields only; ``Row(a=1, b="x")`` has named
    fields in keyword order. Mixing both is a ``ValueError``. A row made of
    strings can act as a row "class": ``Person = Row("name", "age")`` then
    ``Person("Alice", 11) == Row(name="Alice", age=11)``.
    """

    __slots__ = ("_fields", "_values", "_row_kind")

    _fields: list[str] | None
    _values: list[Any]
    _row_kind: RowKind

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise ValueError("Can not use both args and kwargs to create Row")
        if kwargs:
            self._fields = list(kwargs)
            self._values = list(kwargs.values())
        else:
            self._fields = None
            self._values = list(args)
        self._row_kind = RowKind.INSERT

    # -- PyFlink API ----------------------------------------------------------------------------

    def as_dict(self, recursive: bool = False) -> dict[str, Any]:
        """The named fields as a dict (nested rows too when ``recursive``).

        Raises ``TypeError`` for a row without field names.
        """
        if self._fields is None:
            raise TypeError("Cannot convert a Row without field names into a dict")
        if not recursive:
            return dict(zip(self._fields, self._values, strict=True))
        return {k: _as_plain(v) for k, v in zip(self._fields, self._values, strict=True)}

    @staticmethod
    def of_kind(row_kind: RowKind, *args: Any, **kwargs: Any) -> Row:
        """A row of the given kind (``Row.of_kind(RowKind.DELETE, 1, "x")``)."""
        row = Row(*args, **kwargs)
        row.set_row_kind(row_kind)
        return row

    def get_fields_by_names(self, names: Sequence[str]) -> list[Any]:
        """The values of the named fields, in the order of ``names``."""
        fields = self.get_field_names()
        if fields is None:
            raise ValueError(f"this row has no field names, so it has none of {list(names)}")
        unknown = [n for n in names if n not in fields]
        if unknown:
            raise ValueError(f"Field names {unknown} not exist in {fields}.")
        return [self[n] for n in names]

    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        if not isinstance(row_kind, RowKind):
            raise TypeError(f"row kind must be a RowKind, got {type(row_kind).__name__}")
        self._row_kind = row_kind

    def set_field_names(self, field_names: Sequence[str] | None) -> None:
        if field_names is not None and len(field_names) != len(self._values):
            raise ValueError(
                f"Row has {len(self._values)} fields but {len(field_names)} names were given"
            )
        self._fields = None if field_names is None else list(field_names)

    def get_field_names(self) -> list[str] | None:
        """The field names, or ``None`` for a positional row."""
        return None if self._fields is None else list(self._fields)

    # -- container protocol ---------------------------------------------------------------------

    def __call__(self, *args: Any) -> Row:
        """Create a row whose field names are this row's values."""
        if len(args) > len(self):
            raise ValueError(
                f"Can not create Row with fields {self!r}, expected {len(self)} values "
                f"but got {args!r}"
            )
        return _create_row([str(v) for v in self._values], args, self._row_kind)

    def _index(self, name: str) -> int:
        if self._fields is None:
            raise KeyError(f"Row has no field names; cannot look up {name!r}")
        try:
            return self._fields.index(name)
        except ValueError:
            raise KeyError(name) from None

    def __getitem__(self, item: int | slice | str) -> Any:
        if isinstance(item, int | slice):
            return self._values[item]
        return self._values[self._index(item)]

    def __setitem__(self, key: int | slice | str, value: Any) -> None:
        if isinstance(key, int | slice):
            self._values[key] = value
        else:
            self._values[self._index(key)] = value

    def __getattr__(self, item: str) -> Any:
        if item.startswith("_"):
            raise AttributeError(item)
        fields = self._fields
        if fields is None or item not in fields:
            raise AttributeError(item)
        return self._values[fields.index(item)]

    def __contains__(self, item: Any) -> bool:
        return item in self._values

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    # -- value semantics ------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Row):
            return False
        return (
            self._fields == other._fields
            and self._row_kind == other._row_kind
            and self._values == other._values
        )

    def __hash__(self) -> int:
        return tuple(self._values).__hash__()

    def __reduce__(self) -> tuple[Any, ...]:
        return _create_row, (self._fields, tuple(self._values), self._row_kind.value)

    def __repr__(self) -> str:
        if self._fields is not None:
            body = ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self._values, strict=True))
            return f"Row({body})"
        return "<Row(" + ", ".join(repr(v) for v in self._values) + ")>"  # PyFlink's form


def _as_plain(obj: Any) -> Any:
    if isinstance(obj, Row):
        return obj.as_dict(True) if obj._fields is not None else [_as_plain(v) for v in obj]
    if isinstance(obj, list):
        return [_as_plain(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _as_plain(v) for k, v in obj.items()}
    return obj
