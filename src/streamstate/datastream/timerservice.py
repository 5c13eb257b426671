"""PyFlink's ``pyflink.datastream.timerservice``: re-exports of :mod:`streamstate.api`."""

from __future__ import annotations

from streamstate.api.timerservice import (
    TimerService,
)

__all__ = [
    "TimerService",
]
