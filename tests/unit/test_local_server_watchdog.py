"""The warm server's watchdog (spark/local_server.py): when the process that owns a server
is gone, however it ended, the server's process group goes too. Real processes: a
``sleep`` stands for the server's group, another for its owner."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from streamstate.spark import local_server


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_killed_owner_takes_the_server_group_with_it():
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    owner = subprocess.Popen(["sleep", "600"])
    try:
        local_server._watch(owner.pid, server.pid)
        owner.kill()  # SIGKILL: no handler, no atexit could stop the server
        owner.wait()
        while server.poll() is None:  # the watchdog polls once a second
            time.sleep(0.1)
        assert server.returncode == -signal.SIGTERM
        assert not _group_alive(server.pid)
    finally:
        for p in (server, owner):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_server_that_ends_ends_its_watchdog():
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    watchdog = local_server._watch(os.getpid(), server.pid)
    server.kill()
    server.wait()
    assert watchdog.wait() == 0  # it saw the group gone (its owner, this process, lives)
