"""The types shared by every API module, as ``pyflink.common``."""

from streamstate.common.configuration import Configuration, parse_duration_ms
from streamstate.common.row import Row, RowKind
from streamstate.common.time import Duration, Instant, Time, to_millis
from streamstate.common.typeinfo import TypeInformation, Types

__all__ = [
    "Configuration",
    "Duration",
    "Instant",
    "Row",
    "RowKind",
    "Time",
    "TypeInformation",
    "Types",
    "parse_duration_ms",
    "to_millis",
]
