"""The warm server's watchdog (spark/local_server.py): when the process that owns a server
is gone, however it ended, the server's process group goes too. Real processes: a
``sleep`` stands for the server's group, another for its owner."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import pytest

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


def test_stopping_ends_the_group_when_its_leader_is_gone_already():
    # the start script (the group's leader) exited, the JVM it started did not: a stop
    # must still end the JVM (it is the server), found by the group id
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 600 & echo $!"], start_new_session=True, stdout=subprocess.PIPE
    )
    assert leader.stdout is not None
    orphan = int(leader.stdout.readline())
    leader.wait()
    try:
        assert _group_alive(leader.pid)
        local_server._kill_group(leader.pid)
        assert not _group_alive(leader.pid)
        with pytest.raises(ProcessLookupError):
            os.kill(orphan, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(orphan, signal.SIGKILL)


def test_a_pid_that_leads_no_group_is_left_alone():
    # a stale state file's pid reused by a process of another group: never signalled
    other = subprocess.Popen(["sleep", "600"])  # in this process's group
    try:
        local_server._kill_group(other.pid)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_watchdog_for_a_process_that_does_not_exist_is_refused():
    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(local_server.LocalServerError, match="no such process"):
        local_server._watch(gone.pid, os.getpid())
