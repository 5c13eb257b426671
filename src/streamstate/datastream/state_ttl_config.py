"""PyFlink's ``pyflink.datastream.state_ttl_config``: re-exports of :mod:`streamstate.api`."""

from __future__ import annotations

from streamstate.api.state_ttl_config import (
    StateTtlConfig,
)

__all__ = [
    "StateTtlConfig",
]
