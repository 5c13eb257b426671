"""Progress of a running job on the terminal: epochs, records/s, last checkpoint, restarts.

``execution.progress`` (default ``auto``): ``live`` redraws one line in place (``rich``),
``lines`` writes one line per epoch (at most one a second, none for the first epoch, and
always the last: a short job writes one line in all), ``none``
writes nothing; ``auto`` is ``live`` when stderr is a terminal and ``lines`` otherwise.
``streamstate run --quiet`` sets ``none``. The observer runs on the driver between epochs
and only formats a string and writes it.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any, TextIO

from streamstate.common.job_status import JobStatus
from streamstate.errors import ConfigurationError
from streamstate.runtime.job_status import (
    PROGRESS_KEY,
    EpochStats,
    FailureInfo,
    JobObserver,
    RestoredCheckpoint,
)

__all__ = ["PROGRESS_KEY", "PROGRESS_MODES", "ProgressObserver", "progress_observer"]

PROGRESS_MODES = ("auto", "live", "lines", "none")
#: seconds between two lines in ``lines`` mode
LINE_INTERVAL_S = 1.0
#: epochs the records/s figure averages over
RATE_WINDOW = 10
TERMINAL = frozenset({JobStatus.FINISHED, JobStatus.CANCELED, JobStatus.FAILED})


class ProgressObserver(JobObserver):
    """Writes the progress of one job to ``stream`` (live line or lines)."""

    def __init__(self, job_name: str, live: bool, stream: TextIO | None = None) -> None:
        self.job_name = job_name
        self.stream = stream if stream is not None else sys.stderr
        self.live = live
        self._live: Any = None
        self.records = 0
        self.epochs = 0
        self.restarts = 0
        self.last_checkpoint: int | None = None
        self._t0 = time.monotonic()
        #: when the last line was written (``lines``); None until the first epoch ended
        self._last_line: float | None = None
        self._rate = 0.0
        self._window: deque[tuple[int, float]] = deque(maxlen=RATE_WINDOW)

    def _text(self, status: str = "RUNNING") -> str:
        cp = "-" if self.last_checkpoint is None else str(self.last_checkpoint)
        elapsed = time.monotonic() - self._t0
        return (
            f"{self.job_name}: {status} epoch {self.epochs}, {self.records:,} records, "
            f"{self._rate:,.0f}/s, checkpoint {cp}, {self.restarts} restarts, {elapsed:.0f}s"
        )

    def _write(self, status: str = "RUNNING", final: bool = False) -> None:
        if self.live:
            if self._live is None:
                from rich.console import Console
                from rich.live import Live

                console = Console(file=self.stream, highlight=False)
                self._live = Live(console=console, auto_refresh=False, transient=False)
                self._live.start()
            from rich.text import Text

            # one terminal line, however narrow: a wrapped line would scroll on every redraw
            line = Text(self._text(status), no_wrap=True, overflow="ellipsis")
            self._live.update(line, refresh=True)
            if final:
                self._live.stop()
                self._live = None
            return
        now = time.monotonic()
        if self._last_line is None and not final:
            self._last_line = now  # the first epoch: a line a second from here on
            return
        if final or now - (self._last_line or 0.0) >= LINE_INTERVAL_S:
            self._last_line = now
            self.stream.write(self._text(status) + "\n")
            self.stream.flush()

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        self.epochs = stats.epoch
        self.records += stats.source_records
        # records/s over the last RATE_WINDOW epochs (an empty last epoch does not zero it)
        self._window.append((stats.source_records, stats.duration_ms))
        busy = [(n, ms) for n, ms in self._window if n]
        ms = sum(d for _, d in busy)
        if ms > 0:
            self._rate = sum(n for n, _ in busy) * 1000.0 / ms
        if stats.checkpoint_id is not None:
            self.last_checkpoint = stats.checkpoint_id
        self._write()

    def on_restore(self, job_id: str, restored: RestoredCheckpoint) -> None:
        self._note(f"{self.job_name}: {restored.describe()}")

    def _note(self, text: str) -> None:
        """A line of its own above the progress line (or between the lines)."""
        if self.live and self._live is not None:
            self._live.console.print(text, highlight=False, markup=False)
            return
        self.stream.write(text + "\n")
        self.stream.flush()

    def on_failure(self, job_id: str, failure: FailureInfo) -> None:
        if failure.will_restart:
            self.restarts += 1

    def on_status_change(self, job_id: str, status: JobStatus, timestamp_ms: int) -> None:
        if status in TERMINAL:
            self._write(status.name, final=True)


def progress_observer(mode: str | None, job_name: str) -> ProgressObserver | None:
    """The observer for ``execution.progress: mode`` (None for ``none``)."""
    m = (mode or "auto").strip().lower()
    if m not in PROGRESS_MODES:
        raise ConfigurationError(
            f"{PROGRESS_KEY} must be one of {', '.join(PROGRESS_MODES)}, got {mode!r}"
        )
    if m == "none":
        return None
    if m == "auto":
        m = "live" if sys.stderr.isatty() else "lines"
    return ProgressObserver(job_name, live=m == "live")
