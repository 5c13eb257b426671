"""Parquet, mirroring ``pyflink.datastream.formats.parquet`` (writing; pyarrow)."""

from __future__ import annotations

from typing import Any

from streamstate.datastream.connectors.file_system import BulkWriterFactory

__all__ = ["ParquetBulkWriters"]


class ParquetBulkWriters:
    """Builds the :class:`BulkWriterFactory` of ``FileSink.for_bulk_format`` that writes
    records of a row type into Parquet files::

        row_type = Types.ROW_NAMED(["id", "name"], [Types.LONG(), Types.STRING()])
        sink = FileSink.for_bulk_format(out, ParquetBulkWriters.for_row_type(row_type)).build()

    Records are ``Row``s, tuples or dicts of the row type's fields. Needs pyarrow
    (``pip install 'streamstate[parquet]'``).
    """

    @staticmethod
    def for_row_type(
        row_type: Any, hadoop_config: Any = None, utc_timestamp: bool = False
    ) -> BulkWriterFactory:
        """``row_type``: ``Types.ROW_NAMED([...], [...])``. ``hadoop_config`` is accepted
        for PyFlink compatibility and ignored (pyarrow writes the files)."""
        from streamstate.connectors.parquet import ParquetPartFormat

        return BulkWriterFactory(ParquetPartFormat(row_type, utc_timestamp))
