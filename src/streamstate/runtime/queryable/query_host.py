"""Query hosts: queryable state served on the machine where the subtasks' state is.

With ``queryable-state.serve-on-executors`` on and subtask hosts on (Spark), every
executor machine runs one **query host** per job, a process forked from the machine's
zygote (``host_process.py``) by the first subtask host of the job that finishes an epoch
there (:func:`ensure_query_host`). It is not a thread of a subtask host: its lookups and
copy refreshes never compete with an epoch for a subtask host's interpreter lock.

It listens on TCP on the executor's address (loopback when the executor is unknown, i.e.
local mode), says where in a line on its stderr (the executor's log, :func:`listening_line`),
and writes ``{pid, address, secret}`` into ``<host dir>/<job digest>-query.json``
(owner-only directory, written atomically); the subtask hosts put address and secret into
their acks (``QueryableAck.query_host``, ``feature.py``), so the driver learns them like the state versions.
A connection authenticates both ways with the secret (HMAC challenges, see :func:`handshake`)
before anything is unpickled; only the driver, which got the secret over Spark, has it.
Clients connect too, for direct lookups (``direct.py``): they prove a secret the driver
derived from the host's for them, and nothing they send is unpickled; they are answered
from the snapshot the driver pinned on the host (``pin`` requests).

The driver forwards the keys of the subtasks whose state is on the machine together with
the lineage the request's snapshot pinned for each (``forwarding.py``); the host answers
them from its own :class:`~streamstate.runtime.queryable.serving.ServingCache`, built from
those lineages' state-version files on its local disk (heap: per key group, each epoch's
delta applied to the copy; RocksDB: the epoch version's SST files opened by a backend in a
local directory). It never decides which snapshot answers: the driver pins one per request.

The host exits when the job's runner stops it (:func:`stop_query_host`, with the subtask
hosts), or after ``idle_timeout_s`` without a lookup and without an epoch (the subtask hosts
touch its file at every ack), e.g. when the driver died.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import pickle
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from multiprocessing.connection import Connection
from typing import Any

from streamstate.errors import QueryableStateError, StreamStateError
from streamstate.runtime import host_owner, mutual_auth
from streamstate.runtime.host_owner import running, this_owner
from streamstate.runtime.mutual_auth import mac
from streamstate.runtime.queryable import direct
from streamstate.runtime.queryable.direct import (
    CLIENT_MAGIC,
    FrameReader,
    Pin,
    answer_request,
    client_secret,
    host_handshake,
)
from streamstate.runtime.queryable.process import PROCESS
from streamstate.runtime.queryable.serving import ServingCache, ServingSnapshot, StaleSnapshot
from streamstate.runtime.runtime_dir import remove_empty, runtime_dir
from streamstate.runtime.subtask_host import (
    DEFAULT_IDLE_TIMEOUT_S,
    child_env,
    dir_lock,
    existing_host_dir,
    fork_host,
    host_dir,
)

__all__ = [
    "QueryHost",
    "connect",
    "ensure_query_host",
    "handshake",
    "query_host_pid",
    "query_host_stats",
    "stop_query_host",
]

log = logging.getLogger("streamstate")

#: how long either side waits for the other during the handshake (s)
HANDSHAKE_TIMEOUT_S = 5.0
#: objects (operators, lineages) a host keeps by the driver's reference
OBJECT_CACHE = 1024
#: connections a host serves at once
MAX_CONNECTIONS = 64
#: of which clients' (direct lookups) at most: the rest stay free for the driver, whose
#: pins must get through however many clients connect
MAX_CLIENT_CONNECTIONS = 56
#: a client's connection closes after this long without a request (s)
CLIENT_IDLE_TIMEOUT_S = 60.0
#: how long a worker waits for a query host it started to write its address
_START_TIMEOUT_S = 30.0


def _info_name(job_id: str) -> str:
    return hashlib.sha256(job_id.encode()).hexdigest()[:20] + "-query.json"


def _info_path(job_id: str) -> str:
    """Where this application's query host of ``job_id`` on this machine writes its address."""
    return os.path.join(host_dir(), _info_name(job_id))


def _find_info(job_id: str) -> tuple[int, str, str] | None:
    """The address file of a running query host of ``job_id`` on this machine, in any of
    this user's application directories (the driver is not a worker: it has none)."""
    try:
        root = runtime_dir(create=False)
        names = os.listdir(root)
    except OSError:
        return None
    for name in names:
        got = _read_info(os.path.join(root, name, _info_name(job_id)))
        if got is not None and running(got[0]):
            return got
    return None


