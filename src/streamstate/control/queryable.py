"""Serving a job's queryable state over TCP (``queryable-state.*`` keys).

:func:`attach_queryable` starts the process's
:class:`~streamstate.runtime.queryable.server.QueryServer` for the configured bind address
(once per process, like the REST server) and registers the job with its bearer token;
:func:`detach_queryable` unregisters it. On by default, bound to 127.0.0.1 only: another
bind address needs ``rest.token`` (a secret every request must carry) or it is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from streamstate.control.addresses import LOOPBACK, advertised_host, reach_note
from streamstate.errors import ConfigurationError
from streamstate.runtime.queryable.process import PROCESS
from streamstate.runtime.queryable.server import QueryServer

__all__ = ["QueryableSettings", "attach_queryable", "detach_queryable", "queryable_reach"]

log = logging.getLogger("streamstate")


@dataclass(frozen=True)
class QueryableSettings:
    enabled: bool = True
    bind_address: str = "127.0.0.1"
    port: int = 0
    max_connections: int = 16

    @staticmethod
    def of(conf: Mapping[str, str]) -> QueryableSettings:
        enabled = str(conf.get("queryable-state.enable", "true")).strip().lower() == "true"
        bind = str(conf.get("queryable-state.bind-address", "127.0.0.1")).strip() or "127.0.0.1"
        try:
            port = int(str(conf.get("queryable-state.proxy.ports", "0")).strip())
            threads = int(str(conf.get("queryable-state.proxy.query-threads", "16")).strip())
        except ValueError as e:
            raise ConfigurationError(
                f"queryable-state.proxy.ports and .query-threads must be integers: {e}"
            ) from e
        if enabled and not bind.startswith(LOOPBACK) and not conf.get("rest.token"):
            raise ConfigurationError(
                f"queryable-state.bind-address is {bind!r}, reachable from other machines, "
                f"but no rest.token is set: set rest.token to a secret, bind to 127.0.0.1, or "
                f"set queryable-state.enable: false"
            )
        return QueryableSettings(enabled, bind, port, max(1, threads))


def attach_queryable(job_id: str, token: str, conf: Mapping[str, str]) -> str | None:
    """Serve ``job_id``'s queryable state; the ``host:port`` clients reach it on (None when
    off): the bind address, or this machine's address for a wildcard bind."""
    settings = QueryableSettings.of(conf)
    if not settings.enabled:
        return None
    try:
        server = QueryServer.for_address(
            settings.bind_address, settings.port, settings.max_connections
        )
    except OSError as e:
        raise ConfigurationError(
            f"the queryable-state server cannot listen on {settings.bind_address}:"
            f"{settings.port}: {e}; choose another queryable-state.proxy.ports (0 picks a "
            f"free one) or set queryable-state.enable: false"
        ) from e
    server.register(job_id, token)
    host = advertised_host(settings.bind_address)
    return f"[{host}]:{server.port}" if ":" in host else f"{host}:{server.port}"


def queryable_reach(conf: Mapping[str, str]) -> str:
    """Where the queryable-state server of ``conf`` listens and who can reach it there."""
    return reach_note(QueryableSettings.of(conf).bind_address, "queryable-state.bind-address")


def detach_queryable(job_id: str) -> None:
    with PROCESS.lock:
        servers = list(PROCESS.servers.values())
    for server in servers:
        server.unregister(job_id)
