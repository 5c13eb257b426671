"""The driver's side of query hosts: forward a request's keys to where their state is.

:func:`answer` answers the keys of one request from one pinned
:class:`~streamstate.runtime.queryable.serving.ServingSnapshot`: the keys of a subtask
whose state is on a machine with a query host (``snap.hosts``, learned from the acks) go
to that host together with the subtask's lineage in the snapshot (one message per host);
the others, and those of a host that cannot be reached, are read from the driver's own
serving copies as before. Every part is read at the lineages of the same snapshot, so the
answer is one consistent cut whichever process read it; a host whose copy moved past the
snapshot answers ``stale`` and the caller re-pins the whole request
(:class:`~streamstate.runtime.queryable.serving.StaleSnapshot`).

Objects travel once per connection: operators and lineages are sent with a reference
(unique in this driver); the host keeps them by it (so its copies see the same lineage
object again, as the driver's do) and asks for those it no longer has (``need``).
"""

from __future__ import annotations

import itertools
import logging
import pickle
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from streamstate.errors import QueryableStateError, StreamStateError
from streamstate.runtime.queryable.query_host import connect
from streamstate.runtime.queryable.serving import (
    QueryableOperator,
    ServingCache,
    ServingSnapshot,
    StaleSnapshot,
)

__all__ = ["QueryHosts", "answer"]

log = logging.getLogger("streamstate")

#: a host that could not be reached is not tried again for this long (s)
DOWN_FOR_S = 5.0
#: how long the driver waits for a host's answer before serving the keys itself (s)
ANSWER_TIMEOUT_S = 30.0
#: how long the driver's refresher waits for a host to bring its copies forward (s); a
#: slow refresh only drops that connection, it does not make the driver serve the keys
REFRESH_TIMEOUT_S = 600.0
CONNECT_TIMEOUT_S = 2.0
#: objects whose reference the driver remembers
REFS = 4096
#: query hosts pinned at once (a cluster's executor machines; more wait for a thread)
PIN_THREADS = 8


class HostUnreachable(Exception):
    """The query host cannot be reached (gone, executor lost, restarting): serve locally."""


class _Conn:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        #: references whose object was sent on this connection
        self.sent: set[str] = set()


