"""The co-scheduled tasks' links and channels over real sockets on loopback (no Spark).

The launch's secret must be proven both ways before anything is unpickled; two tasks
sending to each other must not block each other; an epoch's stage runs only after every
peer ended its upstream stage; a peer that goes away mid-epoch is a typed error.
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

import pytest

from streamstate.errors import ConfigurationError, TaskChannelError
from streamstate.runtime.cosched import links
from streamstate.runtime.cosched.channels import Channels
from streamstate.runtime.cosched.coordinator import TaskCoordinator

SECRET = "s" * 64


def _pair(secret_a: str, secret_b: str) -> tuple[Any, Any]:
    """Connect with ``secret_b`` to a listener expecting ``secret_a``: (accepted, connected)
    or the errors each side raised."""
    listener = links.listen("127.0.0.1")
    address = links.address_of(listener, "127.0.0.1")
    got: dict[str, Any] = {}

    def serve() -> None:
        try:
            got["server"] = links.accept(listener, secret_a)
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            got["server"] = e

    t = threading.Thread(target=serve)
    t.start()
    try:
        client: Any = links.connect(address, secret_b, 5.0)[0]
    except BaseException as e:  # noqa: BLE001 - the test looks at it
        client = e
    t.join(10)
    listener.close()
    return got["server"], client


def test_a_link_carries_messages_once_both_sides_proved_the_secret():
    server, client = _pair(SECRET, SECRET)
    links.send(client, ("hello", 1, [b"x" * 100_000]))
    assert links.recv(server) == ("hello", 1, [b"x" * 100_000])
    server.close()
    client.close()


def test_a_wrong_secret_is_refused_on_both_sides():
    server, client = _pair(SECRET, "t" * 64)
    # the connecting side checks the listener's answer first, fails it and hangs up
    assert isinstance(client, TaskChannelError)
    assert "the listener failed authentication" in str(client)
    assert isinstance(server, TaskChannelError)
    assert "closed the connection during the handshake" in str(server)


def test_a_listener_refuses_a_client_that_cannot_answer_its_nonce():
    """The other direction: a client that knows the listener's role answer only by
    replaying it cannot pass (the roles differ, so the listener's own MAC is no answer)."""
    import secrets as _secrets
    import socket
    from multiprocessing.connection import Connection

    listener = links.listen("127.0.0.1")
    got: dict[str, Any] = {}

    def serve() -> None:
        try:
            got["server"] = links.accept(listener, SECRET)
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            got["server"] = e

    t = threading.Thread(target=serve)
    t.start()
    sock = socket.create_connection(links.split_address(links.address_of(listener, "127.0.0.1")))
    conn = Connection(sock.detach())
    nonce = _secrets.token_bytes(32)
    conn.send_bytes(nonce)
    reply = conn.recv_bytes()
    conn.send_bytes(reply[32:])  # the listener's own answer, replayed as the client's
    t.join(10)
    conn.close()
    listener.close()
    assert isinstance(got["server"], TaskChannelError)
    assert "a connecting peer failed authentication" in str(got["server"])


def _open(count: int) -> list[Channels]:
    """``count`` tasks' channels, opened at once as co-scheduled tasks open them."""
    listeners = [links.listen("127.0.0.1") for _ in range(count)]
    addresses = [links.address_of(sock, "127.0.0.1") for sock in listeners]
    opened: list[Any] = [None] * count

    def open_one(i: int) -> None:
        opened[i] = Channels(i, addresses, listeners[i], SECRET)

    threads = [threading.Thread(target=open_one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(isinstance(c, Channels) for c in opened)
    return opened


def test_payloads_reach_their_task_before_the_end_of_their_stage():
    a, b, c = _open(3)
    try:
        for ch in (a, b, c):
            ch.begin_epoch(4)
        big = b"p" * 5_000_000  # larger than any socket buffer: both send at once
        done = threading.Event()

        def a_sends() -> None:
            a.send_payload(1, 7, ("chunk", big))
            a.end_stage(3, {1, 2})
            done.set()

        t = threading.Thread(target=a_sends)
        t.start()
        b.send_payload(0, 7, ("chunk", big))  # b to a while a sends to b: neither blocks
        b.end_stage(3, {0, 2})
        t.join(30)
        assert done.is_set()
        b.wait_for(3, {0})
        assert b.payloads[7] == [("chunk", big)]
        a.wait_for(3, {1})
        assert a.payloads[7] == [("chunk", big)]
        c.wait_for(3, {0, 1})
        assert c.payloads == {}
    finally:
        for ch in (a, b, c):
            ch.close()


def test_a_peer_closing_mid_epoch_is_a_task_channel_error():
    a, b = _open(2)
    try:
        a.begin_epoch(1)
        b.close()
        with pytest.raises(TaskChannelError, match="from task 1 to task 0 closed in epoch 1"):
            a.wait_for(2, {1})
    finally:
        a.close()


def test_a_frame_of_another_epoch_is_refused():
    a, b = _open(2)
    try:
        a.begin_epoch(5)
        b.begin_epoch(4)
        b.end_stage(0, {0})
        with pytest.raises(TaskChannelError, match="frame of epoch 4"):
            a.wait_for(0, {1})
    finally:
        a.close()
        b.close()


def test_a_task_of_another_version_is_refused_by_the_coordinator():
    coordinator = TaskCoordinator("127.0.0.1", "127.0.0.1", 1, SECRET)
    errors: list[BaseException] = []

    def task() -> None:
        conn, _ = links.connect(coordinator.address, SECRET, 5.0)
        conn.send_bytes(pickle.dumps(("hello", links.COSCHED_VERSION + 1, 0, "x:1", "w")))
        conn.close()

    t = threading.Thread(target=task)
    t.start()
    try:
        coordinator.await_tasks(lambda: None, 10.0)
    except BaseException as e:  # noqa: BLE001 - the test looks at it
        errors.append(e)
    t.join(10)
    coordinator.close()
    assert isinstance(errors[0], ConfigurationError)
    assert "another streamstate than the driver" in str(errors[0])


@pytest.mark.parametrize(
    ("master", "slots"),
    [
        ("local", 1),
        ("local[2]", 2),
        ("local[*]", 8),
        ("local[3,2]", 3),
        ("local-cluster[2, 1, 1024]", 2),
        ("spark://master:7077", None),
        ("yarn", None),
    ],
)
def test_the_task_slots_of_a_local_master(master, slots):
    from streamstate.spark.barrier_runner import task_slots

    assert task_slots(master, cpus=8) == slots
