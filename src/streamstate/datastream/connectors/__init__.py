"""Connectors, mirroring ``pyflink.datastream.connectors``."""

from streamstate.datastream.connectors.collect import CollectSink, DiscardingSink
from streamstate.datastream.connectors.file_system import (
    FileSink,
    FileSource,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)
from streamstate.datastream.connectors.number_seq import NumberSequenceSource

__all__ = [
    "CollectSink",
    "DiscardingSink",
    "FileSink",
    "FileSource",
    "NumberSequenceSource",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
]
