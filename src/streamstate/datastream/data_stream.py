"""DataStream API, mirroring ``pyflink.datastream.data_stream``.

Each call records a :class:`~streamstate.runtime.graph.Transformation`; nothing
runs until ``execute()``. Functions may be function objects (``MapFunction``,
...) or plain callables wherever PyFlink accepts them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from streamstate.common._unsupported import unsupported_attribute
from streamstate.datastream._stream_methods import (
    KeyedStreamRefusals,
    OperatorHints,
    StreamMethods,
)
from streamstate.errors import ConfigurationError
from streamstate.runtime.graph import (
    KeyingSpec,
    Partitioning,
    Transformation,
    TransformationKind,
    stream_type,
)
from streamstate.runtime.operators import keyed, stateless, timestamps

if TYPE_CHECKING:
    from streamstate.datastream.queryable_state_stream import QueryableStateStream
    from streamstate.datastream.stream_execution_environment import StreamExecutionEnvironment

__all__ = [
    "AllWindowedStream",
    "BroadcastConnectedStream",
    "BroadcastStream",
    "ConnectedStreams",
    "DataStream",
    "DataStreamSink",
    "KeyedStream",
    "WindowedStream",
]


def _make(cls: type, fn: Any) -> Any:
    return cls(fn)


class DataStream(StreamMethods):
    """A stream of records produced by one transformation."""

    #: whether records are partitioned by key (a KeyedStream)
    _is_keyed_stream = False

    def __init__(self, env: StreamExecutionEnvironment, transformation: Transformation) -> None:
        self._env = env
        self._t = transformation

    def _derive(self, transformation: Transformation) -> DataStream:
        """A plain stream of the same environment, produced by ``transformation``."""
        return DataStream(self._env, transformation)

    # -- naming and parallelism -------------------------------------------------
    def get_name(self) -> str:
        return self._t.name

    def name(self, name: str) -> DataStream:
        self._t.name = name
        return self

    def uid(self, uid: str) -> DataStream:
        """A stable id of the operator: how checkpointed state finds it after the job changed."""
        self._t.uid = uid
        return self

    def set_uid_hash(self, uid_hash: str) -> DataStream:
        """The id this operator's state is matched by, used as given (Flink's
        ``setUidHash``): for restoring a savepoint of a job that set no uids, pass the
        generated id the old job had (``streamstate describe`` lists them, e.g.
        ``003-keyedprocess``). Wins over :meth:`uid`."""
        if not uid_hash:
            raise ConfigurationError("set_uid_hash() needs a non-empty id")
        self._t.uid_hash = uid_hash
        return self

    def set_parallelism(self, parallelism: int) -> DataStream:
        if parallelism < 1:
            raise ConfigurationError(f"parallelism must be >= 1, got {parallelism}")
        self._t.parallelism = parallelism
        return self

    def get_parallelism(self) -> int:
        return self._t.parallelism or self._env.get_parallelism()

    def set_max_parallelism(self, max_parallelism: int) -> DataStream:
        self._t.max_parallelism = max_parallelism
        return self

    def get_execution_environment(self) -> StreamExecutionEnvironment:
        return self._env

    # -- transformations --------------------------------------------------------
    def _one_input(
        self,
        name: str,
        factory: Callable[[], Any],
        keyed: bool = False,
        output_type: Any = None,
        preserves_type: bool = False,
    ) -> DataStream:
        t = Transformation(
            TransformationKind.ONE_INPUT,
            name,
            [self._t],
            payload=factory,
            keyed=keyed,
            output_type=output_type,
            preserves_type=preserves_type,
        )
        return DataStream(self._env, t)

    def map(self, func: Any, output_type: Any = None) -> DataStream:
        return self._one_input(
            "Map", partial(_make, stateless.MapOperator, func), output_type=output_type
        )

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        return self._one_input(
            "FlatMap", partial(_make, stateless.FlatMapOperator, func), output_type=output_type
        )

    def filter(self, func: Any) -> DataStream:
        op = partial(_make, stateless.FilterOperator, func)
        return self._one_input("Filter", op, preserves_type=True)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        return self._one_input(
            "Process", partial(_make, stateless.ProcessOperator, func), output_type=output_type
        )

    def assign_timestamps_and_watermarks(self, watermark_strategy: Any) -> DataStream:
        """Give every record an event timestamp and generate watermarks (per epoch).

        ``watermark_strategy`` is a :class:`~streamstate.common.WatermarkStrategy`.
        Without a timestamp assigner the records keep the timestamps they carry
        (e.g. from an earlier assigner). Chained to its input, as in Flink.
        """
        from streamstate.common.watermark_strategy import WatermarkStrategy

        if not isinstance(watermark_strategy, WatermarkStrategy):
            raise ConfigurationError(
                f"assign_timestamps_and_watermarks() takes a WatermarkStrategy, got "
                f"{type(watermark_strategy).__name__}"
            )
        return self._one_input(
            "Timestamps/Watermarks",
            partial(_make, timestamps.TimestampsAndWatermarksOperator, watermark_strategy),
            preserves_type=True,
        )

    def get_side_output(self, output_tag: Any) -> DataStream:
        """The records the operator of this stream emitted to ``output_tag``
        (``ctx.output(output_tag, value)`` or a yielded ``(output_tag, value)``)."""
        from streamstate.datastream.output_tag import OutputTag

        if not isinstance(output_tag, OutputTag):
            raise ConfigurationError(
                f"get_side_output() takes an OutputTag, got {type(output_tag).__name__}"
            )
        if self._t.kind not in (TransformationKind.ONE_INPUT, TransformationKind.TWO_INPUT):
            raise ConfigurationError(
                f"get_side_output() applies to the result of an operator such as process(); "
                f"{self._t.name!r} is a {self._t.kind.value} transformation"
            )
        t = Transformation(
            TransformationKind.SIDE_OUTPUT,
            f"SideOutput({output_tag.tag_id})",
            [self._t],
            payload=output_tag.tag_id,
        )
        return DataStream(self._env, t)

    def key_by(self, key_selector: Any, key_type: Any = None) -> KeyedStream:
        """Partition by key: every record goes to the subtask that owns its key group.

        ``key_type`` (a ``Types.*`` type info) fixes the key serializer; without it
        keys are serialized by a deterministic default serializer (str, int,
        float, bool, bytes, None, tuples of these; pickle otherwise).
        """
        from streamstate.runtime.serializers.key import default_key_serializer
        from streamstate.runtime.serializers.registry import serializer_for

        ser = serializer_for(key_type) if key_type is not None else default_key_serializer()
        t = Transformation(
            TransformationKind.PARTITION,
            "KeyBy",
            [self._t],
            payload=KeyingSpec(key_selector, ser),
            partitioning=Partitioning.HASH,
        )
        ks = KeyedStream(self._env, t, self)
        ks._key_type = key_type
        return ks

    def rebalance(self) -> DataStream:
        t = Transformation(
            TransformationKind.PARTITION,
            "Rebalance",
            [self._t],
            partitioning=Partitioning.REBALANCE,
        )
        return DataStream(self._env, t)

    def shuffle(self) -> DataStream:
        return self.rebalance()

    def forward(self) -> DataStream:
        t = Transformation(
            TransformationKind.PARTITION, "Forward", [self._t], partitioning=Partitioning.FORWARD
        )
        return DataStream(self._env, t)

    def broadcast(
        self, broadcast_state_descriptor: Any = None, *other_state_descriptors: Any
    ) -> Any:
        """Send every record to every subtask of the next operator.

        Without descriptors: a DataStream with broadcast partitioning. With
        ``MapStateDescriptor``s: a :class:`BroadcastStream` to ``connect()`` to,
        whose operator keeps broadcast state under those descriptors.
        """
        if broadcast_state_descriptor is None:
            if other_state_descriptors:
                raise ConfigurationError("broadcast(): the first state descriptor is None")
            t = Transformation(
                TransformationKind.PARTITION,
                "Broadcast",
                [self._t],
                partitioning=Partitioning.BROADCAST,
            )
            return DataStream(self._env, t)
        return BroadcastStream(self, (broadcast_state_descriptor, *other_state_descriptors))

    def connect(self, ds: Any) -> Any:
        """Connect with another stream (-> ConnectedStreams) or a BroadcastStream
        (-> BroadcastConnectedStream) into one two-input operator."""
        if isinstance(ds, BroadcastStream):
            return BroadcastConnectedStream(self, ds)
        if not isinstance(ds, DataStream):
            raise ConfigurationError(
                f"connect() takes a DataStream or a BroadcastStream, got {type(ds).__name__}"
            )
        return ConnectedStreams(self, ds)

    def window_all(self, window_assigner: Any) -> AllWindowedStream:
        """Windows over the whole (non-keyed) stream, evaluated by one subtask."""
        return AllWindowedStream(self, window_assigner)

    def union(self, *streams: DataStream) -> DataStream:
        for s in streams:
            if s._env is not self._env:
                raise ConfigurationError("union() needs streams of the same environment")
        t = Transformation(TransformationKind.UNION, "Union", [self._t, *[s._t for s in streams]])
        return DataStream(self._env, t)

    # -- sinks ------------------------------------------------------------------
    def _sink(self, name: str, factory: Callable[[], Any], committer: Any = None) -> DataStreamSink:
        t = Transformation(
            TransformationKind.SINK, name, [self._t], payload=factory, committer_factory=committer
        )
        self._env._add_sink(t)
        return DataStreamSink(t)

    def print(self, sink_identifier: str | None = None) -> DataStreamSink:
        """Print every record to the driver's stdout (``identifier:subtask> value``), as
        PyFlink's local run does, epoch by epoch (a replayed epoch prints again)."""
        from streamstate.connectors.sinks import PrintCommitter, PrintSinkOperator

        factory = partial(PrintSinkOperator, sink_identifier, type_info=stream_type(self._t))
        return self._sink("Print", factory, PrintCommitter)

    def add_sink(self, sink_func: Any) -> DataStreamSink:
        """A ``SinkFunction`` (or a streamstate sink object with ``_sink_parts()``)."""
        parts = getattr(sink_func, "_sink_parts", None)
        if parts is not None:
            name, factory, committer = parts()
            return self._sink(name, factory, committer)
        from streamstate.connectors.sinks import SinkFunctionOperator

        return self._sink("Sink", partial(_make, SinkFunctionOperator, sink_func))

    def sink_to(self, sink: Any) -> DataStreamSink:
        from streamstate.datastream.connectors.base import SupportsPreprocessing

        if isinstance(sink, SupportsPreprocessing):
            transformer = sink.get_transformer()
            if transformer is not None:
                return DataStream.sink_to(transformer.apply(self), _Prepared(sink))
        parts = getattr(sink, "_sink_parts", None)
        if parts is None:
            raise ConfigurationError(
                f"sink_to() takes a sink such as FileSink or CollectSink, got {type(sink).__name__}; "
                f"use add_sink() for a SinkFunction"
            )
        bind = getattr(sink, "_bind_input_type", None)
        if bind is not None and stream_type(self._t) is not None:
            bind(stream_type(self._t))  # the declared type, also through filter, reduce, ...
        name, factory, committer = parts()
        return self._sink(name, factory, committer)

    def execute_and_collect(
        self, job_execution_name: str | None = None, limit: int | None = None
    ) -> CloseableIterator | list[Any]:
        """Run the job (bounded) and return this stream's records: a
        :class:`CloseableIterator` (``with ds.execute_and_collect() as results:``), or the
        first ``limit`` records as a list, as PyFlink.

        The collecting sink has parallelism 1, as Flink's, so a stream read in order (a
        collection, a file) is collected in that order. With checkpointing in
        exactly-once mode the records are those of committed epochs only, so failures and
        replays do not duplicate them.
        """
        from streamstate.datastream.connectors.collect import CollectSink

        sink = CollectSink()
        self.sink_to(sink).set_parallelism(1)
        self._env.execute(job_execution_name or "collect")
        results = sink.get_results()
        return CloseableIterator(results) if limit is None else results[:limit]

    def to_dataframe(
        self,
        job_execution_name: str | None = None,
        type_info: Any = None,
        spark: Any = None,
        staging_path: str | None = None,
    ) -> Any:
        """Run the (bounded) job; its records as a Spark DataFrame whose schema is that of
        ``type_info``, else of the stream's declared type, else inferred by Spark. Records
        of committed epochs only, staged by the subtasks under ``staging_path`` (default a
        temp dir removed at process exit; on a cluster, one every worker reads) and read
        lazily by Spark tasks (docs/connectors.md, *Spark in and out*)."""
        from streamstate.spark.dataframes import stream_to_dataframe

        name = job_execution_name or "to_dataframe"
        return stream_to_dataframe(self, name, type_info, spark, staging_path)


