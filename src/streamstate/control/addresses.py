"""Where the driver's servers (REST, queryable state) listen and what address they tell
others: a bind address is where a socket listens, the advertised address is what a job
prints and registers for clients on other machines (Flink's ``rest.bind-address`` and
``rest.address``)."""

from __future__ import annotations

import socket

__all__ = ["LOOPBACK", "WILDCARD", "advertised_host", "reach_note"]

LOOPBACK = ("127.", "localhost", "::1")
#: bind addresses meaning "every interface": never an address another machine can use
WILDCARD = ("0.0.0.0", "::", "")


def advertised_host(bind_address: str, configured: str | None = None) -> str:
    """The host others reach a server on: ``configured`` (``rest.address``) when set, the
    bind address when it names one interface, else (a wildcard bind) this machine's
    hostname's address, the one other machines resolve it to."""
    if configured:
        return configured
    if bind_address not in WILDCARD:
        return bind_address
    name = socket.gethostname()
    try:
        return socket.gethostbyname(name)
    except OSError:
        return name


def reach_note(bind_address: str, setting: str = "rest.bind-address") -> str:
    """Who can reach a server bound to ``bind_address`` (configured by ``setting``), for
    the line a job prints."""
    if bind_address.startswith(LOOPBACK):
        return f"this machine only; {setting} serves others"
    return f"bound to {bind_address}, reachable from other machines with the token"
