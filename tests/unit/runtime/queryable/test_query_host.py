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
from streamstate.runtime.host_owner import start_time
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


def _two_hosts(tmp_path):
    """Two real query hosts of job "j": their processes and (address, secret)."""
    procs, hosts = [], []
    for i in range(2):
        path = str(tmp_path / f"q{i}.json")
        procs.append(_start(path, "60"))
        _, address, secret = _read_info(path)
        hosts.append((address, secret))
    return procs, hosts


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
    assert start_time(pid) is None and not os.path.exists(path)


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


def test_a_batch_over_two_query_hosts_is_accepted_only_from_one_cut(tmp_path):
    """Two real query hosts, each holding one subtask of a keyed operator: a batch with keys
    of both is answered directly when both are pinned to the same snapshot, and handed back
    to the driver (None) when their pins name different epochs; a key of a subtask the pin
    does not place on a host is `moved` (the client routes again, then asks the driver)."""
    from streamstate.common import Types
    from streamstate.queryablestate.routing import DirectRoutes
    from streamstate.runtime.keygroups import assign_key_to_parallel_operator
    from streamstate.runtime.protocol import Lineage
    from streamstate.runtime.queryable import direct
    from streamstate.runtime.queryable.forwarding import QueryHosts
    from streamstate.runtime.queryable.serving import QueryableOperator, ServingSnapshot
    from streamstate.runtime.state.format.serializers import serializer_for_type_info

    ser = serializer_for_type_info(Types.LONG())
    op = QueryableOperator("op", "op", 2, 128, ser, "hashmap")
    procs, hosts = _two_hosts(tmp_path)
    drivers = [QueryHosts(), QueryHosts()]  # one per host: their pins move independently
    states = {"counts": ("op", "count", "value", None)}

    def publish(epochs):
        for sub, epoch in enumerate(epochs):  # each host pinned on its own (a publish racing)
            snap = ServingSnapshot(
                "epoch",
                epoch,
                0,
                None,
                {("op", sub): Lineage((0, epoch))},
                {"op": op},
                {("op", sub): hosts[sub]},
            )
            drivers[sub].pin("epoch", snap, states, 8, 60.0)  # a hang, not a speed
            assert drivers[sub].is_pinned("epoch", hosts[sub], snap)

    route = {
        "parallelism": 2,
        "max_parallelism": 128,
        "hosts": [[a, direct.client_secret(s, "j")] for a, s in hosts],
    }
    by_sub = {}
    for k in range(40):
        by_sub.setdefault(assign_key_to_parallel_operator(ser.serialize(k), 128, 2), k)
    blobs = [ser.serialize(by_sub[0]), ser.serialize(by_sub[1])]
    client = DirectRoutes(timeout=30)
    key = ("j", "counts", "epoch", "value", "LONG")
    try:
        publish([5, 5])
        assert client.lookup(lambda: route, key, blobs) == (("epoch", 5, 0, None), [None, None])
        publish([6, 5])  # host 0 already at epoch 6, host 1 not yet
        assert client.lookup(lambda: route, key, blobs) is None  # the driver pins one cut
        assert client.lookup(lambda: route, key, blobs[1:]) == (("epoch", 5, 0, None), [None])
        publish([6, 6])
        assert client.lookup(lambda: route, key, blobs)[0] == ("epoch", 6, 0, None)
        swapped = {**route, "hosts": route["hosts"][::-1]}  # a stale route: keys moved
        client.close()
        assert client.lookup(lambda: swapped, key, blobs[:1]) is None
        assert client.direct_requests == 3 and client.driver_requests == 2
    finally:
        client.close()
        for d in drivers:
            d.close()
        for p in procs:
            p.kill()
            p.wait()


def test_clients_are_bounded_and_leave_room_for_the_driver(host):
    """MAX_CLIENT_CONNECTIONS clients at once; one more gets ServerBusyError, while the
    driver (whose pins must get through) still connects."""
    from streamstate.errors import ServerBusyError
    from streamstate.runtime.queryable import direct
    from streamstate.runtime.queryable.query_host import MAX_CLIENT_CONNECTIONS

    path, _ = host
    _, address, secret = _read_info(path)
    derived = direct.client_secret(secret, "j")
    held = [_client(address, derived)[0] for _ in range(MAX_CLIENT_CONNECTIONS)]
    try:
        with pytest.raises(ServerBusyError):
            _client(address, derived)
        with connect(address, secret, timeout=5) as conn:
            conn.send_bytes(pickle.dumps(("stats",)))
            assert conn.poll(30)
            assert pickle.loads(conn.recv_bytes())[0] == "ok"
    finally:
        for s in held:
            s.close()


def test_a_publish_pins_every_query_host_at_once(tmp_path):
    """Two real query hosts of one job, the first stopped (SIGSTOP: a stalled machine): the
    driver's pin of a new snapshot reaches the second while it still waits for the first,
    so the driver loop waits for the slowest host, not for every host in turn."""
    import signal
    import threading

    from streamstate.common import Types
    from streamstate.queryablestate.routing import DirectRoutes
    from streamstate.runtime.keygroups import assign_key_to_parallel_operator
    from streamstate.runtime.protocol import Lineage
    from streamstate.runtime.queryable import direct
    from streamstate.runtime.queryable.forwarding import QueryHosts
    from streamstate.runtime.queryable.serving import QueryableOperator, ServingSnapshot
    from streamstate.runtime.state.format.serializers import serializer_for_type_info

    ser = serializer_for_type_info(Types.LONG())
    op = QueryableOperator("op", "op", 2, 128, ser, "hashmap")
    procs, hosts = _two_hosts(tmp_path)
    driver = QueryHosts()
    states = {"counts": ("op", "count", "value", None)}

    def snapshot(epoch):
        return ServingSnapshot(
            "epoch",
            epoch,
            0,
            None,
            {("op", sub): Lineage((0, epoch)) for sub in range(2)},
            {"op": op},
            {("op", sub): hosts[sub] for sub in range(2)},  # the stopped host first
        )

    key = next(k for k in range(100) if assign_key_to_parallel_operator(ser.serialize(k), 128, 2))
    route = {
        "parallelism": 2,
        "max_parallelism": 128,
        "hosts": [[a, direct.client_secret(s, "j")] for a, s in hosts],
    }
    client = DirectRoutes(timeout=30)
    rkey = ("j", "counts", "epoch", "value", "LONG")
    try:
        driver.pin("epoch", snapshot(1), states, 8, 60.0)
        assert client.lookup(lambda: route, rkey, [ser.serialize(key)])[0][1] == 1
        os.kill(procs[0].pid, signal.SIGSTOP)
        done, snap2 = threading.Event(), snapshot(2)
        pinning = threading.Thread(
            target=lambda: (driver.pin("epoch", snap2, states, 8, 60.0), done.set())
        )
        pinning.start()
        # sequential pins reach the second host only after the first one's 60 s time-out,
        # i.e. after the pin returned: the second host must answer epoch 2 before that
        while not done.is_set():
            got = client.lookup(lambda: route, rkey, [ser.serialize(key)])
            if got is not None and got[0][1] == 2:
                break
            time.sleep(0.05)
        assert not done.is_set(), "the second host was pinned only after the first"
        os.kill(procs[0].pid, signal.SIGCONT)
        pinning.join(60)
        assert done.is_set()
        assert all(driver.is_pinned("epoch", h, snap2) for h in hosts)
    finally:
        os.kill(procs[0].pid, signal.SIGCONT)
        client.close()
        driver.close()
        for p in procs:
            p.kill()
            p.wait()
