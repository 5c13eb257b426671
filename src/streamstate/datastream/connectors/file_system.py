"""File source and sink, mirroring ``pyflink.datastream.connectors.file_system``.

``FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths)``
reads text lines (bounded, or continuously with ``monitor_continuously``);
``FileSink.for_row_format(base_path, Encoder.simple_string_encoder())`` writes
rows with a two-phase commit: files become visible (``part-<subtask>-<epoch>``)
only when a checkpoint covering them completed, or when the job finished.
Paths are local paths or fsspec URLs.
"""

from __future__ import annotations

from typing import Any

from streamstate.errors import ConfigurationError

__all__ = ["FileSink", "FileSource", "FileSourceBuilder", "StreamFormat"]


class StreamFormat:
    """A record format read from a file stream; only text lines for now."""

    def __init__(self, kind: str, charset: str) -> None:
        self.kind = kind
        self.charset = charset

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> StreamFormat:
        """Lines of text in ``charset_name`` (any charset Python knows: UTF-8, ISO-8859-1,
        windows-1252, ...)."""
        import codecs

        try:
            codecs.lookup(charset_name)
        except LookupError:
            raise ConfigurationError(
                f"unknown charset {charset_name!r} for text_line_format(); use a charset name "
                f"Python knows, e.g. 'UTF-8', 'ISO-8859-1' or 'windows-1252'"
            ) from None
        return StreamFormat("text-line", charset_name)


class FileSourceBuilder:
    def __init__(self, stream_format: StreamFormat, paths: tuple[str, ...]) -> None:
        self._format = stream_format
        self._paths = [str(p) for p in paths]
        self._monitor_ms: int | None = None

    def monitor_continuously(self, discovery_interval: Any) -> FileSourceBuilder:
        """Keep watching the paths for new files every ``discovery_interval``
        (``Duration``, ``timedelta`` or milliseconds): the source becomes unbounded."""
        from streamstate.common.time import to_millis

        self._monitor_ms = to_millis(discovery_interval)
        return self

    def process_static_file_set(self) -> FileSourceBuilder:
        self._monitor_ms = None
        return self

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths, self._monitor_ms)


class FileSource:
    def __init__(
        self, stream_format: StreamFormat, paths: list[str], monitor_ms: int | None
    ) -> None:
        from streamstate.connectors.files import TextLineFileSource

        self._source = TextLineFileSource(paths, monitor_ms, charset=stream_format.charset)

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> FileSourceBuilder:
        return FileSourceBuilder(stream_format, paths)

    def _runtime_source(self) -> Any:
        return self._source


class FileSink:
    """Row-format file sink with exactly-once commits (see the module docstring)."""

    def __init__(self, base_path: str, encoder: Any) -> None:
        self.base_path = str(base_path)
        self.encoder = encoder

    @staticmethod
    def for_row_format(base_path: str, encoder: Any) -> FileSinkBuilder:
        return FileSinkBuilder(base_path, encoder)

    def _sink_parts(self) -> tuple[str, Any, Any]:
        from functools import partial

        from streamstate.connectors.sinks import FileCommitter, FileSinkOperator

        return (
            "FileSink",
            partial(FileSinkOperator, self.base_path, self.encoder),
            lambda exactly_once: FileCommitter(),
        )


class FileSinkBuilder:
    def __init__(self, base_path: str, encoder: Any) -> None:
        self._base_path = base_path
        self._encoder = encoder

    def with_rolling_policy(self, policy: Any) -> FileSinkBuilder:
        # One part file per subtask and epoch: epochs are the rolling unit.
        return self

    def build(self) -> FileSink:
        return FileSink(self._base_path, self._encoder)
