"""The query server: a bounded TCP server answering queryable-state lookups of this process's jobs.

One server per process and bind address (Flink's queryable-state proxy), shared by the
jobs attached to it (:meth:`QueryServer.register`, done by the control plane with the job's
bearer token). Bounds: at most ``max_connections`` connections are served at once (one
thread each; more are refused with :class:`~streamstate.errors.ServerBusyError`), an idle
or stalled connection is closed after ``idle_timeout`` seconds, a frame is at most
:data:`~streamstate.runtime.queryable.wire.MAX_FRAME` bytes and a request at most
:data:`MAX_KEYS` keys. Every request carries the job's token (compared in constant time)
before anything in it is decoded.

Lookups run on the connection's thread against the job's
:class:`~streamstate.runtime.queryable.service.QueryableStateService`; they never take a
lock the driver loop holds (publishing a snapshot swaps one reference).
"""

from __future__ import annotations

import hmac
import logging
import socket
import threading
import time
from typing import Any

from streamstate.errors import (
    QueryableStateError,
    ServerBusyError,
    StreamStateError,
    UnknownJobError,
)
from streamstate.runtime.queryable import wire
from streamstate.runtime.queryable.process import PROCESS
from streamstate.runtime.queryable.service import check_direct_key_type, service_of
from streamstate.runtime.queryable.service import route as direct_route
from streamstate.runtime.serializers.base import dumps_portable

__all__ = ["MAX_KEYS", "QueryServer"]

log = logging.getLogger("streamstate")

#: keys per request at most
MAX_KEYS = 100_000


def error_header(e: BaseException) -> dict[str, Any]:
    return {"ok": False, "error": type(e).__name__, "message": str(e)}


