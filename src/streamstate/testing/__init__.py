"""Testing tools: ``KeyedFunctionHarness`` (a keyed user function on the real runtime,
without a job), a deterministic driver clock, and failure injection.

Failure injection: functions that fail exactly once, where you say.

``FailOnce`` is an identity :class:`MapFunction` that fails the first time it
runs in ``epoch`` on subtask ``subtask`` (after ``after_records`` records of
that epoch). "Once" holds across Python processes and job restarts: the first
failure creates a marker file (``O_EXCL``) in ``marker_dir``, which must be
reachable by every worker (a local temp dir for ``local``/``local-cluster``).

Modes: ``"raise"`` raises :class:`InjectedFailure` (a user-code error);
``"exit"`` kills the Python worker process with ``os._exit`` (a crash; never
use it with the in-process runner, it would kill the test itself).

``crash_once(marker_dir, name, mode)`` is the same "once" as a call to put anywhere
(e.g. in a sink subclass right after its pre-commit): the first call with that name
exits the process (``"exit"``) or raises; every later call, in any process, returns.

``TickingClock`` and ``use_default_clock`` inject a deterministic driver clock
(also per environment: ``env.set_clock(TickingClock())``).
"""

from __future__ import annotations

import os
from typing import Any

from streamstate.api.functions import MapFunction, RuntimeContext
from streamstate.runtime.clock import TickingClock, use_default_clock
from streamstate.testing.harness import HarnessSnapshot, KeyedFunctionHarness

__all__ = [
    "FailOnce",
    "HarnessSnapshot",
    "InjectedFailure",
    "KeyedFunctionHarness",
    "TickingClock",
    "crash_once",
    "use_default_clock",
]


class InjectedFailure(RuntimeError):
    """The failure a test asked for."""


def _first_time(marker: str) -> bool:
    """True for the first caller of ``marker`` across processes (an ``O_EXCL`` file)."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def crash_once(marker_dir: str, name: str, mode: str = "exit") -> None:
    """Fail the first time this is called with ``name`` (in any process): ``"exit"`` ends
    the process with ``os._exit(17)`` (a crashed worker), ``"raise"`` raises
    :class:`InjectedFailure`. Later calls return. ``marker_dir`` must be reachable by every
    process that may call it."""
    if mode not in ("raise", "exit"):
        raise ValueError(f"mode must be 'raise' or 'exit', got {mode!r}")
    if not _first_time(os.path.join(marker_dir, f"{name}.failed")):
        return
    if mode == "exit":
        os._exit(17)
    raise InjectedFailure(f"injected failure {name!r}")


class FailOnce(MapFunction):
    def __init__(
        self,
        marker_dir: str,
        epoch: int,
        subtask: int = 0,
        mode: str = "raise",
        after_records: int = 0,
        name: str = "fail-once",
    ) -> None:
        if mode not in ("raise", "exit"):
            raise ValueError(f"mode must be 'raise' or 'exit', got {mode!r}")
        self.marker = os.path.join(marker_dir, f"{name}.failed")
        self.epoch = epoch
        self.subtask = subtask
        self.mode = mode
        self.after_records = after_records
        self._ctx: Any = None
        self._seen = 0
        self._seen_epoch = -1

    def open(self, runtime_context: RuntimeContext) -> None:
        self._ctx = runtime_context

    def _should_fail(self) -> bool:
        ctx = self._ctx
        if ctx is None or ctx.get_index_of_this_subtask() != self.subtask:
            return False
        epoch = getattr(ctx, "epoch", 0)
        if epoch != self._seen_epoch:
            self._seen_epoch, self._seen = epoch, 0
        self._seen += 1
        if epoch != self.epoch or self._seen <= self.after_records:
            return False
        return _first_time(self.marker)

    def map(self, value: Any) -> Any:
        if self._should_fail():
            if self.mode == "exit":
                os._exit(17)
            raise InjectedFailure(f"injected failure in epoch {self.epoch}, subtask {self.subtask}")
        return value

    @property
    def fired(self) -> bool:
        return os.path.exists(self.marker)