def query_host_pid(job_id: str) -> int | None:
    """The pid of this machine's query host of ``job_id`` when one runs (benchmarks read
    its CPU time, tests end it)."""
    got = _find_info(job_id)
    return None if got is None else got[0]


def _read_info(path: str) -> tuple[int, str, str] | None:
    try:
        with open(path) as f:
            d = json.load(f)
        return int(d["pid"]), str(d["address"]), str(d["secret"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def bind_address(executor: str | None) -> str:
    """Where a query host listens: the executor's host (``executor_<host>_<id>``), or
    loopback when the executor is unknown (local mode: the driver is on this machine)."""
    if not executor or not executor.startswith("executor_"):
        return "127.0.0.1"
    host = executor[len("executor_") :].rsplit("_", 1)[0]
    return host or "127.0.0.1"


def listening_line(job_id: str, address: str) -> str:
    """The line a query host prints (into its executor's stderr) when it listens: where,
    and who can reach it there (an operator checks a cluster's addresses with it)."""
    host = address.rsplit(":", 1)[0].strip("[]")
    reach = (
        "this machine only (local mode)"
        if host.startswith("127.") or host == "::1"
        else "reachable from other machines; clients need the job's token at its driver"
    )
    return (
        f"streamstate: query host of job {job_id} on {socket.gethostname()}: "
        f"listening on {address} ({reach})"
    )


def ensure_query_host(
    job_id: str, executor: str | None, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
) -> tuple[str, str] | None:
    """``(address, secret)`` of this machine's query host of ``job_id`` (started when
    none runs), or ``None`` when it cannot be started (the driver then serves the state)."""
    try:
        known = PROCESS.query_hosts.get(job_id)
        path = _info_path(job_id)
        if known is None or not running(known[0]):
            known = _start(path, job_id, bind_address(executor), idle_timeout_s)
            PROCESS.query_hosts[job_id] = known
        with contextlib.suppress(OSError):
            os.utime(path)  # an epoch ran: the job is alive (the host's idle watchdog)
        return known[1], known[2]
    except Exception:  # no query host: the driver serves this subtask's state
        log.warning("queryable state: starting the query host failed", exc_info=True)
        PROCESS.query_hosts.pop(job_id, None)
        return None


def _start(path: str, job_id: str, bind: str, idle_timeout_s: float) -> tuple[int, str, str]:
    got = _read_info(path)
    if got is not None and running(got[0]):
        return got
    # the zygote forks one query host per path: subtask hosts asking at once get the same
    pid = fork_host(path, job_id, idle_timeout_s, kind="query", bind=bind)
    proc = None
    if pid is None:
        with dir_lock(os.path.dirname(path)):
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    __name__,
                    path,
                    job_id,
                    bind,
                    str(idle_timeout_s),
                    this_owner().encode(),
                ],
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                env=child_env(),
            )
        pid = proc.pid
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        got = _read_info(path)
        if got is not None and got[0] == pid:
            return got
        alive = proc.poll() is None if proc is not None else running(pid)
        if not alive or time.monotonic() > deadline:
            raise QueryableStateError(f"the query host of job {job_id} did not start")
        time.sleep(0.002)


def query_host_stats(job_id: str) -> dict[str, float] | None:
    """This machine's query host's :meth:`QueryHost.stats` for ``job_id`` (``None`` when
    none answers); benchmarks split its CPU time with it."""
    got = _find_info(job_id)
    if got is None:
        return None
    try:
        with connect(got[1], got[2], timeout=2.0) as conn:
            conn.send_bytes(pickle.dumps(("stats",)))
            if not conn.poll(5.0):
                return None
            reply = pickle.loads(conn.recv_bytes())
    except (OSError, EOFError, QueryableStateError):
        return None
    return reply[1] if reply[0] == "ok" else None


