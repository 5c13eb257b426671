"""One writer per job directory: a lock file naming its owner, and owner-only permissions.

A job's checkpoint directory (``<dir>/<job-id>``) is written by exactly one driver. The
driver creates ``<dir>/<job-id>/_lock`` (exclusively, on local file systems) holding its
host, process id, job id and start time; a second driver for the same directory and job
id is refused with :class:`~streamstate.errors.CheckpointStorageError` naming the owner.
A lock whose owner process is gone (same host, pid not running) is stale and taken over.
On an object store the lock is a conditional PUT (``If-None-Match: *``), as exclusive as
the file system's create where the server honours it (docs/limitations.md otherwise).

Job directories on local file systems are made owner-only (``0700``): checkpoints hold
state, and restoring a checkpoint can load pickled values (see docs/guarantees.md).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any

from streamstate.errors import CheckpointStorageError
from streamstate.runtime.host_owner import start_time
from streamstate.runtime.stores import write_once

__all__ = ["LOCK_FILE_NAME", "JobLock", "is_local", "make_private"]

log = logging.getLogger("streamstate")

LOCK_FILE_NAME = "_lock"


def is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return bool({"file", "local"} & set(protocol))


def make_private(fs: Any, directory: str) -> None:
    """Owner-only permissions for ``directory`` on a local file system (others: no-op)."""
    if is_local(fs):
        os.chmod(directory, 0o700)


class JobLock:
    """The lock of one job directory, held by this driver process until :meth:`release`."""

    def __init__(self, fs: Any, job_path: str, job_id: str) -> None:
        self.fs = fs
        self.path = f"{job_path.rstrip('/')}/{LOCK_FILE_NAME}"
        self.owner = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            # with the pid, the process's start time: a killed driver's pid is handed out
            # again (pid_max is often 32768), and that process does not hold the lock
            "pid_start": start_time(os.getpid()) or 0,
            "job_id": job_id,
            "since_ms": time.time_ns() // 1_000_000,
        }
        self.held = False

    def acquire(self) -> JobLock:
        data = json.dumps(self.owner).encode()
        for _ in range(2):
            if self._create(data):
                self.held = True
                return self
            other = self._read()
            if other is not None and not self._stale(other):
                raise CheckpointStorageError(
                    f"checkpoint directory {self.fs.unstrip_protocol(self.path).rsplit('/', 1)[0]}"
                    f" is in use by job {other.get('job_id')!r} of process {other.get('pid')} on "
                    f"{other.get('host')!r} (since {other.get('since_ms')} ms): two jobs must not "
                    f"write one job directory. Use another job id or checkpoint directory; if "
                    f"that job is gone (its machine died), delete {LOCK_FILE_NAME}"
                )
            log.warning("taking over the stale lock %s of %s", self.path, other)
            try:
                self.fs.rm(self.path)
            except FileNotFoundError:
                pass
        raise CheckpointStorageError(f"cannot take the lock {self.path}: it keeps reappearing")

    def _create(self, data: bytes) -> bool:
        """Create the lock file unless it exists: an exclusive create on a file system,
        a conditional PUT on an object store (:func:`stores.write_once`)."""
        return write_once(self.fs, self.path, data)

    def _read(self) -> dict[str, Any] | None:
        try:
            with self.fs.open(self.path, "rb") as f:
                doc = json.loads(f.read().decode())
            return doc if isinstance(doc, dict) else {}
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError):
            return {}  # an unreadable lock: its owner is unknown, treat as held

    def _stale(self, other: dict[str, Any]) -> bool:
        """Whether ``other`` (a lock's owner) is gone: a process on this host whose pid no
        longer exists, or exists but started at another time (a reused pid). A lock of
        another host is never stale here: that host's processes cannot be seen."""
        pid, pid_start = other.get("pid"), other.get("pid_start")
        if other.get("host") != self.owner["host"] or not isinstance(pid, int):
            return False
        started = start_time(pid)
        if started is None:
            return True
        # locks written before the start time was recorded: the pid alone decides
        return isinstance(pid_start, int) and pid_start != 0 and started != pid_start

    def release(self) -> None:
        """Remove the lock (idempotent; only this owner's lock)."""
        if not self.held:
            return
        self.held = False
        other = self._read()
        if other == self.owner:
            try:
                self.fs.rm(self.path)
            except FileNotFoundError:
                pass
