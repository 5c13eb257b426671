"""Spark DataFrames in and out of streamstate jobs (the only pyspark user of the bridge).

* :func:`type_info_of` maps a Spark SQL type (a DataFrame schema) to ``Types.*``, the
  reverse of :func:`streamstate.spark.schema.spark_type`.
* :func:`stage_dataframe` writes each partition of a DataFrame as one staged rows file
  (``connectors/staged.py``), in one Spark job: what ``env.from_dataframe`` reads.
* :func:`stream_to_dataframe` runs a bounded job and returns its output as a DataFrame.

On a Spark Connect session (no RDDs) both go through ``mapInArrow`` instead of the RDD
API, converting between Arrow and Python rows with pyspark's own Connect conversions
(``pyspark.sql.conversion``: the values a Connect ``collect()`` returns, the rows a Connect
``createDataFrame`` accepts).
"""

from __future__ import annotations

import os
import uuid
from functools import partial
from typing import Any

from streamstate.common.typeinfo import TypeInformation, Types
from streamstate.connectors.staged import (
    StagedFilesCommitter,
    StagedRowsSinkOperator,
    StagedSplit,
    read_staged_rows,
    write_staged_rows,
)
from streamstate.errors import ConfigurationError
from streamstate.runtime.graph import TransformationKind
from streamstate.runtime.runtime_dir import scratch_dir
from streamstate.spark.schema import from_spark, record_converter, record_schema
from streamstate.spark.session import is_connect_session

__all__ = [
    "active_spark",
    "default_staging_dir",
    "check_bounded",
    "converted_rows",
    "plain_record",
    "schema_of",
    "stage_dataframe",
    "staged_files_dataframe",
    "stream_to_dataframe",
    "type_info_of",
]

#: Spark SQL type name (``DataType.typeName()``) -> type information factory
_SIMPLE: dict[str, Any] = {
    "string": Types.STRING,
    "varchar": Types.STRING,
    "char": Types.STRING,
    "boolean": Types.BOOLEAN,
    "byte": Types.BYTE,
    "short": Types.SHORT,
    "integer": Types.INT,
    "long": Types.LONG,
    "float": Types.FLOAT,
    "double": Types.DOUBLE,
    "date": Types.SQL_DATE,
    "timestamp": Types.SQL_TIMESTAMP,
    "timestamp_ntz": Types.SQL_TIMESTAMP,
    "binary": partial(Types.PRIMITIVE_ARRAY, Types.BYTE()),
}


def _decimal(dt: Any) -> TypeInformation:
    return Types.BIG_INT() if dt.scale == 0 else Types.BIG_DEC()


def _struct(dt: Any) -> TypeInformation:
    return Types.ROW_NAMED(
        [f.name for f in dt.fields], [type_info_of(f.dataType) for f in dt.fields]
    )


def _array(dt: Any) -> TypeInformation:
    return Types.LIST(type_info_of(dt.elementType))


def _map(dt: Any) -> TypeInformation:
    return Types.MAP(type_info_of(dt.keyType), type_info_of(dt.valueType))


#: Spark types whose values pyspark gives as Rows / lists / dicts that may hold Rows
_NESTED_SPARK = ("struct", "array", "map")
_NESTED = {"decimal": _decimal, "struct": _struct, "array": _array, "map": _map}


def type_info_of(data_type: Any) -> TypeInformation:
    """The ``Types.*`` of values of a Spark SQL ``DataType`` (a schema: ``ROW_NAMED``).

    string/varchar/char -> STRING, boolean -> BOOLEAN, byte/short/integer/long ->
    BYTE/SHORT/INT/LONG, float/double -> FLOAT/DOUBLE, decimal(p,0) -> BIG_INT,
    decimal(p,s) -> BIG_DEC, date -> SQL_DATE, timestamp/timestamp_ntz -> SQL_TIMESTAMP,
    binary -> PRIMITIVE_ARRAY(BYTE), array -> LIST, map -> MAP, struct -> ROW_NAMED.
    Other types (intervals, variant, user-defined) -> PICKLED_BYTE_ARRAY (values as
    pyspark's ``collect()`` returns them).
    """
    name = data_type.typeName()
    if name in _SIMPLE:
        return _SIMPLE[name]()  # type: ignore[no-any-return]  # the factories return TypeInformation
    nested = _NESTED.get(name)
    if nested is not None:
        return nested(data_type)
    return Types.PICKLED_BYTE_ARRAY()