class CloseableIterator:
    """PyFlink's result iterator of ``execute_and_collect``: iterable, ``next()``, and a
    context manager whose ``close()`` drops what was not read."""

    def __init__(self, records: list[Any]) -> None:
        self._it: Iterator[Any] = iter(records)

    def __iter__(self) -> CloseableIterator:
        return self

    def __next__(self) -> Any:
        return next(self._it)

    def next(self) -> Any:
        return next(self._it)

    def close(self) -> None:
        self._it = iter(())

    def __enter__(self) -> CloseableIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KeyedStream(KeyedStreamRefusals, DataStream):
    """A stream partitioned by key; its operators may use keyed state."""

    _is_keyed_stream = True
    #: the ``key_type`` given to ``key_by`` (None: the default key serializer)
    _key_type: Any = None

    def __init__(
        self, env: StreamExecutionEnvironment, transformation: Transformation, origin: DataStream
    ) -> None:
        super().__init__(env, transformation)
        self._origin = origin

    def _sink(self, name: str, factory: Callable[[], Any], committer: Any = None) -> DataStreamSink:
        # a sink after key_by gets the records, still partitioned by key (as in Flink)
        values = DataStream._one_input(
            self, "KeyedValues", stateless.KeyedValuesOperator, preserves_type=True
        )
        return values._sink(name, factory, committer)

    def project(self, *field_indexes: int) -> DataStream:
        values = DataStream._one_input(
            self, "KeyedValues", stateless.KeyedValuesOperator, preserves_type=True
        )
        values._t.output_type = self._origin._t.output_type
        return values.project(*field_indexes)

    def _keyed(
        self,
        name: str,
        factory: Callable[[], Any],
        output_type: Any = None,
        preserves_type: bool = False,
    ) -> DataStream:
        return self._one_input(
            name, factory, keyed=True, output_type=output_type, preserves_type=preserves_type
        )

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        return self._keyed(
            "KeyedProcess", partial(_make, keyed.KeyedProcessOperator, func), output_type
        )

    def map(self, func: Any, output_type: Any = None) -> DataStream:
        return self._keyed("Map", partial(_make, keyed.KeyedMapOperator, func), output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        return self._keyed("FlatMap", partial(_make, keyed.KeyedFlatMapOperator, func), output_type)

    def filter(self, func: Any) -> DataStream:
        return self._keyed(
            "Filter", partial(_make, keyed.KeyedFilterOperator, func), preserves_type=True
        )

    def as_queryable_state(
        self, queryable_state_name: str, state_descriptor: Any = None
    ) -> QueryableStateStream:
        """Keep every key's latest record (ValueStateDescriptor, the default) or their
        reduction (ReducingStateDescriptor) in keyed state queryable as
        ``queryable_state_name`` (``QueryableStateClient.get_kv_state``). A sink."""
        from streamstate.datastream.queryable_state_stream import as_queryable_state

        return as_queryable_state(self, queryable_state_name, state_descriptor)

    def get_key_type(self) -> Any:
        """The key type given to ``key_by`` (None when keys use the default serializer)."""
        return self._key_type

    def window(self, window_assigner: Any) -> WindowedStream:
        """Windows per key: elements are grouped by key and by the assigner's windows."""
        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int = 0) -> WindowedStream:
        """Tumbling (``slide == 0``) or sliding count windows of ``size`` elements per key."""
        from streamstate.datastream.window import (
            CountSlidingWindowAssigner,
            CountTumblingWindowAssigner,
        )

        if slide == 0:
            return WindowedStream(self, CountTumblingWindowAssigner(size))
        return WindowedStream(self, CountSlidingWindowAssigner(size, slide))

    def reduce(self, func: Any) -> DataStream:
        """Running reduction per key; emits the new reduced value for every record."""
        return self._keyed(
            "Keyed Reduce",
            partial(_make, keyed.StreamGroupedReduceOperator, func),
            preserves_type=True,
        )

    def _agg(self, kind: str, position_to_agg: int | str) -> DataStream:
        return self._keyed(
            f"Keyed Aggregation ({kind})",
            partial(
                _make,
                keyed.StreamGroupedReduceOperator,
                keyed.field_aggregator(kind, position_to_agg),
            ),
            preserves_type=True,
        )

    def sum(self, position_to_sum: int | str = 0) -> DataStream:
        return self._agg("sum", position_to_sum)

    def min(self, position_to_min: int | str = 0) -> DataStream:
        return self._agg("min", position_to_min)

    def max(self, position_to_max: int | str = 0) -> DataStream:
        return self._agg("max", position_to_max)

    def min_by(self, position_to_min_by: int | str = 0) -> DataStream:
        return self._agg("min_by", position_to_min_by)

    def max_by(self, position_to_max_by: int | str = 0) -> DataStream:
        return self._agg("max_by", position_to_max_by)

    def name(self, name: str) -> DataStream:
        raise ConfigurationError(
            "name() applies to operators; call it on the result of process()/map()"
        )

    def uid(self, uid: str) -> DataStream:
        raise ConfigurationError(
            "uid() applies to operators; call it on the result of process()/map()"
        )

    def set_parallelism(self, parallelism: int) -> DataStream:
        raise ConfigurationError(
            "set_parallelism() cannot be set on a KeyedStream; set it on the keyed operator"
        )

    def _no_repartition(self, method: str) -> Any:
        # Flink's KeyedStream.setConnectionType: the key partitioning cannot be replaced
        raise ConfigurationError(
            f"Cannot override partitioning for KeyedStream: {method}() after key_by(); "
            "call it before key_by(), or on the result of a keyed operator"
        )

    def shuffle(self) -> DataStream:
        return self._no_repartition("shuffle")

    def rebalance(self) -> DataStream:
        return self._no_repartition("rebalance")

    def forward(self) -> DataStream:
        return self._no_repartition("forward")

    def broadcast(
        self, broadcast_state_descriptor: Any = None, *other_state_descriptors: Any
    ) -> Any:
        return self._no_repartition("broadcast")


