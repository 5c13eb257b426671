"""``RuntimeExecutionMode``, as ``pyflink.datastream.execution_mode``."""

from __future__ import annotations

from enum import Enum

__all__ = ["RuntimeExecutionMode"]


class RuntimeExecutionMode(Enum):
    """STREAMING runs in epochs. BATCH runs a job over bounded sources as
    one epoch that ends with the final watermark (every timer fires at the end of input),
    without checkpoints or state versions; ``reduce``/``sum``/``min``/``max`` on a keyed
    stream emit one final value per key (Flink's batch semantics). An unbounded source
    in BATCH mode is a ConfigurationError. AUTOMATIC is BATCH when every source is
    bounded, STREAMING otherwise (as in Flink)."""

    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2
