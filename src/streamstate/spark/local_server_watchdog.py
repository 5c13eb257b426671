"""The warm local server's watchdog: ``python -m streamstate.spark.local_server_watchdog
OWNER GROUP``.

A server started for a process (a test session, a CI job's shell: ``start_server(
owner_pid=...)``, ``streamstate local start --owner-pid PID``) must not outlive it, however
that process ended: a SIGKILL runs no ``finally`` and no ``atexit``. This process, in a
session of its own, polls the owner (``pid-start``: :class:`runtime.host_owner.Owner`, so
a reused pid is not taken for the owner) and the server's process group twice a second;
once the owner is gone it ends the group (SIGTERM, SIGKILL after 10 s). It exits as soon
as the group is gone, whoever ended it (``streamstate local stop``).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from streamstate.runtime.host_owner import Owner, running

__all__ = ["main"]

_POLL_S = 0.5
_GRACE_S = 10.0


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` exists (Linux allocates no pid that is still
    some group's id, so a live group with the server's pid as id is the server's)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(pgid: int) -> None:
    """Reap the group's leader if it is this process's child (an unreaped leader keeps
    the group alive as a zombie)."""
    try:
        os.waitpid(pgid, os.WNOHANG)
    except ChildProcessError:
        pass


def end_group(pgid: int, grace_s: float = _GRACE_S) -> None:
    """SIGTERM the group, SIGKILL what is left of it after ``grace_s``; reaps the leader
    when this process started it."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(pgid)
        if not group_alive(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while group_alive(pgid) and time.monotonic() < deadline:
        _reap(pgid)
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    owner, group = Owner.decode(argv[0]), int(argv[1])
    while group_alive(group):
        if not (owner.alive() and running(owner.pid)):
            end_group(group)
            return 0
        time.sleep(_POLL_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
