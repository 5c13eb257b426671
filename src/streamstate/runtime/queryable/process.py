"""What queryable state keeps per process, in one object: :data:`PROCESS`.

A driver keeps the service of each job it runs (``service.py``, found by the query server
and the REST state route) and its query servers, one per bind address (``server.py``); a
subtask host keeps the address of its machine's query host of each job
(``query_host.py``) and how to start it; any process holding serving copies disposes the replaced ones on one
background thread (``serving.py``). No other module of ``runtime/queryable/`` keeps
mutable state at module level.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamstate.runtime.queryable.server import QueryServer
    from streamstate.runtime.queryable.service import QueryableStateService

__all__ = ["PROCESS", "QueryableProcess"]

log = logging.getLogger("streamstate")


class _Disposer:
    """Disposes replaced serving copies on one background thread, started on first use:
    closing a RocksDB database and deleting its directory takes tens of ms that no lookup
    should wait for."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def later(self, backend: Any) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="streamstate-query-dispose", daemon=True
                )
                self._thread.start()
        self._queue.put(backend)

    def _loop(self) -> None:
        while True:
            backend = self._queue.get()
            try:
                backend.dispose()
            except Exception:  # a copy that cannot be disposed only leaks its directory
                log.warning("queryable state: disposing a serving copy failed", exc_info=True)


class QueryableProcess:
    """See the module docstring. Every registry is guarded by :attr:`lock`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: job id -> the queryable-state service of every job running in this process
        self.services: dict[str, QueryableStateService] = {}
        #: (bind address, port) -> the query server of this process listening there
        self.servers: dict[tuple[str, int], QueryServer] = {}
        #: job id -> (pid, address, secret) of this machine's query host (subtask hosts)
        self.query_hosts: dict[str, tuple[int, str, str]] = {}
        #: disposes replaced serving copies off the lookups' path
        self.disposer = _Disposer()
        #: set by a process that serves keyed state on its machine (a subtask host):
        #: ``(job id, executor) -> (address, secret)`` of the machine's query host, started
        #: when none runs, or None when it cannot be; unset: the driver serves the state
        self.query_host_starter: Callable[[str, str | None], tuple[str, str] | None] | None = None

    def service_of(self, job_id: str) -> QueryableStateService | None:
        """The queryable-state service of job ``job_id`` if it runs in this process."""
        with self.lock:
            return self.services.get(job_id)

    def add_service(self, service: QueryableStateService) -> None:
        with self.lock:
            self.services[service.job_id] = service

    def remove_service(self, service: QueryableStateService) -> None:
        with self.lock:
            if self.services.get(service.job_id) is service:
                del self.services[service.job_id]


#: the queryable state of this process
PROCESS = QueryableProcess()
