"""PyFlink's ``pyflink.datastream.functions``: re-exports of :mod:`streamstate.api`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamstate.api.async_functions import (
    AsyncFunction,
    AsyncFunctionDescriptor,
    AsyncRetryPredicate,
    AsyncRetryStrategy,
)
from streamstate.api.checkpointing import (
    CheckpointedFunction,
    CheckpointListener,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    ListCheckpointed,
    ParallelSourceFunction,
    SourceFunction,
)
from streamstate.api.co_functions import (
    BaseBroadcastProcessFunction,
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
)
from streamstate.api.functions import (
    AggregateFunction,
    FilterFunction,
    FlatMapFunction,
    Function,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    Partitioner,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    SinkFunction,
    TimeDomain,
    TimerService,
)
from streamstate.api.window_functions import (
    AllWindowFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)
from streamstate.common._unsupported import unsupported_attribute
from streamstate.connectors.two_phase_commit import TwoPhaseCommitSinkFunction

__all__ = [
    "AggregateFunction",
    "AllWindowFunction",
    "AsyncFunction",
    "AsyncFunctionDescriptor",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "BaseBroadcastProcessFunction",
    "BroadcastProcessFunction",
    "CheckpointListener",
    "CheckpointedFunction",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "FilterFunction",
    "FlatMapFunction",
    "Function",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
    "KeySelector",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "ListCheckpointed",
    "MapFunction",
    "Partitioner",
    "ParallelSourceFunction",
    "ProcessAllWindowFunction",
    "ProcessFunction",
    "ProcessWindowFunction",
    "ReduceFunction",
    "RuntimeContext",
    "SinkFunction",
    "SourceFunction",
    "TimeDomain",
    "TimerService",
    "TwoPhaseCommitSinkFunction",
    "WindowFunction",
]

if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
