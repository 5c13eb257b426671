"""Connectors, mirroring ``pyflink.datastream.connectors``."""

from typing import TYPE_CHECKING

from streamstate.common._unsupported import install_unsupported, unsupported_attribute
from streamstate.datastream.connectors.base import DeliveryGuarantee, Sink, Source
from streamstate.datastream.connectors.collect import CollectSink, DiscardingSink
from streamstate.datastream.connectors.file_system import (
    BucketAssigner,
    FileSink,
    FileSource,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)
from streamstate.datastream.connectors.number_seq import NumberSequenceSource
from streamstate.datastream.connectors.spark import SparkTableSink

__all__ = [
    "BucketAssigner",
    "CollectSink",
    "DeliveryGuarantee",
    "DiscardingSink",
    "FileSink",
    "FileSource",
    "NumberSequenceSource",
    "OutputFileConfig",
    "RollingPolicy",
    "Sink",
    "Source",
    "SparkTableSink",
    "StreamFormat",
]

install_unsupported(globals())
if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
