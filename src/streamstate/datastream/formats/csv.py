"""CSV, mirroring ``pyflink.datastream.formats.csv`` (reading, with ``FileSource``).

::

    schema = (CsvSchema.builder()
              .add_number_column("id", number_type=Types.INT())
              .add_string_column("name")
              .add_array_column("tags", separator=";")
              .set_use_header()
              .build())
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), path).build()
    # records: Row(id=..., name=..., tags=[...]), type Types.ROW_NAMED(["id", "name", "tags"], ...)

Column types are ``Types.*`` type infos (PyFlink takes ``DataTypes``, which streamstate
does not have). One record per line: quoted fields may not contain line breaks.
"""

from __future__ import annotations

from typing import Any

from streamstate.common.typeinfo import Types
from streamstate.datastream.connectors.file_system import StreamFormat
from streamstate.errors import ConfigurationError

__all__ = ["CsvReaderFormat", "CsvSchema", "CsvSchemaBuilder"]

_NUMBERS = {"byte", "short", "int", "long", "big_int", "float", "double", "big_dec"}


def _single_char(what: str, char: str) -> str:
    if not isinstance(char, str) or len(char) != 1:
        raise ConfigurationError(f"{what} must be a single char, got {char!r}")
    return char


class CsvSchema:
    """The columns of a CSV file and how it is written (separator, quotes, header...)."""

    def __init__(self, columns: list[tuple[str, Any, str | None]], options: dict[str, Any]) -> None:
        self._columns = list(columns)
        self._options = dict(options)

    @staticmethod
    def builder() -> CsvSchemaBuilder:
        return CsvSchemaBuilder()

    def get_type_info(self) -> Any:
        """``Types.ROW_NAMED`` of the columns: the type of the records read with it."""
        return Types.ROW_NAMED([c[0] for c in self._columns], [c[1] for c in self._columns])

    def size(self) -> int:
        return len(self._columns)

    def __len__(self) -> int:
        return self.size()

    def __repr__(self) -> str:
        cols = ", ".join(f"{n}: {t!r}" for n, t, _ in self._columns)
        return f"CsvSchema([{cols}], {self._options})"


class CsvSchemaBuilder:
    """Builds a :class:`CsvSchema` (PyFlink's ``CsvSchemaBuilder``)."""

    def __init__(self) -> None:
        self._columns: list[tuple[str, Any, str | None]] = []
        self._options: dict[str, Any] = {
            "separator": ",",
            "quote_char": '"',
            "escape_char": None,
            "null_value": "",
            "skip_first_line": False,
            "allow_comments": False,
            "array_separator": ";",
        }

    def build(self) -> CsvSchema:
        if not self._columns:
            raise ConfigurationError("a CsvSchema needs at least one column (add_*_column)")
        return CsvSchema(self._columns, self._options)

    def _add(self, name: str, type_info: Any, array_sep: str | None = None) -> CsvSchemaBuilder:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"a CSV column needs a non-empty name, got {name!r}")
        if name in (c[0] for c in self._columns):
            raise ConfigurationError(f"CSV column {name!r} is added twice")
        self._columns.append((name, type_info, array_sep))
        return self

    def add_array_column(
        self, name: str, separator: str = ";", element_type: Any = None
    ) -> CsvSchemaBuilder:
        """A column holding a list, its elements separated by ``separator``."""
        return self._add(name, Types.LIST(element_type or Types.STRING()), separator)

    def add_boolean_column(self, name: str) -> CsvSchemaBuilder:
        return self._add(name, Types.BOOLEAN())

    def add_number_column(self, name: str, number_type: Any = None) -> CsvSchemaBuilder:
        """A number column, ``Types.LONG()`` unless ``number_type`` says otherwise
        (``Types.INT()``, ``Types.DOUBLE()``, ``Types.BIG_DEC()``, ...)."""
        t = number_type or Types.LONG()
        if getattr(t, "serializer_name", None) not in _NUMBERS:
            raise ConfigurationError(
                f"add_number_column({name!r}) needs a numeric Types.* (INT, LONG, DOUBLE, "
                f"FLOAT, BIG_DEC, ...), got {t!r}"
            )
        return self._add(name, t)

    def add_string_column(self, name: str) -> CsvSchemaBuilder:
        return self._add(name, Types.STRING())

    def add_columns_from(self, schema: CsvSchema) -> CsvSchemaBuilder:
        for name, t, sep in schema._columns:
            self._add(name, t, sep)
        return self

    def clear_columns(self) -> CsvSchemaBuilder:
        self._columns.clear()
        return self

    def set_allow_comments(self, allow: bool = True) -> CsvSchemaBuilder:
        """Lines starting with ``#`` are skipped."""
        self._options["allow_comments"] = allow
        return self

    def set_array_element_separator(self, separator: str) -> CsvSchemaBuilder:
        self._options["array_separator"] = separator
        self._columns = [(n, t, separator if s is not None else None) for n, t, s in self._columns]
        return self

    def set_column_separator(self, char: str) -> CsvSchemaBuilder:
        self._options["separator"] = _single_char("Column separator", char)
        return self

    def disable_escape_char(self) -> CsvSchemaBuilder:
        self._options["escape_char"] = None
        return self

    def set_escape_char(self, char: str) -> CsvSchemaBuilder:
        self._options["escape_char"] = _single_char("Escape char", char)
        return self

    def set_line_separator(self, separator: str) -> CsvSchemaBuilder:
        """Accepted (reading recognises ``\\n``, ``\\r`` and ``\\r\\n``, as in Flink)."""
        return self

    def set_null_value(self, null_value: str) -> CsvSchemaBuilder:
        """The literal read as None (default: the empty string)."""
        self._options["null_value"] = null_value
        return self

    def disable_quote_char(self) -> CsvSchemaBuilder:
        self._options["quote_char"] = None
        return self

    def set_quote_char(self, char: str) -> CsvSchemaBuilder:
        self._options["quote_char"] = _single_char("Quote char", char)
        return self

    def set_skip_first_data_row(self, skip: bool = True) -> CsvSchemaBuilder:
        """Skip each file's first line."""
        self._options["skip_first_line"] = skip
        return self

    def set_strict_headers(self, strict: bool = True) -> CsvSchemaBuilder:
        """Accepted: the header line is skipped, not checked against the column names."""
        return self

    def set_use_header(self, use: bool = True) -> CsvSchemaBuilder:
        """Each file starts with a header line, which is skipped."""
        self._options["skip_first_line"] = use
        return self

    def size(self) -> int:
        return len(self._columns)

    def __len__(self) -> int:
        return self.size()


class CsvReaderFormat(StreamFormat):
    """Reads a CSV file, one ``Row`` of the schema's columns per line."""

    def __init__(self, schema: CsvSchema) -> None:
        super().__init__("csv")
        self._schema = schema

    @staticmethod
    def for_schema(schema: CsvSchema) -> CsvReaderFormat:
        if not isinstance(schema, CsvSchema):
            raise ConfigurationError(
                f"CsvReaderFormat.for_schema() needs a CsvSchema (CsvSchema.builder()...build()), "
                f"got {type(schema).__name__}"
            )
        return CsvReaderFormat(schema)

    def _produced_type(self) -> Any:
        return self._schema.get_type_info()

    def _line_format(self) -> Any:
        from streamstate.connectors.line_formats import CsvLines

        o = self._schema._options
        return CsvLines(
            self._schema._columns,
            separator=o["separator"],
            quote_char=o["quote_char"],
            escape_char=o["escape_char"],
            null_value=o["null_value"],
            skip_first_line=o["skip_first_line"],
            allow_comments=o["allow_comments"],
        )
