"""The driver's clock: milliseconds since the Unix epoch, injectable for tests.

Everything on the driver that reads wall-clock time (checkpoint intervals, timeouts and
min pauses, processing time handed to the workers, restart back-off windows) reads it
through one :data:`Clock` held by the job's :class:`~streamstate.runtime.settings.JobSettings`,
so a test can replace it per job instead of patching a module.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock", "TickingClock", "default_clock", "system_clock_ms", "use_default_clock"]

#: A clock is a zero-argument callable returning the current time in ms.
Clock = Callable[[], int]


def system_clock_ms() -> int:
    """The wall clock (ms since the Unix epoch)."""
    return time.time_ns() // 1_000_000


class TickingClock:
    """A deterministic clock: reading ``n`` (0-based) returns ``start_ms + n * step_ms``.

    Every reading advances the clock, so a job's checkpoint pattern over its epochs
    depends only on the checkpoint interval, never on how fast the epochs ran.
    ``step_ms`` may be changed between readings.
    """

    def __init__(self, start_ms: int | None = None, step_ms: int = 1000) -> None:
        self.start_ms = system_clock_ms() + 60_000 if start_ms is None else start_ms
        self.step_ms = step_ms
        self._read = False
        self._now = self.start_ms

    def __call__(self) -> int:
        if self._read:
            self._now += self.step_ms
        self._read = True
        return self._now

    def __repr__(self) -> str:
        return f"TickingClock(now={self._now}, step_ms={self.step_ms})"


_default_clock: list[Clock] = []


def default_clock() -> Clock:
    """The clock new jobs use when their environment sets none (see :func:`use_default_clock`)."""
    return _default_clock[-1] if _default_clock else system_clock_ms


class use_default_clock:  # used as a context manager, like contextlib's helpers
    """Within the ``with`` block, jobs whose environment sets no clock use ``clock``.

    For test fixtures that run jobs through helpers they do not own; a job started inside
    the block keeps the clock for its whole run. Blocks nest; not thread-safe.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def __enter__(self) -> Clock:
        _default_clock.append(self.clock)
        return self.clock

    def __exit__(self, *exc: object) -> None:
        _default_clock.remove(self.clock)
