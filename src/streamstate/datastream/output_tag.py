"""PyFlink's ``pyflink.datastream.output_tag``: re-exports of :mod:`streamstate.api`."""

from __future__ import annotations

from streamstate.api.output_tag import (
    OutputTag,
)

__all__ = [
    "OutputTag",
]
