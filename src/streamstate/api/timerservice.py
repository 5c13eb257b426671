"""``TimerService``, mirroring ``pyflink.datastream.timerservice``."""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["TimerService"]


class TimerService(ABC):
    """Query time and register timers (scoped to the current key)."""

    @abstractmethod
    def current_processing_time(self) -> int:
        """The processing time of the current epoch (the driver's clock, ms)."""

    @abstractmethod
    def current_watermark(self) -> int:
        """The operator's current event-time watermark (Long.MIN before the first one)."""

    @abstractmethod
    def register_processing_time_timer(self, timestamp: int) -> None:
        """Fire ``on_timer`` once processing time reaches ``timestamp``."""

    @abstractmethod
    def register_event_time_timer(self, timestamp: int) -> None:
        """Fire ``on_timer`` once the watermark reaches ``timestamp``."""

    def delete_processing_time_timer(self, timestamp: int) -> None:  # noqa: B027
        """Delete the processing-time timer at ``timestamp`` of the current key, if any."""

    def delete_event_time_timer(self, timestamp: int) -> None:  # noqa: B027
        """Delete the event-time timer at ``timestamp`` of the current key, if any."""
