"""User function interfaces, mirroring ``pyflink.datastream.functions``.

Every function is instantiated once per subtask on a Spark worker (it is
pickled with cloudpickle), ``open(runtime_context)`` is called before the
first record and after every restore, and ``close()`` when the subtask's
instance is discarded. Plain callables are accepted wherever PyFlink takes
them (``map``, ``flat_map``, ``filter``, ``key_by``, ``reduce``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from streamstate.api.time_domain import TimeDomain
from streamstate.api.timerservice import TimerService

if TYPE_CHECKING:
    from streamstate.api.metrics import MetricGroup
    from streamstate.api.output_tag import OutputTag
    from streamstate.api.state import (
        AggregatingState,
        AggregatingStateDescriptor,
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        ReducingState,
        ReducingStateDescriptor,
        ValueState,
        ValueStateDescriptor,
    )

__all__ = [
    "AggregateFunction",
    "FilterFunction",
    "FlatMapFunction",
    "Function",
    "KeySelector",
    "KeyedProcessFunction",
    "MapFunction",
    "Partitioner",
    "ProcessFunction",
    "ReduceFunction",
    "RuntimeContext",
    "SinkFunction",
    "TimeDomain",
    "TimerService",
]


class RuntimeContext(ABC):
    """What a function sees of the subtask running it (PyFlink's ``RuntimeContext``)."""

    @abstractmethod
    def get_task_name(self) -> str: ...

    @abstractmethod
    def get_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_max_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_index_of_this_subtask(self) -> int: ...

    @abstractmethod
    def get_attempt_number(self) -> int: ...

    @abstractmethod
    def get_task_name_with_subtasks(self) -> str: ...

    @abstractmethod
    def get_job_parameter(self, key: str, default_value: str | None) -> str | None: ...

    @abstractmethod
    def get_metrics_group(self) -> MetricGroup:
        """The operator's metric group (``streamstate.metrics``): counters, meters,
        distributions and gauges, summed by the driver over subtasks and epochs."""

    @abstractmethod
    def get_state(self, state_descriptor: ValueStateDescriptor) -> ValueState: ...

    @abstractmethod
    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState: ...

    @abstractmethod
    def get_map_state(self, state_descriptor: MapStateDescriptor) -> MapState: ...

    @abstractmethod
    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> ReducingState: ...

    @abstractmethod
    def get_aggregating_state(
        self, state_descriptor: AggregatingStateDescriptor
    ) -> AggregatingState: ...


class Function(ABC):  # noqa: B024 - all hooks are optional, as in PyFlink
    """Base of all user functions: optional ``open`` / ``close`` hooks."""

    def open(self, runtime_context: RuntimeContext) -> None:  # noqa: B027
        pass

    def close(self) -> None:  # noqa: B027
        pass


class MapFunction(Function):
    @abstractmethod
    def map(self, value: Any) -> Any: ...


class FlatMapFunction(Function):
    @abstractmethod
    def flat_map(self, value: Any) -> Iterable[Any] | None: ...


class FilterFunction(Function):
    @abstractmethod
    def filter(self, value: Any) -> bool: ...


class ReduceFunction(Function):
    @abstractmethod
    def reduce(self, value1: Any, value2: Any) -> Any: ...


class AggregateFunction(Function):
    """``create_accumulator`` / ``add`` / ``get_result`` / ``merge``, as in PyFlink."""

    @abstractmethod
    def create_accumulator(self) -> Any: ...

    @abstractmethod
    def add(self, value: Any, accumulator: Any) -> Any: ...

    @abstractmethod
    def get_result(self, accumulator: Any) -> Any: ...

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement merge()")


class KeySelector(Function):
    @abstractmethod
    def get_key(self, value: Any) -> Any: ...


class Partitioner(Function):
    """``ds.partition_custom(partitioner, key_selector)``: the subtask (0 to
    ``num_partitions - 1``) each record's key goes to."""

    @abstractmethod
    def partition(self, key: Any, num_partitions: int) -> int: ...


class SinkFunction(Function):
    """A sink that writes each record; ``invoke`` is called once per record.

    Records reach it at-least-once on replay; for exactly-once output use a
    transactional sink (the file sink, the collect sink).
    """

    @abstractmethod
    def invoke(self, value: Any, context: Any) -> None: ...


class ProcessFunction(Function):
    """Per-record processing of a non-keyed stream (no keyed state here)."""

    class Context(ABC):
        @abstractmethod
        def timestamp(self) -> int | None:
            """Timestamp of the current element (None when the stream has no timestamps)."""

        def timer_service(self) -> TimerService:
            """Querying time works everywhere; timers only on keyed streams (as in Flink)."""
            raise NotImplementedError

        def output(self, output_tag: OutputTag, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag``."""
            raise NotImplementedError

    @abstractmethod
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterable[Any] | None:
        """Yield (or return an iterable of) the outputs for ``value``."""


class KeyedProcessFunction(Function):
    """Per-record processing of a keyed stream, with keyed state scoped to the current key."""

    class Context(ABC):
        @abstractmethod
        def timestamp(self) -> int | None:
            """Timestamp of the current element or firing timer (None without timestamps)."""

        @abstractmethod
        def get_current_key(self) -> Any: ...

        @abstractmethod
        def timer_service(self) -> TimerService: ...

        def output(self, output_tag: OutputTag, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag``."""
            raise NotImplementedError

    class OnTimerContext(Context):
        @abstractmethod
        def time_domain(self) -> TimeDomain:
            """The TimeDomain of the firing timer."""

    @abstractmethod
    def process_element(
        self, value: Any, ctx: KeyedProcessFunction.Context
    ) -> Iterable[Any] | None:
        """Yield (or return an iterable of) the outputs for ``value``."""

    def on_timer(
        self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext
    ) -> Iterable[Any] | None:
        """Called when a timer registered through ``ctx.timer_service()`` fires; yields outputs."""
        return None
