"""Mutual authentication of a connection between two processes of one job.

Both sides know a secret the driver made and handed over through Spark (a task's closure, a
host's start). Before either side unpickles anything the other sends, each proves it knows
the secret: it answers the other side's random nonce with an HMAC-SHA256 of it, keyed by the
secret and prefixed with its own role, so an answer cannot be replayed in the other role.
Used by the query hosts (``runtime/queryable/``) and the co-scheduled tasks'
channels (``runtime/cosched/``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from multiprocessing.connection import Connection

__all__ = ["handshake", "mac"]

_NONCE_BYTES = 32


def mac(secret: str, role: bytes, nonce: bytes) -> bytes:
    """The answer of the side in ``role`` to the nonce ``nonce``."""
    return hmac.new(secret.encode(), role + nonce, hashlib.sha256).digest()


def _recv(conn: Connection, timeout: float, failure: type[Exception]) -> bytes:
    try:
        if not conn.poll(timeout):
            raise failure("the peer did not answer the handshake in time")
        return conn.recv_bytes(256)
    except (EOFError, OSError) as e:
        # the other side refused us (it closes on a wrong answer) or went away
        raise failure(f"the peer closed the connection during the handshake ({e!r})") from e


def handshake(
    conn: Connection,
    secret: str,
    server: bool,
    *,
    timeout: float,
    failure: type[Exception],
    server_role: bytes,
    client_role: bytes,
) -> None:
    """Both sides of ``conn`` prove they know ``secret``; raises ``failure`` (naming which
    side failed) when the other side does not, or does not answer within ``timeout`` s.
    ``server`` is the accepting side; the connecting side speaks first."""
    if server:
        theirs = _recv(conn, timeout, failure)
        mine = secrets.token_bytes(_NONCE_BYTES)
        conn.send_bytes(mine + mac(secret, server_role, theirs))
        if not hmac.compare_digest(_recv(conn, timeout, failure), mac(secret, client_role, mine)):
            raise failure(f"a connecting {client_role.decode()} failed authentication")
    else:
        mine = secrets.token_bytes(_NONCE_BYTES)
        conn.send_bytes(mine)
        reply = _recv(conn, timeout, failure)
        if not hmac.compare_digest(reply[_NONCE_BYTES:], mac(secret, server_role, mine)):
            raise failure(f"the {server_role.decode()} failed authentication")
        conn.send_bytes(mac(secret, client_role, reply[:_NONCE_BYTES]))