def active_spark(spark: Any = None) -> Any:
    """``spark``, else the session of the job this thread runs (``session.job_session``),
    else the active SparkSession (classic, then Spark Connect), else a new one
    (streamstate's defaults)."""
    if spark is not None:
        return spark
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from streamstate.spark.session import get_or_create_spark, job_session

    for active in (job_session(), SparkSession.getActiveSession(), ConnectSession.getActiveSession()):
        if active is not None:
            return active
    return get_or_create_spark(None)


def default_staging_dir(kind: str) -> str:
    """A new local directory for staged rows, private to this process and removed when it
    exits (``runtime_dir.scratch_dir``; fits local masters; on a cluster pass a directory
    every worker can read)."""
    return scratch_dir(kind)


def _nested_values(row: Any) -> tuple[Any, ...]:
    return tuple(from_spark(v) for v in row)


def _stage_partition(base: str, fields: list[str], nested: bool, index: int, rows: Any) -> Any:
    path = f"{base}/part-{index:05d}.rows"
    convert = _nested_values if nested else tuple
    yield index, path, write_staged_rows(path, rows, convert, fields)


def _stage_batches(
    base: str, fields: list[str], nested: bool, schema: Any, batches: Any
) -> Any:
    """``mapInArrow`` of a Connect DataFrame: its partition as one staged rows file."""
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql.conversion import ArrowTableToRowsConversion

    context = TaskContext.get()
    assert context is not None  # always set in a Spark task
    index = context.partitionId()

    def rows() -> Any:
        for b in batches:
            if b.num_rows:
                yield from ArrowTableToRowsConversion.convert(pa.Table.from_batches([b]), schema)

    (_, path, n) = next(_stage_partition(base, fields, nested, index, rows()))
    yield pa.RecordBatch.from_arrays(
        [pa.array([index], pa.int32()), pa.array([path]), pa.array([n], pa.int64())],
        names=["idx", "path", "n"],
    )


def stage_dataframe(df: Any, staging_dir: str | None = None) -> list[StagedSplit]:
    """Write every partition of ``df`` into its own staged rows file (one Spark job);
    the splits ``[path, rows]`` in partition order."""
    if staging_dir is None:
        # re-staged by every from_dataframe() call (also for a restore): a local temp
        # directory only this process uses, removed when it ends
        staging_dir = default_staging_dir("df")
    base = staging_dir.rstrip("/")
    base = f"{base}/{uuid.uuid4().hex}"
    if "://" not in base:
        os.makedirs(base, exist_ok=True)
    fields = list(df.schema.names)
    nested = any(f.dataType.typeName() in _NESTED_SPARK for f in df.schema.fields)
    if is_connect_session(df.sparkSession):
        fn = partial(_stage_batches, base, fields, nested, df.schema)
        out = [tuple(r) for r in df.mapInArrow(fn, "idx int, path string, n long").collect()]
    else:
        fn = partial(_stage_partition, base, fields, nested)
        out = df.rdd.mapPartitionsWithIndex(fn).collect()
    return [[path, n] for _, path, n in sorted(out)]


def schema_of(df: Any) -> TypeInformation:
    """The ``ROW_NAMED`` type information of a DataFrame's rows."""
    return type_info_of(df.schema)


def converted_rows(convert: Any, path: str) -> list[Any]:
    """The records of a staged rows file, each through ``convert`` (Spark task side)."""
    return [convert(r) for r in read_staged_rows(path)]


class _StagedOutput:
    """The sink of ``to_dataframe``: subtasks stage their records; committed files kept."""

    def __init__(self, staging_dir: str) -> None:
        self.staging_dir = staging_dir
        self.committer: StagedFilesCommitter | None = None

    def _sink_parts(self) -> tuple[str, Any, Any]:
        def committer(exactly_once: bool = True) -> StagedFilesCommitter:
            self.committer = StagedFilesCommitter()
            return self.committer

        op = partial(StagedRowsSinkOperator, self.staging_dir, uuid.uuid4().hex[:12])
        return "ToDataFrame", op, committer

    def __getstate__(self) -> dict[str, Any]:
        return {"staging_dir": self.staging_dir, "committer": None}


def check_bounded(t: Any, env: Any, what: str) -> None:
    """Refuse ``what`` when a source of ``t`` is unbounded (unless max-epochs ends the job)."""
    if env.get_configuration().get_string("execution.epoch.max-epochs", None):
        return
    stack, seen = [t], set()
    while stack:
        n = stack.pop()
        if n.id in seen:
            continue
        seen.add(n.id)
        if n.kind is TransformationKind.SOURCE and not getattr(n.payload, "bounded", True):
            raise ConfigurationError(
                f"{what} needs a bounded job, but source {n.name!r} is unbounded: use "
                f"sink_to(SparkTableSink(...)) for unbounded streams, or bound the run with "
                f"execution.epoch.max-epochs"
            )
        stack.extend(n.inputs)


