"""The process a machine's subtask hosts belong to: their Spark application there.

Subtask hosts, query hosts and the zygote that forks them leave the Python worker's
session (they outlive the task that started them), so nothing of Spark's ends them. They
end with their **owner**: the process that stands for the Spark application on this
machine, found among the starting worker's ancestors in ``/proc``:

* the **PySpark daemon** the worker was forked from (``python -m pyspark.daemon``; the
  topmost ancestor with the worker's own command line). Spark starts one per executor
  and application (``SparkEnv``) and ends it when the application stops
  (``SparkContext.stop``) or the executor dies; the daemon also exits when its executor
  JVM closes its stdin, e.g. because the JVM died. A local-mode JVM ends when its driver
  dies (PySpark's gateway exits at the end of its stdin), so a SIGKILLed driver takes the
  daemon, and with it the hosts, along;
* else the **executor JVM** itself (a worker started without the daemon,
  ``spark.python.use.daemon=false``): it lives as long as the executor (in local mode as
  long as the driver process, across ``SparkSession``s);
* else the calling process (no Spark: a test, a tool).

An owner is ``(pid, start time)``: the start time (``/proc/<pid>/stat`` field 22) tells a
reused pid from the owner. Hosts and zygotes watch it with a pidfd (``os.pidfd_open``,
readable when the process ends: no polling), else by polling once a second.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "Owner",
    "adopt",
    "owner_fd",
    "running",
    "start_time",
    "this_owner",
    "wait_for_end",
    "watch",
]


@dataclass(frozen=True)
class Owner:
    """The owner process: its pid and start time (clock ticks after boot; 0 unknown)."""

    pid: int
    start: int

    @property
    def key(self) -> str:
        """The owner's name in paths (``app-<key>``)."""
        return f"{self.pid}-{self.start}"

    def alive(self) -> bool:
        started = start_time(self.pid)
        return started is not None and (self.start == 0 or started == self.start)

    def encode(self) -> str:
        return self.key

    @classmethod
    def decode(cls, text: str) -> Owner:
        pid, _, start = text.partition("-")
        return cls(int(pid), int(start or 0))


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name (field 2) may hold spaces and parentheses: split after it
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot), or ``None`` when it does not exist.
    Without ``/proc``: 0 when it exists."""
    fields = _stat_fields(pid)
    if fields is not None:
        try:
            return int(fields[19])
        except (IndexError, ValueError):
            return None
    if os.path.isdir("/proc"):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return 0
    return 0


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie waiting to be reaped by
    its parent has)."""
    fields = _stat_fields(pid)
    if fields is not None:
        return fields[0] not in ("Z", "X")
    return start_time(pid) is not None


def _parent(pid: int) -> int | None:
    fields = _stat_fields(pid)
    try:
        return int(fields[1]) if fields else None
    except (IndexError, ValueError):
        return None


def _cmdline(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return None


def _is_java(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "java"
    except OSError:
        args = _cmdline(pid) or b""
        return os.path.basename(args.split(b"\0", 1)[0]) == b"java"


_ADOPTED: list[Owner] = []


def adopt(owner: Owner) -> None:
    """Make ``owner`` this process's owner (zygotes and hosts: their owner is the one of
    the worker that started them, not found among their own ancestors)."""
    _ADOPTED[:] = [owner]


def this_owner() -> Owner:
    """The owner of the hosts this process starts (see the module docstring); cached."""
    if _ADOPTED:
        return _ADOPTED[0]
    me = os.getpid()
    mine = _cmdline(me)
    owner = me
    pid = _parent(me)
    if pid is not None and mine is not None and _cmdline(pid) == mine:
        # a forked PySpark worker: climb to the topmost copy of this command line, the daemon
        while pid is not None and pid > 1 and _cmdline(pid) == mine:
            owner = pid
            pid = _parent(pid)
    elif pid is not None and pid > 1 and _is_java(pid):
        owner = pid  # a worker the executor JVM started itself
    found = Owner(owner, start_time(owner) or 0)
    _ADOPTED[:] = [found]
    return found


def owner_fd(owner: Owner) -> int | None:
    """A pidfd of ``owner`` (readable once it ended), or ``None`` when the platform has no
    pidfds or the owner is gone already."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(owner.pid)
    except OSError:
        return None
    if not owner.alive():  # the pid was reused between finding the owner and now
        os.close(fd)
        return None
    return fd


def wait_for_end(owner: Owner, fd: int | None) -> None:
    """Block until ``owner`` ended (``fd``: its pidfd, else polled once a second)."""
    if fd is not None:
        while True:
            try:
                select.select([fd], [], [])
                return
            except InterruptedError:
                continue
    while owner.alive():
        time.sleep(1.0)


def watch(owner: Owner, fd: int | None, on_end: Callable[[], None]) -> None:
    """Call ``on_end`` in a daemon thread once ``owner`` ended."""

    def run() -> None:
        wait_for_end(owner, fd)
        on_end()

    threading.Thread(target=run, name="streamstate-owner-watch", daemon=True).start()
