"""``TimeDomain``, mirroring ``pyflink.datastream.time_domain``."""

from __future__ import annotations

from enum import Enum

__all__ = ["TimeDomain"]


class TimeDomain(Enum):
    """Whether a firing timer was an event-time or a processing-time timer."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1
