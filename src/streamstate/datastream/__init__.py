"""The DataStream API, mirroring ``pyflink.datastream``."""

from streamstate.datastream.checkpoint_config import CheckpointConfig, ExternalizedCheckpointCleanup
from streamstate.datastream.checkpoint_storage import (
    CheckpointStorage,
    FileSystemCheckpointStorage,
    JobManagerCheckpointStorage,
)
from streamstate.datastream.checkpointing_mode import CheckpointingMode
from streamstate.datastream.data_stream import (
    BroadcastConnectedStream,
    BroadcastStream,
    ConnectedStreams,
    DataStream,
    DataStreamSink,
    KeyedStream,
)
from streamstate.datastream.execution_mode import RuntimeExecutionMode
from streamstate.datastream.functions import (
    AggregateFunction,
    BroadcastProcessFunction,
    CheckpointedFunction,
    CheckpointListener,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    ListCheckpointed,
    MapFunction,
    ParallelSourceFunction,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    SinkFunction,
    SourceFunction,
)
from streamstate.datastream.output_tag import OutputTag
from streamstate.datastream.state import StateTtlConfig
from streamstate.datastream.state_backend import (
    FsStateBackend,
    HashMapStateBackend,
    MemoryStateBackend,
    StateBackend,
)
from streamstate.datastream.stream_execution_environment import (
    ExecutionConfig,
    StreamExecutionEnvironment,
)
from streamstate.datastream.time_domain import TimeDomain
from streamstate.datastream.timerservice import TimerService

__all__ = [
    "AggregateFunction",
    "BroadcastConnectedStream",
    "BroadcastProcessFunction",
    "BroadcastStream",
    "CheckpointConfig",
    "CheckpointListener",
    "CheckpointStorage",
    "CheckpointedFunction",
    "CheckpointingMode",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "ConnectedStreams",
    "DataStream",
    "DataStreamSink",
    "ExecutionConfig",
    "ExternalizedCheckpointCleanup",
    "FileSystemCheckpointStorage",
    "FilterFunction",
    "FlatMapFunction",
    "FsStateBackend",
    "HashMapStateBackend",
    "JobManagerCheckpointStorage",
    "KeySelector",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "KeyedStream",
    "ListCheckpointed",
    "MapFunction",
    "MemoryStateBackend",
    "ParallelSourceFunction",
    "OutputTag",
    "ProcessFunction",
    "ReduceFunction",
    "RuntimeContext",
    "RuntimeExecutionMode",
    "SinkFunction",
    "SourceFunction",
    "StateBackend",
    "StateTtlConfig",
    "StreamExecutionEnvironment",
    "TimeDomain",
    "TimerService",
]
