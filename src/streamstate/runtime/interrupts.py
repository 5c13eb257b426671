"""Ctrl-C while a job runs in ``execute()``: stop it, in steps, with one line each.

Python's default SIGINT handler raises ``KeyboardInterrupt`` wherever the main thread is;
on Spark that is usually inside a py4j call, and PySpark's own handler then calls the JVM
again from the signal handler, on the same connection: dozens of lines of py4j
tracebacks (``RuntimeError: reentrant call``, ``Py4JNetworkError``) and a job stopped
mid-epoch. While :func:`ctrl_c_stops` is active (the main thread, around a job's run):

1. the first Ctrl-C asks the job to stop at the end of its current epoch, as
   ``JobClient.cancel()`` does (checkpoint retention applies), and says so in one line;
2. the second stops it at once: the runner's running work is cancelled from another
   thread (``EpochRunner.interrupt``: Spark's ``cancelAllJobs``) and the failed epoch ends
   the job as cancelled, not as a failure to restart from;
3. a third raises ``KeyboardInterrupt`` where the main thread is (a runner stuck beyond
   cancelling).

Creating a SparkContext installs PySpark's handler: :meth:`CtrlC.reclaim` puts ours back
(the executor calls it once the runner started).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["CtrlC", "ctrl_c_stops"]


class CtrlC:
    """The SIGINT handler of one running job (see the module docstring)."""

    def __init__(self, job_name: str, stop: Callable[[], None], stop_now: Callable[[], None]):
        self.job_name = job_name
        self._stop = stop
        self._stop_now = stop_now
        self.presses = 0
        #: the handler :meth:`reclaim` replaced (e.g. PySpark's), restored at the end
        self.displaced: Any = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.presses += 1
        if self.presses == 1:
            _say(
                f"streamstate: Ctrl-C: job {self.job_name!r} stops at the end of its epoch "
                f"(Ctrl-C again to stop it at once)"
            )
            self._stop()
        elif self.presses == 2:
            _say(f"streamstate: Ctrl-C: stopping job {self.job_name!r} now")
            # from another thread: a call into the runner here could re-enter the very
            # call (a py4j socket read) the main thread is blocked in
            threading.Thread(target=self._stop_now, name="streamstate-ctrl-c", daemon=True).start()
        else:
            raise KeyboardInterrupt

    def reclaim(self) -> None:
        """Be the SIGINT handler again (after a library installed its own)."""
        if _in_main_thread() and signal.getsignal(signal.SIGINT) is not self:
            self.displaced = signal.signal(signal.SIGINT, self)


def _say(line: str) -> None:
    try:
        # on a terminal: below the live progress line (and the echoed ^C), not into it
        sys.stderr.write(("\n" if sys.stderr.isatty() else "") + line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # no stderr to say it on: stopping matters more


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def ctrl_c_stops(
    job_name: str, stop: Callable[[], None], stop_now: Callable[[], None]
) -> Iterator[CtrlC | None]:
    """Handle Ctrl-C as above while the block runs (yields None off the main thread, where
    signal handlers cannot be set: ``execute_async`` jobs are stopped with their client)."""
    if not _in_main_thread():
        yield None
        return
    handler = CtrlC(job_name, stop, stop_now)
    previous: Any = signal.signal(signal.SIGINT, handler)
    try:
        yield handler
    finally:
        signal.signal(signal.SIGINT, handler.displaced or previous)
