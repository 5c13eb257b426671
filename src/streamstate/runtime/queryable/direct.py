"""Direct lookups: clients ask the query host that holds a key's state, with no driver hop.

A client authenticates to the driver's query server with the job's token and fetches a
**route** (:meth:`~streamstate.runtime.queryable.service.QueryableStateService.route`):
the state's operator (uid, parallelism, max parallelism) and, per subtask, the address of
the query host holding its state with a *client secret* derived from that host's secret
(:func:`client_secret`; HMAC, so the secret that lets the driver send pickles to the host
never leaves the driver). The client computes a key's key group (murmur3 of the serialized
key, as the job does) and sends the key to its subtask's host.

The host answers from its **pin** (:class:`Pin`): the snapshot (epoch or checkpoint) the
driver last published to it, with that snapshot's lineages of the subtasks it holds. Every
key of one request is read at the lineages of that one pin, so a request to one host is
one consistent cut; a batch spread over several hosts is checked by the client (every
part must name the same cut, else it is asked again through the driver, which pins one
snapshot for all). A key whose subtask the pin does not place on this host (the job
rescaled or restarted, the host was replaced), a name the pin does not know, or no pin
at all is answered :data:`MOVED`: the client fetches the route again.

Wire (both directions): frames of a 4-byte big-endian signed length and the payload (the
framing of ``multiprocessing.connection``, which the driver's connections use). A client
opens with ``CLIENT_MAGIC + nonce``; the host proves the client secret (HMAC of the nonce),
the client proves it back, and only then is anything decoded; nothing a client sends is
ever unpickled (keys of the default encoding decode with ``deserialize_untrusted``, a
pickle-based key serializer is refused). A request is ``b"Q"``, a 2-byte context length, the
context (JSON ``{"name", "as_of", "kind"}``; empty: the connection's previous one) and the
keys, each a 4-byte length and the key serialized with the job's key serializer. Replies:
``b"O"`` + cut + the pickled values, ``b"E"`` + a JSON error (a typed error of
:mod:`streamstate.errors`), :data:`MOVED`, :data:`STALE` (a copy moved past the pin: ask
again) or :data:`GONE` (the pin's files were superseded: ask again).
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import socket
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamstate.errors import QueryableStateError, StreamStateError, WrongKeyTypeError
from streamstate.runtime.keygroups import compute_key_group_for_serialized_key
from streamstate.runtime.mutual_auth import mac
from streamstate.runtime.queryable.serving import QueryableOperator, ServingCache, StaleSnapshot
from streamstate.runtime.serializers.base import dumps_portable
from streamstate.runtime.serializers.key import deserialize_untrusted

__all__ = [
    "BUSY",
    "CLIENT_MAGIC",
    "GONE",
    "MOVED",
    "STALE",
    "FrameReader",
    "Pin",
    "answer_request",
    "client_secret",
    "decode_answer",
    "encode_frame",
    "encode_request",
    "send_frame",
]

log = logging.getLogger("streamstate")

#: a client's first message starts with this (a driver's is a bare 32-byte nonce)
CLIENT_MAGIC = b"SSQC"
#: what a host sends instead of its handshake when it serves too many connections
BUSY = b"BUSY"
MOVED = b"M"
STALE = b"S"
GONE = b"G"
#: keys per request at most (as the driver's query server)
MAX_KEYS = 100_000
#: the largest frame a client may send or receive
MAX_FRAME = 64 * 1024 * 1024
AS_OF_CODES = ("epoch", "checkpoint")

_LEN = struct.Struct(">i")
_BIG = struct.Struct(">Q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
#: b"O", as_of code, epoch, attempt, checkpoint id (-1: none)
_CUT = struct.Struct(">cBqqq")


def client_secret(secret: str, job_id: str) -> str:
    """What a client proves to a query host: derived from the host's secret (the driver
    derives it for the clients it routes; they cannot derive the host's secret back)."""
    return hmac.new(secret.encode(), b"direct-client|" + job_id.encode(), "sha256").hexdigest()


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_LEN.pack(len(payload)) + payload)


