"""The types shared by every API module, as ``pyflink.common``."""

from typing import TYPE_CHECKING

from streamstate.common._unsupported import install_unsupported, unsupported_attribute
from streamstate.common.config_options import ConfigOption, ConfigOptions
from streamstate.common.configuration import Configuration, parse_duration_ms
from streamstate.common.execution_config import ExecutionConfig
from streamstate.common.input_dependency_constraint import InputDependencyConstraint
from streamstate.common.job_client import JobClient
from streamstate.common.job_execution_result import JobExecutionResult
from streamstate.common.job_id import JobID
from streamstate.common.job_status import JobStatus
from streamstate.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from streamstate.common.row import Row, RowKind
from streamstate.common.savepoint import CompletableFuture, SavepointFormatType
from streamstate.common.serialization import (
    ByteArraySchema,
    DeserializationSchema,
    Encoder,
    SerializationSchema,
    SimpleStringSchema,
)
from streamstate.common.serializer import TypeSerializer
from streamstate.common.time import Duration, Instant, Time, to_millis
from streamstate.common.typeinfo import TypeInformation, Types
from streamstate.common.watermark_strategy import TimestampAssigner, WatermarkStrategy

__all__ = [
    "ByteArraySchema",
    "CompletableFuture",
    "ConfigOption",
    "ConfigOptions",
    "Configuration",
    "DeserializationSchema",
    "Duration",
    "Encoder",
    "ExecutionConfig",
    "InputDependencyConstraint",
    "Instant",
    "JobClient",
    "JobExecutionResult",
    "JobID",
    "JobStatus",
    "RestartStrategies",
    "RestartStrategyConfiguration",
    "Row",
    "RowKind",
    "SavepointFormatType",
    "SerializationSchema",
    "SimpleStringSchema",
    "Time",
    "TimestampAssigner",
    "TypeInformation",
    "TypeSerializer",
    "Types",
    "WatermarkStrategy",
    "parse_duration_ms",
    "to_millis",
]

install_unsupported(globals())
if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
