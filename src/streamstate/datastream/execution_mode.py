"""``RuntimeExecutionMode``, as ``pyflink.datastream.execution_mode``."""

from __future__ import annotations

from enum import Enum

__all__ = ["RuntimeExecutionMode"]


class RuntimeExecutionMode(Enum):
    """STREAMING and AUTOMATIC run in epochs; BATCH runs a bounded job as one epoch
    per source split budget with no intermediate checkpoints."""

    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2
