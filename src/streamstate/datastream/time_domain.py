"""PyFlink's ``pyflink.datastream.time_domain``: re-exports of :mod:`streamstate.api`."""

from __future__ import annotations

from streamstate.api.time_domain import (
    TimeDomain,
)

__all__ = [
    "TimeDomain",
]