def stop_query_host(job_id: str) -> list[int]:
    """Stop this machine's query host of ``job_id`` (idempotent; with the subtask hosts)."""
    PROCESS.query_hosts.pop(job_id, None)
    directory = existing_host_dir()  # not created: no host ran here, nothing to stop
    if directory is None:
        return [0]
    path = os.path.join(directory, _info_name(job_id))
    got = _read_info(path)
    stopped = 0
    if got is not None:
        try:
            conn = connect(got[1], got[2], timeout=2.0)
            with conn:
                conn.send_bytes(pickle.dumps(("stop",)))
                if conn.poll(2.0):
                    conn.recv_bytes()
            stopped = 1
        except (OSError, EOFError, QueryableStateError):
            pass
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    remove_empty(os.path.dirname(path))  # the application's dir, when it was the last file
    return [stopped]


# ------------------------------------------------------------------------------ the handshake


def handshake(conn: Connection, secret: str, server: bool) -> None:
    """Both sides prove they know ``secret`` (HMAC of the other side's nonce) before
    either unpickles anything the other sends; raises QueryableStateError otherwise."""
    mutual_auth.handshake(
        conn,
        secret,
        server,
        timeout=HANDSHAKE_TIMEOUT_S,
        failure=QueryableStateError,
        server_role=b"host",
        client_role=b"driver",
    )


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def connect(address: str, secret: str, timeout: float) -> Connection:
    """An authenticated connection to the query host at ``address``."""
    sock = socket.create_connection(_split(address), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)  # Connection reads a blocking descriptor; time-outs use poll()
    conn = Connection(sock.detach())
    try:
        handshake(conn, secret, server=False)
    except BaseException:
        conn.close()
        raise
    return conn


# ------------------------------------------------------------------------------ the process


