"""The client's direct path: lookups sent straight to the query hosts holding the keys.

:class:`DirectRoutes` keeps, per (job, state name, as_of, kind, key type), the **route** the
driver's query server handed out after checking the token, the name, the kind and the key
type (``runtime/queryable/direct.py`` describes the protocol): the operator's parallelism
and max parallelism and, per subtask, its query host's address and client secret. A key's
key group is murmur3 of its serialized form (the job's rule), its subtask follows, and so
does its host. One authenticated connection per host is kept and reused.

Invalidation: a host that cannot be reached (gone, restarted with another port or secret,
executor lost; its keys then go through the driver for :data:`DOWN_FOR_S`, so a host
this client cannot reach at all, e.g. behind a firewall, costs one connect time-out of
:data:`CONNECT_TIMEOUT_S` per period), one that answers ``moved`` (the job rescaled or restarted, the name is new)
or a route naming no host for some subtask (driver-served, or no epoch since a restart:
fetched again after :data:`PARTIAL_ROUTE_TTL_S`, or as soon as the driver answered a
request of it from a newer cut than the route's: :meth:`DirectRoutes.seen`) -> the route is
fetched again and the request retried; after :data:`ATTEMPTS` tries, or when the parts of a batch answered by
several hosts name different cuts, the request goes through the driver, which pins one
snapshot for every key (:meth:`DirectRoutes.lookup` returns None). Typed errors a host
names are raised as they are.
"""

from __future__ import annotations

import json
import pickle
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import streamstate.errors as errors_module
from streamstate.errors import QueryableStateError
from streamstate.runtime.keygroups import compute_key_group_for_serialized_key
from streamstate.runtime.queryable import direct

__all__ = [
    "ATTEMPTS",
    "CONNECT_TIMEOUT_S",
    "DOWN_FOR_S",
    "PARTIAL_ROUTE_TTL_S",
    "DirectRoutes",
    "error_from_header",
]

#: a request is tried this often directly before it goes through the driver
ATTEMPTS = 3
#: a host this client cannot connect to is not tried again for this long (s)
DOWN_FOR_S = 10.0
#: how long a client waits for a query host to accept its connection (s)
CONNECT_TIMEOUT_S = 2.0
#: a route naming no query host for some subtask is fetched again after this long (s)
PARTIAL_ROUTE_TTL_S = 2.0


@dataclass
class _Route:
    parallelism: int
    max_parallelism: int
    #: per subtask: (address, client secret), or None (the driver serves it)
    hosts: list[tuple[str, str] | None]
    fetched: float
    complete: bool
    #: the request context a host keeps per connection (sent when it changes)
    context: bytes
    #: (attempt, epoch) of the snapshot the driver pinned when it made the route
    cut: tuple[int, int]


