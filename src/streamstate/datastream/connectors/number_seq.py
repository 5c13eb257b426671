"""``NumberSequenceSource``, as ``pyflink.datastream.connectors.number_seq``."""

from __future__ import annotations

from typing import Any

from streamstate.datastream.connectors.base import Source

__all__ = ["NumberSequenceSource"]


class NumberSequenceSource(Source):
    """The numbers ``start`` to ``end`` inclusive, read in parallel, position checkpointed."""

    def __init__(self, start: int, end: int) -> None:
        from streamstate.connectors.sequence import SequenceSource

        self._source = SequenceSource(start, end)

    def _runtime_source(self) -> Any:
        return self._source
