"""The driver's REST server: Starlette on uvicorn in a daemon thread.

One server per driver process and bind address serves every job that process runs
(``execute()`` attaches the job, its end detaches it; the last :data:`FINISHED_KEPT`
finished jobs stay listed). Reads are open on a loopback bind; every mutating call
(``PATCH /jobs/<id>``, ``POST .../savepoints``, ``POST .../stop``) needs
``Authorization: Bearer <token>``, the job's token (``rest.token``, else generated per job
and stored in its 0600 registry file): missing -> 401, wrong -> 403. A non-loopback bind
needs ``rest.token`` and then every call, reads too, must carry it.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import logging
import os
import secrets
import socket
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamstate.control.addresses import LOOPBACK, advertised_host, reach_note
from streamstate.control.registry import JobRecord
from streamstate.errors import ConfigurationError
from streamstate.runtime.host_owner import start_time

__all__ = ["FINISHED_KEPT", "ControlServer", "JobHandle", "RestSettings", "attach_job"]

log = logging.getLogger("streamstate")

FINISHED_KEPT = 20
#: how long a finished job's process keeps serving unread savepoint/stop outcomes
OUTCOME_GRACE_S = 30.0


@dataclass(frozen=True)
class RestSettings:
    """The ``rest.*`` keys of a job's configuration."""

    enabled: bool = True
    port: int = 0
    bind_address: str = "127.0.0.1"
    token: str | None = None
    #: the address the job prints and registers (Flink's ``rest.address``); None: derived
    address: str | None = None

    @staticmethod
    def of(conf: Mapping[str, str]) -> RestSettings:
        enabled = str(conf.get("rest.enabled", "true")).strip().lower() == "true"
        try:
            port = int(str(conf.get("rest.port", "0")).strip())
        except ValueError as e:
            raise ConfigurationError(
                f"rest.port must be an integer, got {conf['rest.port']!r}"
            ) from e
        bind = str(conf.get("rest.bind-address", "127.0.0.1")).strip() or "127.0.0.1"
        token = conf.get("rest.token")
        address = str(conf.get("rest.address", "")).strip() or None
        s = RestSettings(enabled, port, bind, str(token) if token else None, address)
        if enabled and not s.loopback and s.token is None:
            raise ConfigurationError(
                f"rest.bind-address is {bind!r}, reachable from other machines, but no "
                f"rest.token is set: set rest.token to a secret (every call must then carry "
                f"it), bind to 127.0.0.1, or set rest.enabled: false"
            )
        return s

    @property
    def loopback(self) -> bool:
        return self.bind_address.startswith(LOOPBACK)


@dataclass
class JobHandle:
    """One job as the server sees it."""

    executor: Any
    configuration: dict[str, str]
    token: str
    server: ControlServer | None = None
    record: JobRecord | None = None
    epochs_shown: int = 300
    #: wall clock (ms) when the job was attached
    attached_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    #: savepoint/stop trigger id -> its future
    triggers: dict[str, concurrent.futures.Future[str]] = field(default_factory=dict)
    #: triggers whose outcome no client has read yet (a `stop` polls for the savepoint's path)
    unread: set[str] = field(default_factory=set)
    _all_read: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def add_trigger(self, future: concurrent.futures.Future[str]) -> str:
        """Keep a savepoint/stop trigger; its id for polling its outcome."""
        trigger_id = uuid.uuid4().hex
        with self._all_read:
            self.triggers[trigger_id] = future
            self.unread.add(trigger_id)
        return trigger_id

    def outcome_read(self, trigger_id: str) -> None:
        """A client read the finished outcome of ``trigger_id``."""
        with self._all_read:
            self.unread.discard(trigger_id)
            self._all_read.notify_all()

    def wait_outcomes_read(self, grace_s: float) -> None:
        """Keep serving until every finished trigger's outcome was read, at most ``grace_s``:
        a job stopped with a savepoint ends right after it, and its process with it, while
        the client that asked for the stop still polls for the savepoint's path."""
        deadline = time.monotonic() + grace_s
        with self._all_read:
            while any(self.triggers[t].done() for t in self.unread):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._all_read.wait(left)

    @property
    def job_id(self) -> str:
        return str(self.executor.job_id)

    def detach(self) -> None:
        """The job ended: its registry file goes; the server keeps showing it for a while.
        Returns once the outcomes of its savepoint/stop triggers were read (or after
        :data:`OUTCOME_GRACE_S`), so that `streamstate stop` gets its savepoint's path."""
        from streamstate.control.queryable import detach_queryable

        self.wait_outcomes_read(OUTCOME_GRACE_S)
        detach_queryable(self.job_id)
        if self.record is not None:
            self.record.remove()
        if self.server is not None:
            self.server.job_ended(self)


