"""Spark out: ``ds.sink_to(SparkTableSink(path, format="parquet", mode="append"))``.

A streamstate extension (PyFlink has no Spark connector). Every subtask stages its
epoch's records; when a checkpoint covering those epochs completes, the driver writes
them with Spark as one batch into the table at ``path`` (any format
``DataFrameWriter.format`` knows: parquet, orc, json, csv, ...). A replayed epoch is
never written twice and a crash at any step of the commit is finished by the restore
(``streamstate/spark/table_sink.py`` has the steps). In at-least-once mode (or without
checkpointing) each epoch is written when it completes.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

__all__ = ["SparkTableSink"]


class SparkTableSink:
    """Writes a stream into a Spark table directory, one committed batch per checkpoint.

    ``mode``: ``"append"`` (default) adds to what the table holds; ``"overwrite"``
    replaces it when the job starts fresh (a restored job keeps its earlier batches);
    ``"error"`` refuses to start when the table holds data. ``type_info``: the schema
    (a record type gives one column per field, any other type one ``value`` column);
    default the stream's declared type, else Spark infers it from the records.
    ``options``: writer options (``compression``, ``header``, ...).
    """

    def __init__(
        self,
        path: str,
        format: str = "parquet",
        mode: str = "append",
        type_info: Any = None,
        options: dict[str, str] | None = None,
    ) -> None:
        from streamstate.spark.table_sink import SaveMode

        self.path = path.rstrip("/")
        self.format = format
        self.mode = SaveMode.parse(mode)
        self.type_info = type_info
        self.options = {str(k): str(v) for k, v in (options or {}).items()}
        self._committer: Any = None
        self._token = uuid.uuid4().hex[:12]

    def _bind_input_type(self, type_info: Any) -> None:
        """``sink_to`` hands over the stream's declared type (used when none was given)."""
        if self.type_info is None:
            self.type_info = type_info

    def _sink_parts(self) -> tuple[str, Any, Any]:
        from streamstate.connectors.staged import StagedRowsSinkOperator
        from streamstate.spark.table_sink import SparkTableCommitter

        def committer(exactly_once: bool = True) -> Any:
            self._committer = SparkTableCommitter(
                self.path,
                self.format,
                self.mode,
                self.options,
                self.type_info,
                exactly_once,
                token=self._token,
            )
            return self._committer

        staging = SparkTableCommitter.staging_dir(self.path)
        return "SparkTable", partial(StagedRowsSinkOperator, staging, self._token), committer

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_committer": None}