class QueryServer:
    """See the module docstring."""

    def __init__(
        self,
        bind_address: str = "127.0.0.1",
        port: int = 0,
        max_connections: int = 16,
        idle_timeout: float = 60.0,
    ) -> None:
        self.bind_address = bind_address
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}
        self._slots = threading.BoundedSemaphore(max_connections)
        family = socket.AF_INET6 if ":" in bind_address else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((bind_address, port))
        self._sock.listen(128)
        self.host, self.port = self._sock.getsockname()[:2]
        self._closed = False
        self._thread = threading.Thread(
            target=self._accept_loop, name=f"streamstate-query-{self.port}", daemon=True
        )
        self._thread.start()

    @classmethod
    def for_address(cls, bind_address: str, port: int, max_connections: int = 16) -> QueryServer:
        """The process's server for this bind address (and explicit port), started once."""
        key = (bind_address, port)
        with PROCESS.lock:
            server = PROCESS.servers.get(key)
            if server is None or server._closed:
                server = PROCESS.servers[key] = QueryServer(bind_address, port, max_connections)
            return server

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def register(self, job_id: str, token: str) -> None:
        with self._lock:
            self._tokens[job_id] = token

    def unregister(self, job_id: str) -> None:
        with self._lock:
            self._tokens.pop(job_id, None)

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass
        with PROCESS.lock:
            for k, v in list(PROCESS.servers.items()):
                if v is self:
                    del PROCESS.servers[k]

    # -- serving ---------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            if not self._slots.acquire(blocking=False):
                self._refuse(conn)
                continue
            threading.Thread(
                target=self._serve, args=(conn,), name="streamstate-query-conn", daemon=True
            ).start()

    def _refuse(self, conn: socket.socket) -> None:
        busy = ServerBusyError(
            f"the query server at {self.address} serves {self.max_connections} connections "
            f"already (queryable-state.proxy.query-threads); retry, or reuse one client"
        )
        try:
            conn.settimeout(1.0)
            wire.send_frame(conn, wire.encode(error_header(busy)))
        except OSError:
            pass
        finally:
            conn.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(self.idle_timeout)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            session: dict[str, Any] = {}  # the connection's last request context
            while not self._closed:
                try:
                    payload = wire.recv_frame(conn)
                except (OSError, ConnectionError, wire.FrameError):
                    return  # closed, idle past the time-out, or garbage: drop the connection
                t0 = time.thread_time()
                wire.send_frame(conn, self.handle(payload, session))
                ctx = session.get("ctx")
                if ctx is not None:  # the CPU this request cost the driver (a job metric)
                    ctx[0].account("queryable_server_cpu_us", time.thread_time() - t0)
        except OSError:
            return
        finally:
            self._slots.release()
            conn.close()

    def handle(self, payload: bytes, session: dict[str, Any] | None = None) -> bytes:
        """One request -> one response (errors travel as typed error headers).

        ``session``: the connection's state. A request whose header is empty repeats the
        previous request's header on the connection (job, token, name, key type, as_of),
        which was checked then: a client looking up key after key sends only the keys."""
        session = {} if session is None else session
        try:
            header, blobs = wire.decode(payload)
            if not header:
                ctx = session.get("ctx")
                if ctx is None:
                    raise QueryableStateError("an empty header, but no earlier request to repeat")
                return self._lookup(ctx, blobs)
            session.pop("ctx", None)
            ctx = self._context(header, len(blobs))
            if header.get("op") == "route":  # where the keys' query hosts are (direct.py)
                service, resolved, name, key_type, as_of, kind = ctx
                route = direct_route(service, name, as_of, kind, resolved)
                if any(route["hosts"]):  # a query host would decode the client's bytes
                    check_direct_key_type(resolved[0], key_type)
                return wire.encode({"ok": True, "route": route})
            session["ctx"] = ctx
            return self._lookup(ctx, blobs)
        except wire.FrameError as e:
            return wire.encode(error_header(QueryableStateError(str(e))))
        except StreamStateError as e:
            return wire.encode(error_header(e))
        except Exception as e:  # a bug must reach the client as an error, not kill the thread
            log.exception("queryable state: a request failed")
            return wire.encode(error_header(QueryableStateError(f"{type(e).__name__}: {e}")))

    def _context(self, header: dict[str, Any], n_keys: int) -> tuple[Any, ...]:
        """Check a request's header: ``(service, resolved state, name, as_of, kind)``."""
        if header.get("v") != wire.WIRE_VERSION:
            raise QueryableStateError(
                f"the client speaks wire version {header.get('v')!r}, this server "
                f"{wire.WIRE_VERSION}: use the same streamstate version on both sides"
            )
        job_id = str(header.get("job", ""))
        with self._lock:
            wanted = self._tokens.get(job_id)
        service = service_of(job_id) if wanted is not None else None
        if wanted is None or service is None:
            raise UnknownJobError(
                f"job {job_id!r} is not running in the process of the query server at "
                f"{self.address} (`streamstate list` shows the running jobs and their "
                f"addresses)"
            )
        given = str(header.get("token") or "")
        if not hmac.compare_digest(given.encode(), wanted.encode()):
            raise QueryableStateError(
                f"the token given for job {job_id} is not its token (the job's registry file "
                f"has it; QueryableStateClient reads it when no token is given)"
            )
        name = str(header.get("name", ""))
        resolved = service.resolve(name)
        key_type = header.get("key_type")
        service.decode_keys(resolved[0], key_type, [])  # checks the key type once
        return (
            service,
            resolved,
            name,
            key_type,
            str(header.get("as_of", "epoch")),
            header.get("kind"),
        )

    def _lookup(self, ctx: tuple[Any, ...], blobs: list[bytes]) -> bytes:
        service, resolved, name, key_type, as_of, kind = ctx
        if len(blobs) > MAX_KEYS:
            raise QueryableStateError(f"{len(blobs)} keys in one request; at most {MAX_KEYS}")
        keys = service.decode_keys(resolved[0], key_type, blobs)
        answer = service.lookup(name, keys, as_of=as_of, kind=kind, resolved=resolved)
        return wire.encode(
            {
                "ok": True,
                "as_of": answer.as_of,
                "epoch": answer.epoch,
                "attempt": answer.attempt,
                "checkpoint_id": answer.checkpoint_id,
            },
            [dumps_portable(answer.values)],
        )
