"""The connector base classes, as ``pyflink.datastream.connectors.base``.

:class:`Source` is what ``env.from_source`` takes: ``FileSource`` and
``NumberSequenceSource`` are Sources, and ``Source(runtime_source)`` wraps any
replayable runtime source (a ``streamstate.connectors.base.Source``: positions kept in
checkpoints, see docs/connectors.md, *Sources and sinks contracts*). :class:`Sink` is
what ``ds.sink_to`` takes; a sink that implements :class:`SupportsPreprocessing` gets
its :class:`StreamTransformer` applied to the stream first, as in PyFlink.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import TYPE_CHECKING, Any

from streamstate.errors import ConfigurationError

if TYPE_CHECKING:
    from streamstate.datastream.data_stream import DataStream

__all__ = ["DeliveryGuarantee", "Sink", "Source", "StreamTransformer", "SupportsPreprocessing"]


class DeliveryGuarantee(Enum):
    """What a sink guarantees after failures: ``EXACTLY_ONCE`` (commits tied to
    checkpoints: FileSink, the exactly-once JDBC sink), ``AT_LEAST_ONCE`` (replays may
    repeat records), ``NONE``."""

    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"
    NONE = "none"


class Source:
    """A source for ``env.from_source`` wrapping a runtime source."""

    def __init__(self, source: Any) -> None:
        needed = ("create_enumerator_state", "plan_epoch", "read", "apply_progress")
        missing = [m for m in needed if not hasattr(source, m)]
        if missing:
            raise ConfigurationError(
                f"Source() wraps a runtime source (streamstate.connectors.base.Source); "
                f"{type(source).__name__} has no {', '.join(missing)}. For a SourceFunction "
                f"use env.add_source()"
            )
        self._source = source

    def _runtime_source(self) -> Any:
        return self._source


class Sink:
    """A sink for ``ds.sink_to`` wrapping another sink (``FileSink``, ``CollectSink``, ...)."""

    def __init__(self, sink: Any) -> None:
        if getattr(sink, "_sink_parts", None) is None:
            raise ConfigurationError(
                f"Sink() wraps a sink such as FileSink, got {type(sink).__name__}; "
                f"for a SinkFunction use ds.add_sink()"
            )
        self._sink = sink

    def _sink_parts(self) -> tuple[str, Any, Any]:
        parts: tuple[str, Any, Any] = self._sink._sink_parts()
        return parts


class StreamTransformer(ABC):
    """Turns the stream a sink receives into another one (``apply``)."""

    @abstractmethod
    def apply(self, ds: DataStream) -> DataStream: ...


class SupportsPreprocessing(ABC):
    """A sink that transforms its input first: ``sink_to`` applies ``get_transformer()``."""

    @abstractmethod
    def get_transformer(self) -> StreamTransformer | None: ...