class FrameReader:
    """Frames from a socket, read in chunks (usually one ``recv`` per frame)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self, n: int) -> None:
        while len(self.buf) < n:
            chunk = self.sock.recv(max(n - len(self.buf), 65536))
            if not chunk:
                raise EOFError("the peer closed the connection")
            self.buf += chunk

    def frame(self, limit: int | None = MAX_FRAME) -> bytes:
        self._fill(4)
        (n,) = _LEN.unpack_from(self.buf)
        head = 4
        if n == -1:  # multiprocessing.connection's header of a frame over 2 GiB
            self._fill(12)
            (n,) = _BIG.unpack_from(self.buf, 4)
            head = 12
        if n < 0 or (limit is not None and n > limit):
            raise QueryableStateError(f"a frame of {n} bytes exceeds the limit of {limit}")
        if len(self.buf) >= head + n:
            out, self.buf = self.buf[head : head + n], self.buf[head + n :]
            return out
        big = bytearray(self.buf[head:])
        self.buf = b""
        while len(big) < n:
            chunk = self.sock.recv(min(n - len(big), 1 << 20))
            if not chunk:
                raise EOFError("the peer closed the connection")
            big += chunk
        return bytes(big)


def client_handshake(sock: socket.socket, reader: FrameReader, secret: str) -> None:
    """The client side: prove ``secret`` to the host and check that it knows it too."""
    from streamstate.errors import ServerBusyError

    mine = secrets.token_bytes(32)
    send_frame(sock, CLIENT_MAGIC + mine)
    reply = reader.frame(256)
    if reply == BUSY:
        raise ServerBusyError(
            "the query host serves its maximum of connections already; retry, or reuse one client"
        )
    if len(reply) != 64 or not hmac.compare_digest(reply[32:], mac(secret, b"host", mine)):
        raise QueryableStateError("the query host failed authentication")
    send_frame(sock, mac(secret, b"client", reply[:32]))


def host_handshake(sock: socket.socket, reader: FrameReader, secret: str, first: bytes) -> None:
    """The host side, ``first`` being the client's opening (magic + nonce)."""
    mine = secrets.token_bytes(32)
    send_frame(sock, mine + mac(secret, b"host", first[len(CLIENT_MAGIC) :]))
    if not hmac.compare_digest(reader.frame(256), mac(secret, b"client", mine)):
        raise QueryableStateError("a direct query client failed authentication")


def encode_request(context: bytes, blobs: Sequence[bytes]) -> bytes:
    parts = [b"Q", _U16.pack(len(context)), context, _U32.pack(len(blobs))]
    for b in blobs:
        parts.append(_U32.pack(len(b)))
        parts.append(b)
    return b"".join(parts)


_ONE_HEAD = struct.Struct(">icH")
_ONE_KEY = struct.Struct(">II")


def encode_frame(context: bytes, blobs: Sequence[bytes]) -> bytes:
    """A whole request frame (length prefix included; a single key packed in one go)."""
    if len(blobs) == 1:
        b = blobs[0]
        head = _ONE_HEAD.pack(11 + len(context) + len(b), b"Q", len(context))
        return head + context + _ONE_KEY.pack(1, len(b)) + b
    payload = encode_request(context, blobs)
    return _LEN.pack(len(payload)) + payload


def _decode_request(payload: bytes) -> tuple[bytes, list[bytes]]:
    try:
        if payload[:1] != b"Q":
            raise ValueError("not a request")
        (n,) = _U16.unpack_from(payload, 1)
        context = payload[3 : 3 + n]
        pos = 3 + n
        (count,) = _U32.unpack_from(payload, pos)
        pos += 4
        if count > MAX_KEYS:
            raise QueryableStateError(f"{count} keys in one request; at most {MAX_KEYS}")
        blobs = []
        for _ in range(count):
            (m,) = _U32.unpack_from(payload, pos)
            pos += 4
            if pos + m > len(payload):
                raise ValueError("a key runs past the end of the frame")
            blobs.append(payload[pos : pos + m])
            pos += m
    except (struct.error, ValueError) as e:
        raise QueryableStateError(f"not a direct queryable-state request: {e}") from e
    return context, blobs


def error_reply(e: BaseException) -> bytes:
    return b"E" + json.dumps({"error": type(e).__name__, "message": str(e)}).encode()


def decode_answer(payload: bytes) -> tuple[bytes, Any]:
    """``(kind, detail)``: ``(b"O", (as_of, epoch, attempt, checkpoint id, values blob))``,
    ``(b"E", error header)`` or ``(MOVED | STALE | GONE, None)``."""
    kind = payload[:1]
    if kind == b"O":
        _, code, epoch, attempt, cp = _CUT.unpack_from(payload)
        cut = (AS_OF_CODES[code], epoch, attempt, None if cp < 0 else cp)
        return kind, (*cut, payload[_CUT.size :])
    if kind == b"E":
        return kind, json.loads(payload[1:])
    return kind, None


@dataclass(frozen=True)
class Pin:
    """What a query host answers direct lookups from: one published snapshot (as the
    driver pinned it for this host), restricted to the subtasks whose state it holds."""

    as_of: str
    epoch: int
    attempt: int
    checkpoint_id: int | None
    max_entries: int
    #: queryable name -> (operator uid, state name, kind, the job's type infos or None)
    states: Mapping[str, tuple[str, str, str, Any]]
    operators: Mapping[str, QueryableOperator]
    #: (operator uid, subtask) -> lineage, for the subtasks of this host only
    lineages: Mapping[tuple[str, int], Any]


