"""Parquet part files for the FileSink's bulk format (pyarrow, the ``parquet`` extra).

A segment is a Parquet file of one epoch's records of one part; a part of several
segments is merged into one Parquet file when it rolls (at a checkpoint or the end of the
input, as Flink's bulk formats roll). The schema comes from a ``RowTypeInfo``
(``Types.ROW_NAMED``): field names become column names and type infos map to Arrow types
by their serializer name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamstate.errors import ConfigurationError

__all__ = ["ParquetPartFormat", "arrow_schema"]


def _pa() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet  # loads the parquet module onto pa
    except ImportError:
        raise ConfigurationError(
            "ParquetBulkWriters needs pyarrow: pip install 'streamstate[parquet]'"
        ) from None
    return pa


def _element(t: Any) -> Any:
    return arrow_type(t.element_type)


_ARROW: dict[str, Callable[[Any], Any]] = {
    "string": lambda t: _pa().string(),
    "char": lambda t: _pa().string(),
    "boolean": lambda t: _pa().bool_(),
    "byte": lambda t: _pa().int8(),
    "short": lambda t: _pa().int16(),
    "int": lambda t: _pa().int32(),
    "long": lambda t: _pa().int64(),
    "float": lambda t: _pa().float32(),
    "double": lambda t: _pa().float64(),
    "sql_date": lambda t: _pa().date32(),
    "sql_time": lambda t: _pa().time64("us"),
    "sql_timestamp": lambda t: _pa().timestamp("us"),
    "list": lambda t: _pa().list_(_element(t)),
    "basic_array": lambda t: _pa().list_(_element(t)),
    "primitive_array": lambda t: _pa().list_(_element(t)),
    "object_array": lambda t: _pa().list_(_element(t)),
    "map": lambda t: _pa().map_(arrow_type(t.key_type), arrow_type(t.value_type)),
    "row": lambda t: _pa().struct(list(zip(t.get_field_names(), map(arrow_type, t.field_types), strict=True))),
}  # fmt: skip


def arrow_type(type_info: Any) -> Any:
    name = getattr(type_info, "serializer_name", None)
    conv = _ARROW.get(name or "")
    if conv is None:
        raise ConfigurationError(
            f"ParquetBulkWriters cannot write {type_info!r}; supported: "
            f"{', '.join(sorted(_ARROW))} (as Types.*)"
        )
    return conv(type_info)


def arrow_schema(row_type: Any) -> Any:
    if getattr(row_type, "serializer_name", None) != "row":
        raise ConfigurationError(
            f"ParquetBulkWriters.for_row_type needs Types.ROW_NAMED([...], [...]), got {row_type!r}"
        )
    pa = _pa()
    return pa.schema(
        [
            pa.field(n, arrow_type(t))
            for n, t in zip(row_type.get_field_names(), row_type.field_types, strict=True)
        ]
    )


class ParquetPartFormat:
    """Bulk format: each segment and each finished part is one Parquet file."""

    bulk = True

    def __init__(self, row_type: Any, utc_timestamp: bool = False) -> None:
        arrow_schema(row_type)  # fail at build time, on the driver
        self.row_type = row_type
        self.utc_timestamp = utc_timestamp
        self.names = row_type.get_field_names()

    def _schema(self) -> Any:
        return arrow_schema(self.row_type)

    def _table(self, rows: list[Any]) -> Any:
        pa = _pa()
        names = self.names
        cols: list[Any]
        if rows and isinstance(rows[0], dict):
            cols = [[r.get(n) for r in rows] for n in names]
        else:
            cols = list(zip(*rows, strict=True)) if rows else [() for _ in names]
        if len(cols) != len(names):
            raise ConfigurationError(
                f"ParquetBulkWriters: records have {len(cols)} fields, the row type "
                f"{self.row_type!r} has {len(names)}"
            )
        schema = self._schema()
        return pa.Table.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
        )

    def write_segment(self, url: str, rows: list[Any]) -> None:
        import fsspec

        pa = _pa()
        fs, path = fsspec.core.url_to_fs(url)
        with fs.open(path, "wb") as f:
            pa.parquet.write_table(self._table(rows), f)

    def merge(self, segments: list[str], url: str) -> None:
        import fsspec

        pa = _pa()
        tables = []
        for seg in segments:
            sfs, spath = fsspec.core.url_to_fs(seg)
            with sfs.open(spath, "rb") as f:
                tables.append(pa.parquet.read_table(f))
        fs, path = fsspec.core.url_to_fs(url)
        with fs.open(path, "wb") as f:
            pa.parquet.write_table(pa.concat_tables(tables), f)
