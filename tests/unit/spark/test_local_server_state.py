"""The warm server's state file (spark/local_server.py): it names the server by pid AND
start time, so a pid the kernel handed to another process after the server died is not
taken for the server (pid_max is 32768 on this machine: reuse happens in a long CI run)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from streamstate.runtime.host_owner import start_time
from streamstate.spark import local_server


@pytest.fixture
def listening_port() -> Iterator[int]:
    """An open port on 127.0.0.1: the server's port answers, so only the pid decides."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _write(home: Path, content: dict[str, object]) -> None:
    (home / "local-server.json").write_text(json.dumps(content))


def _server(port: int, pid_start: int) -> local_server.LocalServer:
    return local_server.LocalServer(
        pid=os.getpid(),
        url=f"sc://127.0.0.1:{port}",
        port=port,
        master="local[2]",
        log="server.log",
        python="python",
        started_ms=0,
        pid_start=pid_start,
    )


def test_a_live_pid_of_the_recorded_start_time_is_the_server(tmp_path, listening_port):
    me = start_time(os.getpid())
    assert me is not None
    _write(tmp_path, asdict(_server(listening_port, me)))
    assert local_server.running_server(tmp_path) == _server(listening_port, me)


def test_a_reused_pid_is_not_the_server(tmp_path, listening_port):
    me = start_time(os.getpid())
    assert me is not None
    _write(tmp_path, asdict(_server(listening_port, me + 1)))  # same pid, another process
    assert local_server.running_server(tmp_path) is None


def test_a_version_1_file_is_read_with_an_unknown_start_time(tmp_path, listening_port):
    old = asdict(_server(listening_port, 0))
    del old["pid_start"]
    old["version"] = 1
    _write(tmp_path, old)
    assert local_server.running_server(tmp_path) == replace(
        _server(listening_port, 0), version=local_server.STATE_VERSION
    )


def test_a_file_of_an_unknown_version_is_not_read(tmp_path, listening_port):
    _write(tmp_path, {**asdict(_server(listening_port, 0)), "version": 99})
    assert local_server.running_server(tmp_path) is None
