"""What streamstate left behind: its processes still alive and its files in the temp dir.

The test session records a :class:`Baseline` when it starts and checks it when it ends
(``tests/conftest.py``): a process started by streamstate during the session (a subtask
host, query host or zygote, a ``streamstate`` CLI run, a Spark Connect server and its
watchdog) that is still alive, or an entry of
the temp directory that is streamstate's and was not there before, fails the run with the
list. Other engineers' processes on a shared machine are told apart by their TMPDIR.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field

from streamstate.runtime.host_owner import running, start_time

__all__ = [
    "HOME_PREFIX",
    "Baseline",
    "leftover_files",
    "leftover_processes",
    "streamstate_processes",
]

#: command-line arguments that make a process streamstate's own
_MODULES = {
    "streamstate.runtime.host_process",
    "streamstate.runtime.queryable.query_host",
    "streamstate.cli",
    "streamstate.cli.main",
    "streamstate.spark.local_server_watchdog",
    # a Spark Connect server (the tests' or `streamstate local start`'s): its JVM and the
    # start script running it
    "org.apache.spark.sql.connect.service.SparkConnectServer",
    # the Connect server's Python worker daemons (they end once its JVM is gone)
    "streamstate.spark.warm_daemon",
}
#: temp-dir entries that are streamstate's (the runtime dir, the old shared dir, staged
#: rows, RocksDB directories made in the temp dir)
_FILE_PREFIXES = ("streamstate", "rocksdb-")
#: a test session's private ``STREAMSTATE_HOME`` in the temp dir: ``<prefix><pid>-<random>``
#: (tests/conftest.py), removed when that session's process ends
HOME_PREFIX = "streamstate-home-"


def _home_of_another_session(name: str) -> bool:
    """``name`` is the home of another test session that is still running (it removes the
    home when it ends): a session's, not streamstate's, and not a leftover of this one.
    Two sessions in one temp dir each saw the other's home, with the ``checkpoint.key``
    and ``jobs/<user>`` its jobs wrote, as a leftover."""
    pid = name.removeprefix(HOME_PREFIX).split("-", 1)[0]
    return (
        name.startswith(HOME_PREFIX)
        and pid.isdigit()
        and int(pid) != os.getpid()
        and running(int(pid))
    )


def _args(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _tmpdir_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"TMPDIR="):
            return item[len(b"TMPDIR=") :].decode(errors="replace")
    return ""


def _is_streamstate(args: list[str]) -> bool:
    if any(a in _MODULES for a in args):
        return True
    # the console script: `streamstate ...` or `python .../bin/streamstate ...`
    return any(os.path.basename(a) == "streamstate" for a in args[:2])


def _ancestors() -> set[int]:
    out, pid = set(), os.getpid()
    while pid > 1:
        out.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def streamstate_processes(since: int) -> dict[int, str]:
    """Running processes of streamstate's with this process's TMPDIR that started at or
    after ``since`` (clock ticks after boot), by pid: their command lines."""
    mine = os.environ.get("TMPDIR", "")
    skip = _ancestors()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        pid = int(name)
        args = _args(pid)
        if not args or not _is_streamstate(args) or _tmpdir_of(pid) != mine:
            continue
        started = start_time(pid)
        if started is None or started < since or not running(pid):
            continue
        found[pid] = " ".join(args)
    return found


def _temp_entries() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(_FILE_PREFIXES)}


@dataclass
class Baseline:
    """The state at the start of the session: what is not a leftover of this session."""

    since: int = field(default_factory=lambda: start_time(os.getpid()) or 0)
    entries: set[str] = field(default_factory=_temp_entries)
    #: temp-dir entries the tests create on purpose and remove later (e.g. at exit)
    expected: set[str] = field(default_factory=set)


def leftover_processes(baseline: Baseline, wait_s: float) -> dict[int, str]:
    """Streamstate's processes started since ``baseline`` that are still alive after up to
    ``wait_s`` (they end asynchronously: with their application's owner)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = streamstate_processes(baseline.since)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def leftover_files(baseline: Baseline) -> dict[str, list[str]]:
    """Streamstate's temp-dir entries that were not there at ``baseline``: name -> what is
    in it (a few entries, for the report)."""
    out = {}
    root = tempfile.gettempdir()
    new = _temp_entries() - baseline.entries - baseline.expected
    for name in sorted(n for n in new if not _home_of_another_session(n)):
        path = os.path.join(root, name)
        inside: list[str] = []
        for dirpath, dirs, files in os.walk(path):
            inside += [os.path.relpath(os.path.join(dirpath, n), path) for n in dirs + files]
            if len(inside) > 20:
                break
        out[name] = sorted(inside)[:20]
    return out
