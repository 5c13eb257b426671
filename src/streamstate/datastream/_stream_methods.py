"""PyFlink's ``DataStream`` methods about placement, chaining and partitioning.

Mixed into :class:`~streamstate.datastream.data_stream.DataStream`,
``KeyedStream`` and ``DataStreamSink``. What Flink uses to place and chain tasks (slot
sharing groups, chaining, buffer timeouts) is accepted and kept on the transformation's
``hints`` but places nothing: Spark schedules the subtasks, and an epoch's records stay
in the process along a stage's chain either way (docs/pyflink-compat.md lists each).
``force_non_parallel``, ``partition_custom``, ``project``, ``rescale`` and ``get_type``
act as in Flink.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any, Self

from streamstate.errors import ConfigurationError, UnsupportedFeatureError
from streamstate.runtime.graph import (
    CustomPartitionSpec,
    Partitioning,
    Transformation,
    TransformationKind,
)

if TYPE_CHECKING:
    from streamstate.common.execution_config import ExecutionConfig
    from streamstate.datastream.data_stream import DataStream
    from streamstate.datastream.stream_execution_environment import StreamExecutionEnvironment

__all__ = ["KeyedStreamRefusals", "OperatorHints", "StreamMethods"]


class OperatorHints:
    """Hints of one operator (a stream's producer or a sink)."""

    _t: Transformation

    def slot_sharing_group(self, slot_sharing_group: Any) -> Self:
        """Accepted and kept (``hints["slot_sharing_group"]``): a name or a
        ``SlotSharingGroup``. Spark schedules the subtasks; there are no slots."""
        name = getattr(slot_sharing_group, "get_name", None)
        group = name() if callable(name) else slot_sharing_group
        if not isinstance(group, str) or not group:
            raise ConfigurationError(
                f"slot_sharing_group() takes a name or a SlotSharingGroup, got {slot_sharing_group!r}"
            )
        self._t.hints["slot_sharing_group"] = group
        return self

    def set_description(self, description: str) -> Self:
        """A description of the operator (kept with it, as Flink shows it in its UI)."""
        self._t.hints["description"] = str(description)
        return self

    def disable_chaining(self) -> Self:
        """Accepted and kept: the operator's outputs are the same chained or not."""
        self._t.hints["chaining"] = "disabled"
        return self


class StreamMethods(OperatorHints):
    """The DataStream side (needs ``_env``, ``_t``, ``_one_input`` and ``rebalance``)."""

    _env: StreamExecutionEnvironment

    if TYPE_CHECKING:

        def _one_input(
            self, name: str, factory: Any, keyed: bool = ..., output_type: Any = ...
        ) -> DataStream: ...
        def _derive(self, transformation: Transformation) -> DataStream: ...
        def rebalance(self) -> DataStream: ...

    def start_new_chain(self) -> Self:
        """Accepted and kept: the operator's outputs are the same chained or not."""
        self._t.hints["chaining"] = "head"
        return self

    def set_buffer_timeout(self, timeout_millis: int) -> Self:
        """Accepted and kept: records move between stages once per epoch, not in network
        buffers (``execution.epoch.interval`` paces epochs)."""
        self._t.hints["buffer_timeout"] = int(timeout_millis)
        return self

    def force_non_parallel(self) -> Self:
        """Parallelism and max parallelism 1: one subtask sees every record."""
        self._t.parallelism = 1
        self._t.max_parallelism = 1
        return self

    def get_execution_config(self) -> ExecutionConfig:
        return self._env.get_config()

    def get_type(self) -> Any:
        """The declared type of the records (``output_type`` / ``type_info``), else
        ``Types.PICKLED_BYTE_ARRAY()`` as in PyFlink."""
        from streamstate.common.typeinfo import Types

        return (
            self._t.output_type if self._t.output_type is not None else Types.PICKLED_BYTE_ARRAY()
        )

    def partition_custom(self, partitioner: Any, key_selector: Any) -> DataStream:
        """Send each record to subtask ``partitioner.partition(key, num_partitions)`` of
        the next operator (a ``Partitioner`` or a function of ``(key, n)``); the key is
        ``key_selector``'s (a ``KeySelector`` or a function)."""
        t = Transformation(
            TransformationKind.PARTITION,
            "PartitionCustom",
            [self._t],
            payload=CustomPartitionSpec(partitioner, key_selector),
            partitioning=Partitioning.CUSTOM,
            output_type=self._t.output_type,
        )
        return self._derive(t)

    def rescale(self) -> DataStream:
        """Round robin to the next operator's subtasks (Flink rescales to a local subset;
        here every subtask is as local as any other)."""
        return self.rebalance()

    def project(self, *field_indexes: int) -> DataStream:
        """Tuples of the given fields, in that order (tuple or Row records)."""
        from streamstate.common.typeinfo import TupleTypeInfo, Types
        from streamstate.runtime.operators.stateless import MapOperator

        declared = self._t.output_type
        if declared is not None and not hasattr(declared, "field_types"):
            raise ConfigurationError(
                f"Only Tuple DataStreams can be projected; this stream's type is {declared!r}"
            )
        if not field_indexes or any(not isinstance(i, int) or i < 0 for i in field_indexes):
            raise ConfigurationError(f"project() needs field indexes >= 0, got {field_indexes!r}")
        out_type = None
        if declared is not None:
            types = list(declared.field_types)
            bad = [i for i in field_indexes if i >= len(types)]
            if bad:
                raise ConfigurationError(f"project(): no field {bad[0]} in {declared!r}")
            out_type = Types.TUPLE([types[i] for i in field_indexes])
            assert isinstance(out_type, TupleTypeInfo)
        projector = _Projector(tuple(field_indexes))
        return self._one_input("Projection", lambda: MapOperator(projector), output_type=out_type)

    def cache(self) -> DataStream:
        """The stream itself. Flink keeps a cached result for later jobs of the same
        environment (BATCH); here a later job computes it again."""
        return self._derive(self._t)

    def iterate(self, max_wait_time_ms: int = 0) -> Any:
        """Removed in Flink 2.0 (PyFlink 1.x had no Python version either)."""
        raise UnsupportedFeatureError(
            "DataStream.iterate",
            "iterations were removed from Flink's DataStream API in 2.0",
            "keep the loop's state in a KeyedProcessFunction and feed records back with "
            "timers, or run the job again on its own output",
        )


class _Projector:
    """Picklable ``project`` function."""

    def __init__(self, indexes: tuple[int, ...]) -> None:
        self.indexes = indexes

    def __call__(self, value: Any) -> tuple[Any, ...]:
        return tuple(value[i] for i in self.indexes)


def _refuse(what: str) -> Any:
    raise ConfigurationError(f"{what} for KeyedStream is not supported (as in PyFlink)")


class KeyedStreamRefusals:
    """What PyFlink's KeyedStream refuses (it is not an operator)."""

    class AccumulateType(Enum):
        MIN = 1
        MAX = 2
        MIN_BY = 3
        MAX_BY = 4
        SUM = 5

    def slot_sharing_group(self, slot_sharing_group: Any) -> Any:
        return _refuse("Setting slot sharing group")

    def force_non_parallel(self) -> Any:
        return _refuse("Set force non-parallel")

    def set_max_parallelism(self, max_parallelism: int) -> Any:
        return _refuse("Set max parallelism")

    def set_uid_hash(self, uid_hash: str) -> Any:
        return _refuse("Set uid hash")

    def get_name(self) -> Any:
        return _refuse("Get name")

    def set_buffer_timeout(self, timeout_millis: int) -> Any:
        return _refuse("Set buffer timeout")

    def start_new_chain(self) -> Any:
        return _refuse("Start new chain")

    def disable_chaining(self) -> Any:
        return _refuse("Disable chaining")

    def cache(self) -> Any:
        return _refuse("Cache")

    def partition_custom(self, partitioner: Any, key_selector: Any) -> Any:
        raise ConfigurationError("Cannot override partitioning for KeyedStream: partition_custom()")

    def rescale(self) -> Any:
        raise ConfigurationError("Cannot override partitioning for KeyedStream: rescale()")
