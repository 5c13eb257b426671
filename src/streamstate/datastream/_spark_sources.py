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

    def from_spark_stream(
        self,
        streaming_df: Any,
        checkpoint_location: str | None = None,
        bounded: bool = False,
        retained_versions: int = 10,
        source_name: str = "Spark Stream Source",
    ) -> DataStream:
        """A stream fed by a Structured Streaming DataFrame (``spark.readStream``: files,
        ``rate``, Kafka when its connector is on the classpath, ...), rows as :class:`Row`
        objects with the schema's ``Types.ROW_NAMED`` as type info.

        Before an epoch, once the previous micro-batch was read, the driver runs the query
        for one ``availableNow`` trigger and stages its micro-batch (one split per
        partition). The Spark offsets live in a versioned copy of the query's checkpoint
        under ``checkpoint_location`` (default a new local temp dir: give a durable one to
        restore in another process); streamstate's checkpoints name the version, so a
        restore resumes exactly at the checkpointed offsets. ``bounded=True`` ends the job
        when a trigger finds no new data (Spark's ``availableNow``); else it runs until
        cancelled. ``retained_versions``: how many trigger versions to keep (a restore
        needs its checkpoint's version)."""
        from streamstate.spark.dataframes import default_staging_dir, type_info_of
        from streamstate.spark.stream_source import SparkStreamSource

        source = SparkStreamSource(
            streaming_df,
            checkpoint_location or default_staging_dir("stream"),
            bounded=bounded,
            retained_versions=retained_versions,
        )
        ds = self._source(source, source_name)
        ds._t.output_type = type_info_of(streaming_df.schema)
        return ds