class DataStreamSink(OperatorHints):
    """The sink at the end of a stream (``print``, ``add_sink``, ``sink_to``)."""

    def __init__(self, transformation: Transformation) -> None:
        self._t = transformation

    def name(self, name: str) -> DataStreamSink:
        self._t.name = name
        return self

    def uid(self, uid: str) -> DataStreamSink:
        self._t.uid = uid
        return self

    def set_uid_hash(self, uid_hash: str) -> DataStreamSink:
        """As :meth:`DataStream.set_uid_hash`."""
        if not uid_hash:
            raise ConfigurationError("set_uid_hash() needs a non-empty id")
        self._t.uid_hash = uid_hash
        return self

    def set_parallelism(self, parallelism: int) -> DataStreamSink:
        self._t.parallelism = parallelism
        return self


from streamstate.datastream._connected import (  # noqa: E402 - they import DataStream lazily
    BroadcastConnectedStream,
    BroadcastStream,
    ConnectedStreams,
)
from streamstate.datastream._windowed_stream import (  # noqa: E402
    AllWindowedStream,
    WindowedStream,
)


class _Prepared:
    """A sink whose preprocessing was applied already (``sink_to`` calls it once)."""

    def __init__(self, sink: Any) -> None:
        self._sink_parts = sink._sink_parts


if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