def _decoder(op: QueryableOperator) -> Callable[[bytes], Any]:
    ser = op.key_serializer
    if ser.name == "default_key":
        return deserialize_untrusted
    if '"pickle"' in json.dumps(ser.snapshot_configuration().to_dict()):
        raise WrongKeyTypeError(
            "keys of a pickled type cannot be looked up remotely (nothing a client sends is "
            "unpickled): key the job by a declared key type"
        )
    return ser.deserialize


@dataclass(frozen=True)
class _Plan:
    """What answering a connection's requests needs, made once per pin and context."""

    pin: Pin
    uid: str
    op: QueryableOperator
    decode: Callable[[bytes], Any]
    serialize: Callable[[Any], bytes]
    cache: ServingCache
    state: tuple[str, str, Any]
    head: bytes


def _plan(pin: Pin, name: str, want: str | None, cache_of: Any) -> _Plan | None:
    reg = pin.states.get(name)
    if reg is None:
        return None  # the driver knows the name, or names the error
    uid, state_name, kind, type_infos = reg
    if want is not None and want != kind:
        raise WrongKeyTypeError(
            f"queryable state {name!r} is {kind} state, but the request's descriptor is "
            f"for {want} state; query it with a {kind} state descriptor"
        )
    op = pin.operators.get(uid)
    if op is None:
        return None
    head = _CUT.pack(
        b"O",
        AS_OF_CODES.index(pin.as_of),
        pin.epoch,
        pin.attempt,
        -1 if pin.checkpoint_id is None else pin.checkpoint_id,
    )
    cache = cache_of(pin.as_of, pin.max_entries)
    state = (state_name, kind, type_infos)
    return _Plan(pin, uid, op, _decoder(op), op.key_serializer.serialize, cache, state, head)


def answer_request(
    pins: Mapping[str, Pin],
    cache_of: Callable[[str, int], ServingCache],
    session: dict[str, Any],
    payload: bytes,
) -> bytes:
    """One direct request -> its reply (see the module docstring). ``session``: the
    connection's previous context and the plan made for it."""
    try:
        context, blobs = _decode_request(payload)
        if context:
            ctx = json.loads(context)
            if not isinstance(ctx, dict):
                raise QueryableStateError("the request's context is not a JSON object")
            session["ctx"] = (
                str(ctx.get("as_of", "epoch")),
                str(ctx.get("name", "")),
                ctx.get("kind"),
            )
            session["plan"] = None
        ctx = session.get("ctx")
        if ctx is None:
            raise QueryableStateError("an empty context, but no earlier request to repeat")
        pin = pins.get(ctx[0])
        if pin is None:
            return MOVED
        plan: _Plan | None = session.get("plan")
        if plan is None or plan.pin is not pin:  # a new pin: once per epoch and connection
            plan = session["plan"] = _plan(pin, ctx[1], ctx[2], cache_of)
            if plan is None:
                return MOVED
        op, lineages, uid, decode, serialize = (
            plan.op,
            pin.lineages,
            plan.uid,
            plan.decode,
            plan.serialize,
        )
        maxp, par = op.max_parallelism, op.parallelism
        read, state = plan.cache.read_lineage, plan.state
        values = []
        for blob in blobs:
            kg = compute_key_group_for_serialized_key(blob, maxp)
            lin = lineages.get((uid, kg * par // maxp))
            if lin is None:
                return MOVED  # not this host's subtask (any more): route again
            try:
                key = decode(blob)
                canonical = serialize(key) == blob
            except Exception as e:  # any decoding failure is a bad key from the client
                raise WrongKeyTypeError(f"a key of the request cannot be decoded: {e}") from e
            if not canonical:
                raise WrongKeyTypeError(
                    "a key of the request is not serialized as the job serializes its keys: "
                    "pass the job's key type"
                )
            values.append(read(lin, op, state, key, kg, blob))
        return plan.head + dumps_portable(values)
    except StaleSnapshot:
        return STALE
    except OSError:  # the pin's files were superseded meanwhile
        return GONE
    except StreamStateError as e:
        return error_reply(e)
    except ValueError as e:  # a context that is not JSON
        return error_reply(QueryableStateError(f"not a direct queryable-state request: {e}"))
    except Exception as e:  # a bug reaches the client as an error, not a dead connection
        log.exception("queryable state: a direct lookup failed")
        return error_reply(QueryableStateError(f"{type(e).__name__}: {e}"))