def stream_to_dataframe(
    ds: Any, job_name: str, type_info: Any = None, spark: Any = None, staging_dir: str | None = None
) -> Any:
    """Run ``ds``'s (bounded) job and return its records as a DataFrame (see
    ``DataStream.to_dataframe``): every subtask stages its epochs' records; the DataFrame
    reads the committed files in Spark tasks, lazily (the staged files stay until this
    process ends when ``staging_dir`` is the default)."""
    check_bounded(ds._t, ds._env, "to_dataframe()")
    if staging_dir is None:
        staging_dir = default_staging_dir("out")
    sink = _StagedOutput(staging_dir.rstrip("/"))
    ds.sink_to(sink)
    env = ds._env
    session = spark if spark is not None else env._spark
    own_session = session is None
    if own_session:
        # the DataFrame outlives the job: the Connect session the job would make for itself
        # (and stop at its end) is made here and lent to it, and stays with the DataFrame
        from streamstate.spark.runners import connect_session_for

        session = env._spark = connect_session_for(env._configuration)
    try:
        env.execute(job_name)
    finally:
        if own_session:
            env._spark = None
    assert sink.committer is not None
    files = list(sink.committer.committed)
    session = active_spark(session)
    ti = type_info if type_info is not None else ds._t.output_type
    if ti is None and not files:
        raise ConfigurationError(
            "to_dataframe() of an empty stream needs its type: declare output_type=Types... "
            "on the last operator (or pass type_info=)"
        )
    return staged_files_dataframe(session, files, ti)


def staged_files_dataframe(session: Any, files: list[str], ti: Any) -> Any:
    """The records of staged rows files as a DataFrame of ``session``, one partition per
    file, read in Spark tasks: typed by ``ti`` (``record_schema``), or, without one,
    with a schema Spark infers from the records (``plain_record``)."""
    convert = record_converter(ti) if ti is not None else plain_record
    if is_connect_session(session):
        return _connect_dataframe(session, files, convert, ti)
    rdd = session.sparkContext.parallelize(files, max(1, len(files)))
    rdd = rdd.flatMap(partial(converted_rows, convert))
    if ti is not None:
        return session.createDataFrame(rdd, record_schema(ti))
    return session.createDataFrame(rdd, samplingRatio=None)


#: records read on the client to infer the schema of an untyped stream (as Spark samples)
_INFER_RECORDS = 100


def _file_batches(
    files: list[str], convert: Any, schema: Any, large: bool, batches: Any
) -> Any:
    """``mapInArrow`` of :func:`_connect_dataframe`: partition ``i`` holds the row ``i``
    and yields the records of ``files[i]`` as Arrow batches of ``schema``."""
    from pyspark.sql.conversion import LocalDataToArrowConversion

    for b in batches:
        for index in b.column(0).to_pylist():
            rows = converted_rows(convert, files[index])
            if rows:
                yield from LocalDataToArrowConversion.convert(rows, schema, large).to_batches()


def _connect_dataframe(session: Any, files: list[str], convert: Any, ti: Any) -> Any:
    """The staged output files as a DataFrame of a Connect session: partition ``i`` reads
    ``files[i]`` in ``mapInArrow`` on the server (lazily, in order, as the classic path)."""
    if ti is not None:
        schema = record_schema(ti)
    else:  # infer it from the first records, as createDataFrame(rdd) does
        sample = [convert(r) for f in files[:1] for r in read_staged_rows(f)[:_INFER_RECORDS]]
        schema = session.createDataFrame(sample).schema
    large = str(session.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false"))
    fn = partial(_file_batches, files, convert, schema, large.strip().lower() == "true")
    n = max(1, len(files))
    return session.range(len(files), numPartitions=n).mapInArrow(fn, schema)


def plain_record(r: Any) -> Any:
    """A record as a pyspark ``Row`` Spark can infer a schema from: a named ``Row`` keeps
    its names, a tuple's fields are ``f0, f1, ...``, any other value is ``value``."""
    from pyspark.sql import Row as SparkRow

    names = getattr(r, "_fields", None)
    if names:
        return SparkRow(**{n: r[n] for n in names})
    if isinstance(r, tuple | list) or hasattr(r, "_values"):
        return SparkRow(**{f"f{i}": v for i, v in enumerate(r)})
    return SparkRow(value=r)