class QueryHost:
    """The query host process (see the module docstring)."""

    def __init__(self, path: str, job_id: str, bind: str, idle_timeout_s: float) -> None:
        self.path, self.job_id, self.idle_timeout_s = path, job_id, idle_timeout_s
        self.secret = secrets.token_hex(32)
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind((bind, 0))
        self.sock.listen(64)
        host, port = self.sock.getsockname()[:2]
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.caches: dict[str, ServingCache] = {}
        self.objects: OrderedDict[str, Any] = OrderedDict()
        #: as_of -> the snapshot direct lookups answer from (set by the driver, ``_pin``)
        self.pins: dict[str, Pin] = {}
        self.client_secret = client_secret(self.secret, job_id)
        #: direct requests answered since the last pin (unsynchronized: a metric)
        self.direct_requests = 0
        #: thread CPU seconds the client connections took (receive, answer, send)
        self.direct_cpu_s = 0.0
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.client_slots = threading.BoundedSemaphore(MAX_CLIENT_CONNECTIONS)
        self.last = time.monotonic()

    def serve(self) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "address": self.address, "secret": self.secret}, f)
        os.replace(tmp, self.path)  # atomic: a reader sees no file or the whole one
        print(listening_line(self.job_id, self.address), file=sys.stderr, flush=True)
        threading.Thread(target=self._watchdog, daemon=True).start()
        while True:
            try:
                sock, _ = self.sock.accept()
            except OSError:
                continue
            if not self.slots.acquire(blocking=False):
                with contextlib.suppress(OSError):  # a client raises ServerBusyError
                    sock.settimeout(1.0)
                    direct.send_frame(sock, direct.BUSY)
                sock.close()
                continue
            threading.Thread(target=self._connection, args=(sock,), daemon=True).start()

    def _watchdog(self) -> None:
        while True:
            time.sleep(min(1.0, self.idle_timeout_s))
            got = _read_info(self.path)
            if got is None or got[0] != os.getpid():
                self.exit()  # stopped, or another host took over the job on this machine
            try:
                touched = os.stat(self.path).st_mtime
            except OSError:
                touched = 0.0
            idle = min(time.monotonic() - self.last, time.time() - touched)
            if idle > self.idle_timeout_s:
                self.exit()

    def exit(self) -> None:
        got = _read_info(self.path)
        if got is not None and got[0] == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            # as every host does: the application's dir goes with the last one to leave
            remove_empty(os.path.dirname(self.path))
        for cache in list(self.caches.values()):
            with contextlib.suppress(Exception):  # disposing copies is best effort at exit
                cache.clear()
        os._exit(0)

    def _connection(self, sock: socket.socket) -> None:
        """A connection: the driver's (pickled requests, after the driver handshake) or a
        client's (direct lookups, ``direct.py``: nothing it sends is unpickled)."""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = FrameReader(sock)
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            first = reader.frame(256)
            if first.startswith(CLIENT_MAGIC) and len(first) == len(CLIENT_MAGIC) + 32:
                if not self.client_slots.acquire(blocking=False):
                    direct.send_frame(sock, direct.BUSY)  # the client raises ServerBusyError
                    return
                try:
                    host_handshake(sock, reader, self.client_secret, first)
                    sock.settimeout(CLIENT_IDLE_TIMEOUT_S)
                    self._serve_client(sock, reader)
                finally:
                    self.client_slots.release()
            else:
                mine = secrets.token_bytes(32)
                direct.send_frame(sock, mine + mac(self.secret, b"host", first))
                if not hmac.compare_digest(reader.frame(256), mac(self.secret, b"driver", mine)):
                    raise QueryableStateError("a query-host client failed authentication")
                sock.settimeout(None)  # the driver keeps its connections (its own time-outs)
                self._serve_driver(sock, reader)
        except (OSError, EOFError, QueryableStateError):
            return
        finally:
            self.slots.release()
            sock.close()

    def _serve_driver(self, sock: socket.socket, reader: FrameReader) -> None:
        while True:
            msg = pickle.loads(reader.frame(None))  # the driver proved the secret
            self.last = time.monotonic()
            if msg[0] == "stop":
                with contextlib.suppress(OSError):
                    direct.send_frame(sock, pickle.dumps(("stopped",)))
                self.exit()
            direct.send_frame(sock, pickle.dumps(self.handle(msg)))
            self.last = time.monotonic()

    def _serve_client(self, sock: socket.socket, reader: FrameReader) -> None:
        """Direct lookups of one client, answered on this thread from the pins."""
        session: dict[str, Any] = {}
        t0, n = time.thread_time(), 0
        while True:
            payload = reader.frame(direct.MAX_FRAME)  # (not idleness: the driver's pins are)
            direct.send_frame(sock, answer_request(self.pins, self._cache, session, payload))
            self.direct_requests += 1
            n += 1
            if not n & 63:  # receiving, answering, sending; read every 64 requests (the clock
                t1 = time.thread_time()  # is a system call of ~1.5 us); a metric: unsynchronized
                self.direct_cpu_s += t1 - t0
                t0 = t1

    def _objects(self, refs: list[tuple[str, bytes | None]]) -> tuple[list[Any], list[str]]:
        out, missing = [], []
        with self.lock:
            for ref, blob in refs:
                obj = self.objects.get(ref)
                if obj is None and blob is not None:
                    obj = self.objects[ref] = pickle.loads(blob)
                    while len(self.objects) > OBJECT_CACHE:
                        self.objects.popitem(last=False)
                if obj is None:
                    missing.append(ref)
                else:
                    self.objects.move_to_end(ref)
                out.append(obj)
        return out, missing

    def _cache(self, as_of: str, max_entries: int) -> ServingCache:
        with self.lock:
            cache = self.caches.get(as_of)
            if cache is None:
                cache = self.caches[as_of] = ServingCache(max_entries)
            cache.max_entries = max(1, int(max_entries))
            return cache

    def handle(self, msg: tuple[Any, ...]) -> tuple[Any, ...]:
        """One request -> its reply (``ok`` | ``need`` | ``stale`` | ``gone`` | ``error``)."""
        try:
            if msg[0] == "lookup":
                return self._lookup(*msg[1:])
            if msg[0] == "refresh":
                return self._refresh(*msg[1:])
            if msg[0] == "pin":
                return self._pin(*msg[1:])
            if msg[0] == "stats":
                return ("ok", self.stats())
            raise QueryableStateError(f"unknown query-host request {msg[0]!r}")
        except StaleSnapshot:
            return ("stale",)
        except OSError as e:  # the lineage's files were superseded meanwhile
            return ("gone", str(e))
        except StreamStateError as e:
            return ("error", e)
        except Exception as e:  # a bug reaches the driver as an error
            log.exception("queryable state: a query-host request failed")
            return ("error", QueryableStateError(f"{type(e).__name__}: {e}"))

    def stats(self) -> dict[str, float]:
        """What keeping the copies current cost so far (benchmarks read it): thread CPU
        seconds bringing copies forward and reading and parsing version files for lookups
        answered from them (``search.py``), copies built, bridged and left to lookups by the
        refresher (``skipped``), copies held, lookups answered from the files (``searched``);
        and the thread CPU seconds of direct lookups (receiving, answering, sending: copies
        brought forward and files parsed by a lookup count in both)."""
        with self.lock:
            caches = list(self.caches.values())
        searches = [c.search for c in caches if c.search is not None]
        return {
            "maintain_cpu_s": sum(c.maintain_cpu_s for c in caches)
            + sum(s.parse_cpu_s for s in searches),
            "searched": sum(s.lookups for s in searches),
            "builds": sum(c.builds for c in caches),
            "bridged": sum(c.bridged for c in caches),
            "skipped": sum(c.skipped for c in caches),
            "copies": sum(len(c) for c in caches),
            "direct_cpu_s": self.direct_cpu_s,
        }

    def _refresh(self, as_of: str, _: Any, max_entries: int, groups: list[Any]) -> tuple[Any, ...]:
        """Bring the copies held to the lineages of a newly published snapshot."""
        refs = [r for g in groups for r in ((g[0], g[1]), (g[2], g[3]))]
        objs, missing = self._objects(refs)
        if missing:
            return ("need", missing)
        ops, lins = objs[0::2], objs[1::2]
        snap = ServingSnapshot(
            as_of,
            0,
            0,
            None,
            # a refresh's groups carry the subtask index where a lookup's carry keys
            {(op.uid, g[4]): lin for op, lin, g in zip(ops, lins, groups, strict=True)},
            {op.uid: op for op in ops},
        )
        return ("ok", self._cache(as_of, max_entries).refresh(snap))

    def _pin(self, as_of: str, meta: Any, max_entries: int, groups: list[Any]) -> tuple[Any, ...]:
        """The snapshot direct lookups answer ``as_of`` from (``meta`` None: none, e.g. the
        job failed): ``meta`` = (epoch, attempt, checkpoint id, {name: registration}),
        ``groups`` = the lineages of this host's subtasks. Replies with the direct requests
        answered since the previous pin (a metric of the driver's)."""
        if meta is None:
            self.pins = {k: v for k, v in self.pins.items() if k != as_of}
        else:
            refs = [r for g in groups for r in ((g[0], g[1]), (g[2], g[3]))]
            objs, missing = self._objects(refs)
            if missing:
                return ("need", missing)
            ops, lins = objs[0::2], objs[1::2]
            epoch, attempt, checkpoint_id, states = meta
            pin = Pin(
                as_of,
                epoch,
                attempt,
                checkpoint_id,
                max_entries,
                dict(states),
                {op.uid: op for op in ops},
                {(op.uid, g[4]): lin for op, lin, g in zip(ops, lins, groups, strict=True)},
            )
            self.pins = {**self.pins, as_of: pin}
        n, self.direct_requests = self.direct_requests, 0
        return ("ok", n)

    def _lookup(
        self, as_of: str, state: tuple[str, str, Any], max_entries: int, groups: list[Any]
    ) -> tuple[Any, ...]:
        """``groups``: ``(op ref, op blob, lineage ref, lineage blob, [(key, kg), ...])``;
        a blob is sent only when the driver has not sent that object on the connection."""
        refs = [r for g in groups for r in ((g[0], g[1]), (g[2], g[3]))]
        objs, missing = self._objects(refs)
        if missing:
            return ("need", missing)
        cache = self._cache(as_of, max_entries)
        values = []
        for n, (_, _, _, _, items) in enumerate(groups):
            op, lin = objs[2 * n], objs[2 * n + 1]
            values.append([cache.read_lineage(lin, op, state, k, kg) for k, kg in items])
        return ("ok", values)


#: the query host's thread switch interval (s): a lookup thread woken by its socket gets the
#: interpreter back from a thread refreshing copies within this, not Python's 5 ms
SWITCH_INTERVAL_S = 0.0005


def serve(path: str, job_id: str, bind: str, idle_timeout_s: float) -> None:
    """The query host's main (forked by the zygote, or run as a module); it ends with its
    application's owner (``host_owner.py``) too, or when the zygote ends it (SIGTERM)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    host = QueryHost(path, job_id, bind, idle_timeout_s)
    owner = this_owner()
    host_owner.watch(owner, host_owner.owner_fd(owner), host.exit)
    signal.signal(signal.SIGTERM, lambda *_: host.exit())
    host.serve()


if __name__ == "__main__":
    if len(sys.argv) > 5:
        host_owner.adopt(host_owner.Owner.decode(sys.argv[5]))
    serve(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
