"""Collect and discarding sinks.

:class:`CollectSink` brings a stream's records back to the driver. In
exactly-once mode with checkpointing on, records become visible only when a
checkpoint covers the epoch that produced them (so a failure never shows
duplicates); in at-least-once mode, or without checkpointing, at the end of
their epoch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CollectSink", "DiscardingSink"]


class CollectSink:
    """``ds.sink_to(CollectSink())``; after ``execute()``, ``get_results()`` lists the records."""

    def __init__(self) -> None:
        self._committer: Any = None

    def _sink_parts(self) -> tuple[str, Any, Any]:
        from streamstate.connectors.sinks import CollectCommitter, CollectSinkOperator

        def committer(exactly_once: bool) -> Any:
            self._committer = CollectCommitter(exactly_once)
            return self._committer

        return "Collect", CollectSinkOperator, committer

    def get_results(self) -> list[Any]:
        if self._committer is None:
            return []
        return list(self._committer.committed)

    def __getstate__(self) -> dict[str, Any]:
        return {"_committer": None}  # the driver-side buffer never travels to workers


class DiscardingSink:
    """Drops every record (benchmarks, jobs run for their side effects on state)."""

    def _sink_parts(self) -> tuple[str, Any, Any]:
        from streamstate.connectors.sinks import DiscardingSinkOperator

        return "Discard", DiscardingSinkOperator, None