class QueryHosts:
    """The driver's connections to one job's query hosts (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[str, list[_Conn]] = {}
        self._down: dict[str, float] = {}
        self._refs: OrderedDict[int, tuple[Any, str, bytes | None]] = OrderedDict()
        self._prefix = secrets.token_hex(4)
        #: hosts that answered lookups (their copies are kept fresh after each publish)
        self.served: set[tuple[str, str]] = set()
        #: as_of -> host -> the snapshot it was last pinned to (direct lookups, direct.py)
        self._pinned: dict[str, dict[tuple[str, str], ServingSnapshot]] = {}
        #: pins are sent one publish at a time, in order (a host keeps the last it got)
        self.pin_lock = threading.Lock()
        #: sends a publish's pins to its hosts at once (made at the first publish to two)
        self._executor: ThreadPoolExecutor | None = None
        self._seq = itertools.count()

    def usable(self, address: str) -> bool:
        with self._lock:
            until = self._down.get(address)
        return until is None or time.monotonic() > until

    def _ref(self, obj: Any) -> tuple[str, bytes]:
        """This driver's reference of ``obj`` and its pickled bytes (both made once)."""
        with self._lock:
            hit = self._refs.get(id(obj))
            if hit is not None and hit[0] is obj and hit[2] is not None:
                self._refs.move_to_end(id(obj))
                return hit[1], hit[2]
        blob = cloudpickle.dumps(obj)
        ref = f"{self._prefix}-{next(self._seq)}"
        with self._lock:
            self._refs[id(obj)] = (obj, ref, blob)
            while len(self._refs) > REFS:
                self._refs.popitem(last=False)
        return ref, blob

    def _take(self, address: str, secret: str) -> _Conn:
        with self._lock:
            idle = self._idle.get(address)
            if idle:
                return idle.pop()
        try:
            return _Conn(connect(address, secret, CONNECT_TIMEOUT_S))
        except (OSError, EOFError, QueryableStateError) as e:
            with self._lock:
                self._down[address] = time.monotonic() + DOWN_FOR_S
            raise HostUnreachable(f"query host {address}: {e}") from e

    def _give_back(self, address: str, c: _Conn) -> None:
        with self._lock:
            self._idle.setdefault(address, []).append(c)

    def lookup(
        self,
        host: tuple[str, str],
        as_of: str,
        state: tuple[str, str, Any],
        max_entries: int,
        groups: Sequence[tuple[QueryableOperator, Any, list[tuple[Any, int]]]],
    ) -> list[list[Any]]:
        """The values of every group ``(operator, lineage, [(key, key group), ...])``,
        read by the query host at ``host`` = (address, secret)."""
        with self._lock:
            self.served.add(host)
        return self._call(host, "lookup", as_of, state, max_entries, groups)  # type: ignore[no-any-return]  # the host's list of value lists

    def refresh(self, snap: ServingSnapshot, max_entries: int) -> None:
        """After a publish: every host that served lookups brings its copies to ``snap``
        (off the lookups' path, as the driver's refresher does with its own copies)."""
        with self._lock:
            served = set(self.served)
        by_host: dict[tuple[str, str], list[Any]] = {}
        for (uid, sub), host in snap.hosts.items():
            lin, op = snap.lineages.get((uid, sub)), snap.operators.get(uid)
            if host in served and lin is not None and op is not None:
                by_host.setdefault(host, []).append((op, lin, sub))
        for host, groups in by_host.items():
            try:
                self._call(
                    host, "refresh", snap.as_of, None, max_entries, groups, REFRESH_TIMEOUT_S
                )
            except (HostUnreachable, StaleSnapshot, OSError):
                pass  # lookups find out and decide

    def pin(
        self,
        as_of: str,
        snap: ServingSnapshot | None,
        states: dict[str, tuple[str, str, str, Any]],
        max_entries: int,
        timeout: float,
    ) -> int:
        """Pin ``snap`` on every query host of its subtasks, for direct lookups (the host
        answers them from its subtasks' lineages in it); hosts pinned before that hold none
        of its subtasks (or every host, when ``snap`` is None) are unpinned. Hosts already at
        ``snap`` are skipped. Returns the direct requests the hosts answered meanwhile.
        Callers hold :attr:`pin_lock`."""
        by_host: dict[tuple[str, str], list[Any]] = {}
        if snap is not None:
            for (uid, sub), host in snap.hosts.items():
                lin, op = snap.lineages.get((uid, sub)), snap.operators.get(uid)
                if lin is not None and op is not None:
                    by_host.setdefault(host, []).append((op, lin, sub))
        pinned = self._pinned.setdefault(as_of, {})
        answered = 0
        for host in [h for h in pinned if h not in by_host]:
            del pinned[host]
            try:
                answered += self._call(host, "pin", as_of, None, max_entries, [], timeout)
            except (HostUnreachable, OSError, StreamStateError):
                pass  # gone: nobody is answered from its pin
        assert snap is not None or not by_host
        todo = [
            (h, g) for h, g in by_host.items() if snap is not None and pinned.get(h) is not snap
        ]
        if not todo:
            return answered
        assert snap is not None
        meta = (snap.epoch, snap.attempt, snap.checkpoint_id, states)

        def one(item: tuple[tuple[str, str], list[Any]]) -> Any:
            try:
                return self._call(item[0], "pin", as_of, meta, max_entries, item[1], timeout)
            except (HostUnreachable, OSError, StreamStateError) as e:
                return e

        # every host at once: the driver loop waits for the slowest host, not for their sum
        got = [one(todo[0])] if len(todo) == 1 else list(self._pool().map(one, todo))
        for (host, _), n in zip(todo, got, strict=True):
            if isinstance(n, BaseException):
                pinned.pop(host, None)  # its clients find it unreachable and route again
                continue
            answered += n
            pinned[host] = snap
            with self._lock:
                self.served.add(host)  # its copies are kept fresh after each publish
        return answered

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    PIN_THREADS, thread_name_prefix="streamstate-query-pin"
                )
            return self._executor

    def is_pinned(self, as_of: str, host: tuple[str, str], snap: ServingSnapshot | None) -> bool:
        """Whether ``host`` took ``snap`` as its pin (routes name only such hosts)."""
        return snap is not None and self._pinned.get(as_of, {}).get(host) is snap

    def _call(
        self,
        host: tuple[str, str],
        kind: str,
        as_of: str,
        state: Any,
        max_entries: int,
        groups: Sequence[tuple[QueryableOperator, Any, Any]],
        timeout: float = ANSWER_TIMEOUT_S,
    ) -> Any:
        address, secret = host
        refs = [(self._ref(op), self._ref(lin), items) for op, lin, items in groups]
        c = self._take(address, secret)
        try:
            for _ in range(2):
                parts = [
                    (
                        o[0],
                        None if o[0] in c.sent else o[1],
                        n[0],
                        None if n[0] in c.sent else n[1],
                        x,
                    )
                    for o, n, x in refs
                ]
                c.conn.send_bytes(pickle.dumps((kind, as_of, state, max_entries, parts)))
                if not c.conn.poll(timeout):
                    raise TimeoutError(f"no answer in {timeout} s")
                reply = pickle.loads(c.conn.recv_bytes())
                c.sent.update(r[0] for o, n, _ in refs for r in (o, n))
                if reply[0] != "need":
                    break
                c.sent.difference_update(reply[1])  # the host evicted them: send again
        except (OSError, EOFError, TimeoutError, pickle.UnpicklingError) as e:
            c.conn.close()
            with self._lock:
                self._down[address] = time.monotonic() + DOWN_FOR_S
                self.served.discard(host)
            raise HostUnreachable(f"query host {address}: {e}") from e
        self._give_back(address, c)
        if reply[0] == "ok":
            return reply[1]
        if reply[0] == "stale":
            raise StaleSnapshot()
        if reply[0] == "gone":
            raise FileNotFoundError(reply[1])
        if reply[0] == "error":
            raise reply[1]
        raise QueryableStateError(f"query host {address} answered {reply[0]!r}")

    def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
            conns = [c for cs in self._idle.values() for c in cs]
            self._idle.clear()
            self._refs.clear()
            self.served.clear()
            self._pinned.clear()
        for c in conns:
            c.conn.close()
        if executor is not None:
            executor.shutdown(wait=False)


