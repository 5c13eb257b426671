"""Watermark strategies and timestamp assigners, mirroring ``pyflink.common.watermark_strategy``.

A :class:`WatermarkStrategy` tells ``assign_timestamps_and_watermarks`` (or
``from_source``) how to take each record's event timestamp and how far event
time has progressed. In streamstate watermarks are generated at the end of
every epoch (the "periodic" interval is the epoch) from the largest timestamp
seen so far by the subtask.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, replace
from typing import Any

from streamstate.common.time import to_millis
from streamstate.errors import ConfigurationError

__all__ = ["TimestampAssigner", "WatermarkStrategy"]


class TimestampAssigner(abc.ABC):
    """Assigns event-time timestamps (int milliseconds since the epoch) to elements."""

    @abc.abstractmethod
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        """The timestamp of ``value``; ``record_timestamp`` is its current one (or Long.MIN)."""


@dataclass(frozen=True)
class _Spec:
    #: None: no watermarks (``no_watermarks()``)
    out_of_orderness_ms: int | None
    idle_timeout_ms: int | None = None
    timestamp_assigner: Any = None


class WatermarkStrategy:
    """How to generate watermarks and which timestamp each record carries.

    Build one with :meth:`for_monotonous_timestamps`, :meth:`for_bounded_out_of_orderness`
    or :meth:`no_watermarks`; then optionally :meth:`with_timestamp_assigner` and
    :meth:`with_idleness`. Durations are :class:`~streamstate.common.Duration`,
    :class:`datetime.timedelta`, :class:`~streamstate.common.Time` or int milliseconds.
    Picklable (it travels to the workers).
    """

    def __init__(self, spec: _Spec) -> None:
        self._spec = spec

    # The assigner is set in place, as PyFlink's with_timestamp_assigner does (it returns self).
    def with_timestamp_assigner(self, timestamp_assigner: TimestampAssigner) -> WatermarkStrategy:
        """Use ``timestamp_assigner`` (a :class:`TimestampAssigner` or a callable
        ``(value, record_timestamp) -> int``) to give each record its timestamp."""
        fn = getattr(timestamp_assigner, "extract_timestamp", None)
        if not callable(fn) and not callable(timestamp_assigner):
            raise ConfigurationError(
                f"with_timestamp_assigner() takes a TimestampAssigner (or a callable "
                f"(value, record_timestamp) -> int), got {type(timestamp_assigner).__name__}"
            )
        self._spec = replace(self._spec, timestamp_assigner=timestamp_assigner)
        return self

    def with_idleness(self, idle_timeout: Any) -> WatermarkStrategy:
        """A strategy that marks a subtask idle after ``idle_timeout`` without records, so
        it stops holding back the watermark downstream until records arrive again."""
        ms = to_millis(idle_timeout, "idle_timeout")
        if ms <= 0:
            raise ConfigurationError(f"idle_timeout must be positive, got {idle_timeout!r}")
        return WatermarkStrategy(replace(self._spec, idle_timeout_ms=ms))

    def with_watermark_alignment(
        self, watermark_group: str, max_allowed_watermark_drift: Any, update_interval: Any = None
    ) -> WatermarkStrategy:
        raise ConfigurationError(
            "watermark alignment is not supported: streamstate reads all sources in lockstep "
            "epochs, so a source can only run ahead by one epoch's records"
        )

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        """Timestamps ascend: the watermark follows the largest timestamp seen (minus 1 ms)."""
        return WatermarkStrategy(_Spec(0))

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Any) -> WatermarkStrategy:
        """Records are at most ``max_out_of_orderness`` late: the watermark is the largest
        timestamp seen minus that bound minus 1 ms."""
        return WatermarkStrategy(_Spec(to_millis(max_out_of_orderness, "max_out_of_orderness")))

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        """Timestamps (if assigned) but no watermarks, except the final one at end of input."""
        return WatermarkStrategy(_Spec(None))

    def __repr__(self) -> str:
        s = self._spec
        kind = (
            "no_watermarks()"
            if s.out_of_orderness_ms is None
            else f"for_bounded_out_of_orderness({s.out_of_orderness_ms} ms)"
        )
        extra = f".with_idleness({s.idle_timeout_ms} ms)" if s.idle_timeout_ms else ""
        return f"WatermarkStrategy.{kind}{extra}"
