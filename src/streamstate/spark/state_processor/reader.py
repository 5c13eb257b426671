"""``SavepointReader``: the state of a savepoint or checkpoint as Spark DataFrames.

Every read is planned on the driver from ``_metadata`` alone (``runtime/state_processor/
plan.py``: unknown uids, states, modes and key types fail here, before any Spark job) and
computed by a Spark job when the DataFrame is used: keyed state one task per key-group
range (``runtime/state_processor/reading.py``), operator state one task per subtask
snapshot. The driver reads no keyed state. Errors raised in a task (a damaged file, a
reader function that fails) surface from the Spark action that ran it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from streamstate.api.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ReducingStateDescriptor,
)
from streamstate.api.state_processor import (
    KeyedStateReaderFunction,
    OperatorIdentifier,
    WindowReaderFunction,
)
from streamstate.api.window_base import MergingWindowAssigner, WindowAssigner
from streamstate.common.typeinfo import Types
from streamstate.errors import ConfigurationError
from streamstate.runtime.checkpoint.metadata import CheckpointMetadata
from streamstate.runtime.operators.output_types import OutputTypeCheck
from streamstate.runtime.serializers.registry import serializer_for
from streamstate.runtime.state.operator import OperatorStateMode
from streamstate.runtime.state_processor.plan import (
    BackendSpec,
    KeyedReadSpec,
    backend_spec,
    load_savepoint,
    plan_keyed_read,
    plan_operator_read,
)
from streamstate.runtime.state_processor.reading import (
    WINDOW_STATE_NAME,
    WindowReadSpec,
    read_keyed_range,
    read_operator_subtask,
    read_window_range,
)
from streamstate.runtime.stores import StorageOptions
from streamstate.spark.schema import inferable_row, record_converter, record_schema
from streamstate.spark.session import check_session_python, require_classic

__all__ = ["SavepointReader", "WindowSavepointReader"]

_BATCH = 1024


def _typed_rows(uid: str, output_type: Any, records: Any) -> Any:
    """Check each record against ``output_type`` (OutputTypeError naming the operator) and
    convert it into a row of the DataFrame's schema; without an ``output_type``, into a row
    Spark infers the schema of."""
    if output_type is None:
        yield from map(inferable_row, records)
        return
    check = OutputTypeCheck(f"reader of {uid}", output_type)
    convert = record_converter(output_type)
    batch: list[Any] = []
    for r in records:
        batch.append(r)
        if len(batch) >= _BATCH:
            check(batch)
            yield from map(convert, batch)
            batch = []
    check(batch)
    yield from map(convert, batch)


def _keyed_task(spec: KeyedReadSpec, function: Any, output_type: Any, index: int, _: Any) -> Any:
    return _typed_rows(spec.uid, output_type, read_keyed_range(spec, index, function))


def _window_task(
    spec: KeyedReadSpec, window: WindowReadSpec, function: Any, output_type: Any, index: int, _: Any
) -> Any:
    return _typed_rows(spec.uid, output_type, read_window_range(spec, index, window, function))


def _operator_task(
    where: str, name: str, mode: OperatorStateMode, uid: str, output_type: Any, handles: Any
) -> Any:
    for handle in handles:
        yield from _typed_rows(uid, output_type, read_operator_subtask(handle, name, mode, where))


def _key_serializer(key_type: Any) -> Any:
    return None if key_type is None else serializer_for(key_type)


def _output_type(output_type: Any) -> Any:
    if output_type is None:
        raise ConfigurationError(
            "the records of operator state need a declared type for the DataFrame's "
            "schema: pass Types.ROW_NAMED([...], [...]) (one column per field) or any "
            "Types.* type (one column named 'value')"
        )
    record_schema(output_type)  # raises for types without a Spark SQL type
    return output_type


def _reader_output_type(output_type: Any) -> Any:
    """A reader function's ``output_type``, checked; None: the schema is inferred."""
    return None if output_type is None else _output_type(output_type)


def _inferred_frame(spark: Any, rdd: Any) -> Any:
    """The DataFrame of ``rdd``'s rows with the schema Spark infers from its first rows."""
    try:
        return spark.createDataFrame(rdd)
    except ValueError as e:  # PySpark's CANNOT_INFER_EMPTY_SCHEMA (a ValueError)
        if "EMPTY" not in str(getattr(e, "getErrorClass", lambda: "")()) and "empty" not in str(e):
            raise
        raise ConfigurationError(
            "the reader function emitted no records, so there is nothing to infer the "
            "DataFrame's schema from: pass output_type=... (e.g. Types.ROW_NAMED([...], [...]))"
        ) from e


