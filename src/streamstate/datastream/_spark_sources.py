"""The environment's Spark sources: ``from_dataframe`` and ``from_spark_stream``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamstate.datastream.data_stream import DataStream

__all__ = ["SparkSourcesMixin"]


class SparkSourcesMixin:
    """Methods of :class:`StreamExecutionEnvironment` that read from Spark."""

    def _source(self, source: Any, name: str) -> DataStream:
        raise NotImplementedError  # pragma: no cover - StreamExecutionEnvironment's

    def from_dataframe(
        self, df: Any, staging_path: str | None = None, source_name: str = "DataFrame Source"
    ) -> DataStream:
        """A bounded stream of a Spark DataFrame's rows, as :class:`Row` objects with the
        DataFrame's field names; its type info is the schema's ``Types.ROW_NAMED``.

        One split per DataFrame partition; the rows are staged once, when this is called
        (one Spark job writing each partition to ``staging_path``, default a local temp
        dir; on a cluster give a directory every worker reads), and read split by split
        with checkpointed positions, so a replay after a failure reads the same rows."""
        from streamstate.connectors.staged import StagedRowsSource
        from streamstate.spark.dataframes import stage_dataframe, type_info_of

        source = StagedRowsSource(stage_dataframe(df, staging_path))
        ds = self._source(source, source_name)
        ds._t.output_type = type_info_of(df.schema)
        return ds
