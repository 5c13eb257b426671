"""The query server's wire format (format version :data:`WIRE_VERSION`).

Every message is a frame: a 4-byte big-endian length, then the payload. A payload is a
4-byte big-endian header length, a UTF-8 JSON header, then blobs, each a 4-byte length and
its bytes. A request's blobs are its keys, serialized with the serializer of the request's
key type (its snapshot is in the header); a response's single blob is the pickled list of
values (the client trusts its server, as for any pickle-based RPC; the server never
unpickles what a client sends: keys decode only after the job's token checked out, with a
key type that is not pickle-based, see ``QueryableStateService.decode_keys``).
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Sequence
from typing import Any

__all__ = [
    "MAX_FRAME",
    "WIRE_VERSION",
    "decode",
    "encode",
    "recv_frame",
    "send_frame",
]

WIRE_VERSION = 1
#: the largest frame either side accepts (a request of many keys, an answer of many values)
MAX_FRAME = 64 * 1024 * 1024

_LEN = struct.Struct(">I")


class FrameError(ValueError):
    """A frame that is too large, truncated or not in this format."""


def encode(header: dict[str, Any], blobs: Sequence[bytes] = ()) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    parts = [_LEN.pack(len(head)), head]
    for b in blobs:
        parts.append(_LEN.pack(len(b)))
        parts.append(b)
    return b"".join(parts)


def decode(payload: bytes) -> tuple[dict[str, Any], list[bytes]]:
    view = memoryview(payload)
    try:
        (n,) = _LEN.unpack_from(view, 0)
        header = json.loads(bytes(view[4 : 4 + n]))
        pos = 4 + n
        blobs = []
        while pos < len(view):
            (m,) = _LEN.unpack_from(view, pos)
            pos += 4
            if pos + m > len(view):
                raise FrameError("a blob runs past the end of the frame")
            blobs.append(bytes(view[pos : pos + m]))
            pos += m
    except (struct.error, ValueError) as e:
        raise FrameError(f"not a queryable-state message: {e}") from e
    if not isinstance(header, dict):
        raise FrameError("the message header is not a JSON object")
    return header, blobs


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_LEN.pack(len(payload)) + payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket, max_bytes: int = MAX_FRAME) -> bytes:
    (n,) = _LEN.unpack(_recv_exact(sock, 4))
    if n > max_bytes:
        raise FrameError(f"a frame of {n} bytes exceeds the limit of {max_bytes}")
    return _recv_exact(sock, n)