class SavepointReader:
    """Reads the state of one savepoint (or retained checkpoint) into DataFrames."""

    def __init__(self, spark: Any, path: str, metadata: CheckpointMetadata, backend: BackendSpec):
        self.spark = require_classic(spark, "the State Processor API (SavepointReader)")
        check_session_python(spark)  # its tasks run streamstate: a clear error, not a stack
        self.path = path
        self.metadata = metadata
        self.backend = backend
        #: the store options of this process (s3.* of a job that ran here, or
        #: ``configuration``'s): the executors reading the state files install them
        self.storage_options = StorageOptions.current()

    @staticmethod
    def read(
        spark: Any, path: str, backend: Any = None, configuration: Any = None
    ) -> SavepointReader:
        """Open the savepoint (or checkpoint) at ``path`` (its directory or ``_metadata``).

        ``backend`` (``HashMapStateBackend()``, ``EmbeddedRocksDBStateBackend()``, a
        backend name; default heap) is what each task restores canonical snapshots into:
        RocksDB holds a key-group range on the executor's disk instead of in memory.
        Native RocksDB state (native savepoints, incremental checkpoints) is always
        opened with RocksDB. ``_metadata``'s signature is verified now; state files by
        the tasks that read them. ``configuration`` (a Configuration or a dict): the
        store's endpoint and credentials (``s3.endpoint``, ``s3.access-key``, ...; see
        docs/guarantees.md), for this process and the executors reading the files."""
        if configuration is not None:
            StorageOptions.from_configuration(configuration).install()
        return SavepointReader(spark, path, load_savepoint(path), backend_spec(backend))

    # -- keyed state ---------------------------------------------------------------------
    def _parallelism(self) -> int:
        return int(self.spark.sparkContext.defaultParallelism)

    def read_keyed_state(
        self,
        uid: str | OperatorIdentifier,
        function: KeyedStateReaderFunction,
        key_type: Any = None,
        output_type: Any = None,
    ) -> Any:
        """A DataFrame of the records ``function`` emits for every key of operator
        ``uid`` (keys that have a value in a state registered in ``function.open``).

        ``key_type``: the job's ``key_by`` key type (``None``: the recorded key serializer,
        right for jobs that declared none). ``output_type``: the records' type; a ROW /
        ROW_NAMED / TUPLE type gives one column per field, any other type one ``value``
        column. Without it the schema is inferred from the first records, as Spark's
        ``createDataFrame`` does for rows without a schema (rows' fields are the columns,
        ``f0``, ``f1``, ... for tuples; other values one ``value`` column); declare it for
        control (types, nullability, no inference job)."""
        if not isinstance(function, KeyedStateReaderFunction):
            raise ConfigurationError(
                f"read_keyed_state() takes a KeyedStateReaderFunction, got {function!r}"
            )
        output_type = _reader_output_type(output_type)
        spec = plan_keyed_read(
            self.metadata, uid, self.backend, _key_serializer(key_type), self._parallelism()
        )
        task = partial(_keyed_task, spec, function, output_type)
        return self._frame(len(spec.ranges), task, output_type)

    def _frame(self, n: int, task: Any, output_type: Any) -> Any:
        task = self.storage_options.installed_around(task)
        rdd = self.spark.sparkContext.parallelize(range(n), n).mapPartitionsWithIndex(task)
        if output_type is None:
            return _inferred_frame(self.spark, rdd)
        return self.spark.createDataFrame(rdd, record_schema(output_type), verifySchema=False)

    def window(self, assigner: WindowAssigner) -> WindowSavepointReader:
        """Read the windows of a window operator built with ``assigner`` (tumbling and
        sliding windows, event or processing time; not merging/session windows)."""
        return WindowSavepointReader(self, assigner)

    # -- operator state ------------------------------------------------------------------
    def _operator_frame(
        self, uid: Any, name: str, mode: OperatorStateMode, output_type: Any
    ) -> Any:
        where, handles = plan_operator_read(self.metadata, uid, name, mode)
        uid_s = OperatorIdentifier.of(uid).identifier
        task = self.storage_options.installed_around(
            partial(_operator_task, where, name, mode, uid_s, output_type)
        )
        schema = record_schema(output_type)
        if not handles:
            return self.spark.createDataFrame([], schema)
        rdd = self.spark.sparkContext.parallelize(handles, len(handles)).mapPartitions(task)
        return self.spark.createDataFrame(rdd, schema, verifySchema=False)

    def read_list_state(self, uid: str | OperatorIdentifier, name: str, type_info: Any) -> Any:
        """Operator list state ``name``: every subtask's elements, one row each."""
        return self._operator_frame(
            uid, name, OperatorStateMode.SPLIT_DISTRIBUTE, _output_type(type_info)
        )

    def read_union_state(self, uid: str | OperatorIdentifier, name: str, type_info: Any) -> Any:
        """Union list state ``name``: every subtask's elements (what a restored subtask sees)."""
        return self._operator_frame(uid, name, OperatorStateMode.UNION, _output_type(type_info))

    def read_broadcast_state(
        self,
        uid: str | OperatorIdentifier,
        name: str,
        key_type_info: Any,
        value_type_info: Any,
    ) -> Any:
        """Broadcast state ``name``: ``key`` and ``value`` columns, one row per entry and
        subtask copy (the copies are equal in a job: ``.distinct()`` if needed)."""
        row = Types.ROW_NAMED(["key", "value"], [key_type_info, value_type_info])
        return self._operator_frame(uid, name, OperatorStateMode.BROADCAST, row)


