"""Authenticated, framed connections of the co-scheduled tasks (wire version
:data:`COSCHED_VERSION`).

A connection is a :class:`multiprocessing.connection.Connection` over TCP (length-prefixed
frames, any size) on which both sides proved the launch's secret
(:func:`streamstate.runtime.mutual_auth.handshake`) before the first frame is read. A
message is a pickled tuple whose first item names its kind; only frames from a side that
proved the secret are ever unpickled.
"""

from __future__ import annotations

import pickle
import queue
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from streamstate.errors import TaskChannelError
from streamstate.runtime import mutual_auth

__all__ = [
    "COSCHED_VERSION",
    "HANDSHAKE_TIMEOUT_S",
    "StageShape",
    "accept",
    "address_of",
    "connect",
    "listen",
    "recv",
    "send",
    "split_address",
    "start_reader",
]

#: the version of the messages between the coordinator and the tasks, and between tasks
COSCHED_VERSION = 1
#: how long either side waits for the other's handshake (s): tasks start while others do
HANDSHAKE_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class StageShape:
    """What a task needs to know of a stage to route and wait: its parallelism, the stages
    it reads from and the stages reading it."""

    id: int
    parallelism: int
    upstream: tuple[int, ...]
    downstream: tuple[int, ...]


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def address_of(listener: socket.socket, host: str) -> str:
    """``host:port`` of ``listener`` as others reach it (``host`` advertised)."""
    port = listener.getsockname()[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen(host: str) -> socket.socket:
    """A listening socket on ``host``, any free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, 0), family=family, backlog=128)


def _wrap(sock: socket.socket) -> Connection:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)  # Connection reads a blocking descriptor; waits use poll()
    return Connection(sock.detach())


def _authenticate(conn: Connection, secret: str, server: bool) -> Connection:
    try:
        mutual_auth.handshake(
            conn,
            secret,
            server,
            timeout=HANDSHAKE_TIMEOUT_S,
            failure=TaskChannelError,
            server_role=b"listener",
            client_role=b"peer",
        )
    except BaseException:
        conn.close()
        raise
    return conn


def connect(address: str, secret: str, timeout: float) -> tuple[Connection, str]:
    """An authenticated connection to ``address``, and the local address it leaves from
    (the interface this process is reached on by whoever listens there)."""
    try:
        sock = socket.create_connection(split_address(address), timeout=timeout)
    except OSError as e:
        raise TaskChannelError(f"cannot connect to {address}: {e}") from e
    local_host = sock.getsockname()[0]
    return _authenticate(_wrap(sock), secret, server=False), local_host


def accept(listener: socket.socket, secret: str) -> Connection:
    """The next connection on ``listener``, authenticated (``socket.timeout`` when the
    listener has a timeout and nobody connected)."""
    sock, _ = listener.accept()
    return _authenticate(_wrap(sock), secret, server=True)


def send(conn: Connection, message: tuple[Any, ...]) -> None:
    conn.send_bytes(pickle.dumps(message, protocol=5))


def recv(conn: Connection) -> Any:
    """The next message (EOFError when the other side closed)."""
    return pickle.loads(conn.recv_bytes())


def start_reader(
    conn: Connection,
    into: queue.SimpleQueue[tuple[int, Any]],
    source: int,
    name: str,
    decode: Callable[[bytes], Any] | None = None,
) -> None:
    """A daemon thread that puts ``(source, frame)`` on ``into`` for every frame of
    ``conn`` as it arrives (``decode(frame)`` when given), then ``(source, None)`` once
    the connection ends: at EOF, a reset, or a close under the read. Its reads release
    the GIL, so the thread that consumes ``into`` is never blocked by a slow sender."""

    def read() -> None:
        try:
            while True:
                frame = conn.recv_bytes()
                into.put((source, frame if decode is None else decode(frame)))
        except Exception:  # noqa: BLE001 - EOF, a reset, or the connection closed under it
            into.put((source, None))

    threading.Thread(target=read, name=name, daemon=True).start()
