"""A query host process (runtime/queryable/query_host.py): where it listens, who may talk to
it (both sides prove the secret before anything is unpickled), and how it stops."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time

import pytest

from streamstate.errors import QueryableStateError
from streamstate.runtime.checkpoint.lock import process_alive
from streamstate.runtime.queryable.query_host import _read_info, bind_address, connect


def test_a_query_host_listens_on_its_executors_host_or_loopback():
    assert bind_address(None) == "127.0.0.1"
    assert bind_address("executor_worker-3.example_7") == "worker-3.example"
    assert bind_address("executor_10.0.0.5_12") == "10.0.0.5"


def _start(path: str, idle: str) -> subprocess.Popen:
    module = "streamstate.runtime.queryable.query_host"
    proc = subprocess.Popen([sys.executable, "-m", module, path, "j", "127.0.0.1", idle])
    deadline = time.monotonic() + 60
    while _read_info(path) is None:
        if proc.poll() is not None:
            pytest.fail(f"the query host exited with {proc.returncode} before listening")
        if time.monotonic() > deadline:
            pytest.fail("the query host did not listen within 60 s")  # a hang, not a speed
        time.sleep(0.01)
    return proc


@pytest.fixture
def host(tmp_path):
    path = str(tmp_path / "q.json")
    proc = _start(path, "30")
    yield path, proc
    proc.kill()
    proc.wait()


def test_only_the_holder_of_the_secret_is_served(host):
    path, proc = host
    pid, address, secret = _read_info(path)
    assert pid == proc.pid and address.startswith("127.0.0.1:")
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    with pytest.raises((QueryableStateError, EOFError, OSError)):
        connect(address, "not-the-secret", timeout=5)
    with connect(address, secret, timeout=5) as conn:
        # operators and lineages it does not hold are asked for by reference
        msg = ("lookup", "epoch", ("count", "value", None), 8, [("op", None, "lin", None, [])])
        conn.send_bytes(pickle.dumps(msg))
        assert conn.poll(30)
        assert pickle.loads(conn.recv_bytes()) == ("need", ["op", "lin"])
        conn.send_bytes(pickle.dumps(("stop",)))
        assert conn.poll(30)
        assert pickle.loads(conn.recv_bytes()) == ("stopped",)
    proc.wait(30)
    assert not process_alive(pid) and not os.path.exists(path)


def test_a_query_host_without_lookups_and_epochs_exits_after_its_idle_timeout(tmp_path):
    """No lookup and no subtask host touching its file (the driver died): it goes."""
    path = str(tmp_path / "q.json")
    proc = _start(path, "0.5")
    assert proc.wait(60) == 0
    assert not os.path.exists(path)


def _client(address, secret):
    import socket

    from streamstate.runtime.queryable import direct

    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    reader = direct.FrameReader(sock)
    direct.client_handshake(sock, reader, secret)
    return sock, reader


def test_a_direct_client_proves_the_derived_secret_and_is_never_unpickled(host):
    """Clients prove HMAC(secret, job) (never the host's secret itself); the host's own
    secret does not open a client connection; garbage and unpinned requests get typed
    answers, a pickle sent as a request is not loaded."""
    import json

    from streamstate.runtime.queryable import direct

    path, proc = host
    _, address, secret = _read_info(path)
    derived = direct.client_secret(secret, "j")  # the job id the fixture started it with
    for wrong in (secret, direct.client_secret(secret, "another-job")):
        with pytest.raises((QueryableStateError, EOFError, OSError)):
            _client(address, wrong)
    sock, reader = _client(address, derived)
    try:
        ctx = json.dumps({"name": "counts", "as_of": "epoch", "kind": "value"}).encode()
        direct.send_frame(sock, direct.encode_request(ctx, [b"\x01k"]))
        assert reader.frame() == direct.MOVED  # nothing pinned: fetch the route again
        direct.send_frame(sock, pickle.dumps(("stop",)))  # not a request: never unpickled
        kind, err = direct.decode_answer(reader.frame())
        assert kind == b"E" and err["error"] == "QueryableStateError"
        direct.send_frame(sock, direct.encode_request(b"", []))  # the context repeats
        assert reader.frame() == direct.MOVED
    finally:
        sock.close()
    assert proc.poll() is None  # still serving