class WindowSavepointReader:
    """The windows of one window operator (``SavepointReader.window(assigner)``), read as
    the job built them: ``reduce``, ``aggregate`` or ``process`` (``apply``)."""

    def __init__(self, reader: SavepointReader, assigner: Any) -> None:
        if not isinstance(assigner, WindowAssigner):
            raise ConfigurationError(f"window() takes a window assigner, got {assigner!r}")
        if isinstance(assigner, MergingWindowAssigner):
            raise ConfigurationError(
                f"reading merging (session) windows is not supported ({assigner!r}); see "
                f"docs/limitations.md"
            )
        self._reader = reader
        self.assigner = assigner

    def _read(
        self, uid: Any, descriptor: Any, function: Any, key_type: Any, output_type: Any
    ) -> Any:
        if not isinstance(function, WindowReaderFunction):
            raise ConfigurationError(f"expected a WindowReaderFunction, got {function!r}")
        output_type = _reader_output_type(output_type)
        r = self._reader
        spec = plan_keyed_read(
            r.metadata, uid, r.backend, _key_serializer(key_type), r._parallelism()
        )
        kind = spec.states.get(WINDOW_STATE_NAME)
        if kind is None:
            raise ConfigurationError(
                f"{spec.where} is not a window operator (no {WINDOW_STATE_NAME!r} state); its "
                f"keyed states: {', '.join(sorted(spec.states)) or 'none'}"
            )
        if kind != descriptor.kind:
            built = {
                "list": "process()/apply()",
                "reducing": "reduce()",
                "aggregating": "aggregate()",
            }
            raise ConfigurationError(
                f"the windows of {spec.where} were built with {built.get(kind, kind)}: read "
                f"them with the same method of window(...) (their contents are {kind} state)"
            )
        task = partial(_window_task, spec, WindowReadSpec(descriptor), function, output_type)
        return r._frame(len(spec.ranges), task, output_type)

    def reduce(
        self,
        uid: str | OperatorIdentifier,
        reduce_function: Any,
        reader_function: WindowReaderFunction,
        key_type: Any = None,
        reduce_type: Any = None,
        output_type: Any = None,
    ) -> Any:
        """Windows built with ``reduce(reduce_function)``: ``elements`` is the reduced value."""
        desc = ReducingStateDescriptor(WINDOW_STATE_NAME, reduce_function, reduce_type)
        return self._read(uid, desc, reader_function, key_type, output_type)

    def aggregate(
        self,
        uid: str | OperatorIdentifier,
        aggregate_function: Any,
        reader_function: WindowReaderFunction,
        key_type: Any = None,
        accumulator_type: Any = None,
        output_type: Any = None,
    ) -> Any:
        """Windows built with ``aggregate(aggregate_function)``: ``elements`` is
        ``aggregate_function.get_result(accumulator)``."""
        desc = AggregatingStateDescriptor(WINDOW_STATE_NAME, aggregate_function, accumulator_type)
        return self._read(uid, desc, reader_function, key_type, output_type)

    def process(
        self,
        uid: str | OperatorIdentifier,
        reader_function: WindowReaderFunction,
        key_type: Any = None,
        state_type: Any = None,
        output_type: Any = None,
    ) -> Any:
        """Windows built with ``process()``/``apply()``: ``elements`` are the buffered ones."""
        desc = ListStateDescriptor(WINDOW_STATE_NAME, state_type)
        return self._read(uid, desc, reader_function, key_type, output_type)