class ControlServer:
    """A REST server for the jobs of this process (see the module docstring)."""

    _servers: dict[tuple[str, int], ControlServer] = {}
    _lock = threading.Lock()

    def __init__(self, settings: RestSettings) -> None:
        import uvicorn

        from streamstate.control.app import build_app

        self.settings = settings
        self.jobs: OrderedDict[str, JobHandle] = OrderedDict()
        self._finished: list[str] = []
        self._jobs_lock = threading.Lock()
        family = socket.AF_INET6 if ":" in settings.bind_address else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((settings.bind_address, settings.port))
        except OSError as e:
            self._sock.close()
            raise ConfigurationError(
                f"the REST server cannot listen on {settings.bind_address}:{settings.port}: "
                f"{e}; choose another rest.port (0 picks a free one) or set rest.enabled: false"
            ) from e
        self._sock.listen(64)
        port = self._sock.getsockname()[1]
        host = advertised_host(settings.bind_address, settings.address)
        shown = f"[{host}]" if ":" in host else host
        self.address = f"http://{shown}:{port}"
        config = uvicorn.Config(
            build_app(self), log_level="warning", access_log=False, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._sock]},
            name=f"streamstate-rest-{port}",
            daemon=True,
        )
        self._thread.start()

    @classmethod
    def for_settings(cls, settings: RestSettings) -> ControlServer:
        """The process's server for this bind address (and explicit port), started once."""
        key = (settings.bind_address, settings.port)
        with cls._lock:
            server = cls._servers.get(key)
            if server is None or not server._thread.is_alive():
                server = cls._servers[key] = ControlServer(settings)
            return server

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(5)
        with ControlServer._lock:
            for k, v in list(ControlServer._servers.items()):
                if v is self:
                    del ControlServer._servers[k]

    # -- jobs -------------------------------------------------------------------------------
    def attach(self, handle: JobHandle) -> None:
        handle.server = self
        with self._jobs_lock:
            self.jobs[handle.job_id] = handle

    def job_ended(self, handle: JobHandle) -> None:
        with self._jobs_lock:
            self._finished.append(handle.job_id)
            while len(self._finished) > FINISHED_KEPT:
                self.jobs.pop(self._finished.pop(0), None)

    def job(self, job_id: str) -> JobHandle | None:
        with self._jobs_lock:
            return self.jobs.get(job_id)

    def all_jobs(self) -> list[JobHandle]:
        with self._jobs_lock:
            return list(self.jobs.values())

    # -- authorization ----------------------------------------------------------------------
    def check_token(self, header: str | None, handle: JobHandle | None) -> int | None:
        """None when a mutating call may go on, else the HTTP status (401 or 403)."""
        if not header or not header.startswith("Bearer "):
            return 401
        given = header[len("Bearer ") :].strip()
        wanted = [handle.token] if handle is not None else [h.token for h in self.all_jobs()]
        if self.settings.token:
            wanted.append(self.settings.token)
        if any(hmac.compare_digest(given.encode(), w.encode()) for w in wanted):
            return None
        return 403

    def trigger(self, handle: JobHandle, future: concurrent.futures.Future[str]) -> str:
        return handle.add_trigger(future)


def attach_job(executor: Any, configuration: Mapping[str, str]) -> JobHandle | None:
    """Serve ``executor``'s job over REST and register it (None with ``rest.enabled: false``).

    Prints the job's address on stderr. Raises ConfigurationError for bad ``rest.*`` keys."""
    settings = RestSettings.of(configuration)
    if not settings.enabled:
        return None
    try:
        server = ControlServer.for_settings(settings)
    except ImportError as e:
        # an environment installed before these dependencies: the job runs, unobserved
        log.warning(
            "the REST API is off: %s (reinstall streamstate, e.g. `pip install -e .`, to get "
            "starlette, uvicorn and prometheus-client; rest.enabled: false silences this)",
            e,
        )
        return None
    from streamstate.control.queryable import attach_queryable, queryable_reach

    token = settings.token or secrets.token_urlsafe(24)
    conf = {str(k): str(v) for k, v in configuration.items()}
    handle = JobHandle(executor, conf, token)
    queryable = attach_queryable(handle.job_id, token, conf)
    server.attach(handle)
    record = JobRecord(
        job_id=handle.job_id,
        name=str(executor.job_name),
        address=server.address,
        token=token,
        pid=os.getpid(),
        start_ms=int(time.time() * 1000),
        queryable_address=queryable,
        pid_start=start_time(os.getpid()) or 0,
    )
    try:
        record.write()
        handle.record = record
    except OSError as e:
        log.warning("could not write the job registry file %s: %s", record.path(), e)
    print(
        f"streamstate: job {executor.job_name!r} ({handle.job_id}): {server.address}/ "
        f"({reach_note(settings.bind_address)})"
        + (f" (queryable state: {queryable}; {queryable_reach(conf)})" if queryable else ""),
        file=sys.stderr,
        flush=True,
    )
    return handle
