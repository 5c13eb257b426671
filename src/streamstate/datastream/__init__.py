"""The DataStream API, mirroring ``pyflink.datastream``."""

from streamstate.datastream.checkpoint_config import CheckpointConfig, ExternalizedCheckpointCleanup
from streamstate.datastream.checkpoint_storage import (
    CheckpointStorage,
    FileSystemCheckpointStorage,
    JobManagerCheckpointStorage,
)
from streamstate.datastream.checkpointing_mode import CheckpointingMode
from streamstate.datastream.data_stream import DataStream, DataStreamSink, KeyedStream
from streamstate.datastream.execution_mode import RuntimeExecutionMode
from streamstate.datastream.functions import (
    AggregateFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    SinkFunction,
)
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

__all__ = [
    "AggregateFunction",
    "CheckpointConfig",
    "CheckpointStorage",
    "CheckpointingMode",
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
    "KeyedProcessFunction",
    "KeyedStream",
    "MapFunction",
    "MemoryStateBackend",
    "ProcessFunction",
    "ReduceFunction",
    "RuntimeContext",
    "RuntimeExecutionMode",
    "SinkFunction",
    "StateBackend",
    "StreamExecutionEnvironment",
]