class _HostConn:
    def __init__(self, address: str, secret: str, timeout: float) -> None:
        host, _, port = address.rpartition(":")
        where = (host.strip("[]"), int(port))
        self.sock = socket.create_connection(where, timeout=min(timeout, CONNECT_TIMEOUT_S))
        try:
            self.sock.settimeout(timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.reader = direct.FrameReader(self.sock)
            direct.client_handshake(self.sock, self.reader, secret)
        except BaseException:
            self.sock.close()
            raise
        self.secret = secret
        #: the context the host holds for this connection (sent again only when it changes)
        self.context = b""

    def close(self) -> None:
        self.sock.close()


class _Retry(Exception):
    """Fetch the route again (``moved`` / unreachable) or just try again (stale, gone)."""

    def __init__(self, reroute: bool) -> None:
        self.reroute = reroute


def error_from_header(header: dict[str, Any]) -> Exception:
    """The typed error a server's error header names (``QueryableStateError`` if unknown)."""
    cls = getattr(errors_module, str(header.get("error")), None)
    message = str(header.get("message", "the query failed"))
    if isinstance(cls, type) and issubclass(cls, errors_module.StreamStateError):
        return cls(message)
    return QueryableStateError(f"{header.get('error')}: {message}")


class DirectRoutes:
    """Routes and host connections of one client (not thread-safe: the client serializes)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._routes: dict[tuple[Any, ...], _Route] = {}
        self._conns: dict[str, _HostConn] = {}
        #: hosts whose connection failed lately -> until when their keys go via the driver
        self._down: dict[tuple[str, str], float] = {}
        #: requests answered directly / through the driver (for tests and benchmarks)
        self.direct_requests = 0
        self.driver_requests = 0

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        self._routes.clear()

    def lookup(
        self,
        fetch: Callable[[], dict[str, Any]],
        route_key: tuple[Any, ...],
        blobs: Sequence[bytes],
    ) -> tuple[tuple[str, int, int, int | None], list[Any]] | None:
        """``(cut, values)`` of ``blobs`` read by their query hosts, or None: ask the driver.
        ``route_key``: (job, name, as_of, kind, key type); ``fetch()`` gets the route from
        the driver (raising its typed errors)."""
        for _ in range(ATTEMPTS):
            route = self._routes.get(route_key)
            if route is None or (
                not route.complete and time.monotonic() - route.fetched > PARTIAL_ROUTE_TTL_S
            ):
                route = self._fetch(fetch, route_key)
            by_host = self._split(route, blobs)
            if by_host is None:
                break  # a subtask the driver serves
            if self._down and any(self._is_down(h) for h in by_host):
                # a host this client could not reach lately: the driver serves its keys, and
                # the route is fetched again after a while (the next epoch may name another)
                route.complete = False
                break
            try:
                got = self._ask(by_host, blobs, route.context)
            except _Retry as r:
                if r.reroute:
                    self._routes.pop(route_key, None)
                continue
            self.direct_requests += 1
            return got
        self.driver_requests += 1
        return None

    def _fetch(self, fetch: Callable[[], dict[str, Any]], route_key: tuple[Any, ...]) -> _Route:
        r = fetch()
        hosts = [None if h is None else (str(h[0]), str(h[1])) for h in r["hosts"]]
        _, name, as_of, kind, _ = route_key
        route = _Route(
            int(r["parallelism"]),
            int(r["max_parallelism"]),
            hosts,
            time.monotonic(),
            None not in hosts,
            json.dumps({"name": name, "as_of": as_of, "kind": kind}).encode(),
            (int(r["cut"][0]), int(r["cut"][1])) if r.get("cut") else (-1, -1),
        )
        if len(self._routes) > 256:
            self._routes.clear()
        self._routes[route_key] = route
        return route

    def seen(self, route_key: tuple[Any, ...], attempt: int, epoch: int) -> None:
        """The driver answered a request of ``route_key`` as of ``(attempt, epoch)``: a
        route made at an older cut is dropped (a host lost or new since: the next request
        fetches where the keys are now; a route without hosts is not kept past an epoch)."""
        route = self._routes.get(route_key)
        if route is not None and route.cut < (attempt, epoch):
            del self._routes[route_key]

    @staticmethod
    def _split(route: _Route, blobs: Sequence[bytes]) -> dict[tuple[str, str], list[int]] | None:
        maxp, par, hosts = route.max_parallelism, route.parallelism, route.hosts
        if len(blobs) == 1:  # the common case: one key, one host
            kg = compute_key_group_for_serialized_key(blobs[0], maxp)
            h = hosts[kg * par // maxp]
            return None if h is None else {h: [0]}
        out: dict[tuple[str, str], list[int]] = {}
        for i, b in enumerate(blobs):
            h = hosts[compute_key_group_for_serialized_key(b, maxp) * par // maxp]
            if h is None:
                return None
            out.setdefault(h, []).append(i)
        return out

    def _conn(self, host: tuple[str, str]) -> _HostConn:
        c = self._conns.get(host[0])
        if c is not None and c.secret == host[1]:
            return c
        if c is not None:
            c.close()
            del self._conns[host[0]]
        try:
            c = _HostConn(host[0], host[1], self.timeout)
        except (OSError, EOFError) as e:
            # gone or restarted (the driver knows where it is now), or not reachable from here
            # (a firewall, another network): not tried again for a while
            self._down[host] = time.monotonic() + DOWN_FOR_S
            raise _Retry(True) from e
        except QueryableStateError as e:
            if isinstance(e, errors_module.ServerBusyError):
                raise
            raise _Retry(True) from e  # another secret: another host process listens there
        self._conns[host[0]] = c
        return c

    def _is_down(self, host: tuple[str, str]) -> bool:
        until = self._down.get(host)
        if until is not None and time.monotonic() > until:
            del self._down[host]
            return False
        return until is not None

    def _drop(self, host: tuple[str, str]) -> None:
        c = self._conns.pop(host[0], None)
        if c is not None:
            c.close()

    def _ask_one(
        self, host: tuple[str, str], blobs: Sequence[bytes], context: bytes
    ) -> tuple[tuple[str, int, int, int | None], list[Any]]:
        """Every key on one host (the common case, kept lean): one request, one answer."""
        c = self._conn(host)
        try:
            c.sock.sendall(direct.encode_frame(b"" if c.context is context else context, blobs))
            c.context = context
            kind, detail = direct.decode_answer(c.reader.frame())
        except TimeoutError:
            self._drop(host)
            raise QueryableStateError(
                f"the query host at {host[0]} did not answer within {self.timeout} s"
            ) from None
        except (OSError, EOFError, QueryableStateError) as e:
            self._drop(host)
            raise _Retry(True) from e
        if kind == b"O":
            return detail[:4], pickle.loads(detail[4])  # type: ignore[return-value]  # decode_answer's cut
        if kind == b"E":
            raise error_from_header(detail)
        raise _Retry(kind not in (direct.STALE, direct.GONE))

    def _ask(
        self,
        by_host: dict[tuple[str, str], list[int]],
        blobs: Sequence[bytes],
        context: bytes,
    ) -> tuple[tuple[str, int, int, int | None], list[Any]] | None:
        """Send every host its keys (all requests first, then the answers), merge them."""
        if len(by_host) == 1:
            return self._ask_one(next(iter(by_host)), blobs, context)
        sent = []
        for host, idx in by_host.items():
            c = self._conn(host)
            keys = blobs if len(by_host) == 1 else [blobs[i] for i in idx]
            try:
                direct.send_frame(
                    c.sock, direct.encode_request(b"" if c.context is context else context, keys)
                )
            except OSError as e:
                self._drop(host)
                raise _Retry(True) from e
            c.context = context
            sent.append((host, c, idx))
        cut = None
        values: list[Any] = [None] * len(blobs)
        retry: _Retry | None = None
        error: Exception | None = None
        for host, c, idx in sent:  # every answer is read, so no connection keeps one unread
            try:
                kind, detail = direct.decode_answer(c.reader.frame())
            except TimeoutError:
                for h, _, _ in sent:
                    self._drop(h)
                raise QueryableStateError(
                    f"the query host at {host[0]} did not answer within {self.timeout} s"
                ) from None
            except (OSError, EOFError, QueryableStateError):
                self._drop(host)
                retry = retry or _Retry(True)
                continue
            if kind == b"E":
                error = error or error_from_header(detail)
                continue
            if kind != b"O":
                if kind == direct.MOVED or kind not in (direct.STALE, direct.GONE):
                    retry = _Retry(True)
                retry = retry or _Retry(False)
                continue
            *this_cut, blob = detail
            if cut is not None and tuple(this_cut) != cut:
                retry = retry or _Retry(False)  # two cuts: ask again (or the driver)
            cut = tuple(this_cut)
            got = pickle.loads(blob)  # the host proved the secret the driver handed out
            if len(by_host) == 1:
                values = got
            else:
                for i, v in zip(idx, got, strict=True):
                    values[i] = v
        if error is not None:
            raise error
        if retry is not None:
            raise retry
        assert cut is not None
        return cut, values  # type: ignore[return-value]  # a 4-tuple decoded by decode_answer