def answer(
    hosts: QueryHosts | None,
    snap: ServingSnapshot,
    cache: ServingCache,
    op: QueryableOperator,
    state: tuple[str, str, Any],
    keys: Sequence[Any],
    groups: Sequence[int],
    stats: dict[str, int],
) -> list[Any]:
    """The values of ``keys`` (key groups ``groups``) as of ``snap``: forwarded to the query
    hosts of their subtasks where there are some, read from ``cache`` otherwise."""
    values: list[Any] = [None] * len(keys)
    local: list[int] = []
    remote: dict[tuple[str, str], dict[int, list[int]]] = {}
    for i, kg in enumerate(groups):
        sub = op.subtask_of(kg)
        host = snap.hosts.get((op.uid, sub))
        if (
            hosts is not None
            and host is not None
            and (op.uid, sub) in snap.lineages
            and hosts.usable(host[0])
        ):
            remote.setdefault(host, {}).setdefault(sub, []).append(i)
        else:
            local.append(i)
    for host, subs in remote.items():
        assert hosts is not None
        parts = [
            (op, snap.lineages[(op.uid, sub)], [(keys[i], groups[i]) for i in idx])
            for sub, idx in subs.items()
        ]
        try:
            got = hosts.lookup(host, snap.as_of, state, cache.max_entries, parts)
        except HostUnreachable as e:
            log.info("queryable state: %s; the driver serves its keys", e)
            local.extend(i for idx in subs.values() for i in idx)
            continue
        for idx, vals in zip(subs.values(), got, strict=True):
            for i, v in zip(idx, vals, strict=True):
                values[i] = v
        stats["queryable_lookups_remote"] = stats.get("queryable_lookups_remote", 0) + sum(
            len(idx) for idx in subs.values()
        )
    for i in local:
        values[i] = cache.read(snap, op, state, keys[i], groups[i])
    if local:
        stats["queryable_lookups_driver"] = stats.get("queryable_lookups_driver", 0) + len(local)
    return values
