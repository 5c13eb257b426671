"""File source and sink, mirroring ``pyflink.datastream.connectors.file_system``.

``FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths)``
reads text lines (bounded, or continuously with ``monitor_continuously``);
``FileSink.for_row_format(base_path, Encoder.simple_string_encoder())`` writes
rows with a two-phase commit: part files (``<prefix>-<uuid>-<n><suffix>``, see
``OutputFileConfig``) become visible only when a checkpoint covering them completed,
or when the job finished.
Paths are local paths or fsspec URLs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamstate.common._unsupported import unsupported_attribute
from streamstate.datastream.connectors.base import Sink, Source
from streamstate.errors import ConfigurationError

__all__ = [
    "DefaultRollingPolicy",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
]


class OutputFileConfig:
    """Part file naming: ``<part_prefix>-<uuid>-<n><part_suffix>`` (as Flink)."""

    def __init__(self, part_prefix: str = "part", part_suffix: str = "") -> None:
        if not isinstance(part_prefix, str) or not isinstance(part_suffix, str):
            raise ConfigurationError(
                "OutputFileConfig needs string part_prefix and part_suffix, e.g. "
                "OutputFileConfig.builder().with_part_prefix('pre').with_part_suffix('.txt')"
            )
        if "/" in part_prefix or "/" in part_suffix:
            raise ConfigurationError(
                f"OutputFileConfig prefix {part_prefix!r} / suffix {part_suffix!r} contain '/': "
                f"they name a file inside the base path; put directories in the base path"
            )
        self._prefix = part_prefix
        self._suffix = part_suffix

    def get_part_prefix(self) -> str:
        return self._prefix

    def get_part_suffix(self) -> str:
        return self._suffix

    @staticmethod
    def builder() -> OutputFileConfig.OutputFileConfigBuilder:
        return OutputFileConfig.OutputFileConfigBuilder()

    class OutputFileConfigBuilder:
        def __init__(self) -> None:
            self._prefix = "part"
            self._suffix = ""

        def with_part_prefix(self, prefix: str) -> OutputFileConfig.OutputFileConfigBuilder:
            self._prefix = prefix
            return self

        def with_part_suffix(self, suffix: str) -> OutputFileConfig.OutputFileConfigBuilder:
            self._suffix = suffix
            return self

        def build(self) -> OutputFileConfig:
            return OutputFileConfig(self._prefix, self._suffix)


class RollingPolicy:
    """When a part file rolls (is closed and becomes pending). Epoch ends always roll."""

    part_size: int | None = None

    @staticmethod
    def default_rolling_policy(
        part_size: int = 1024 * 1024 * 128,
        rollover_interval: Any = 60 * 1000,
        inactivity_interval: Any = 60 * 1000,
    ) -> DefaultRollingPolicy:
        return DefaultRollingPolicy(part_size, rollover_interval, inactivity_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> OnCheckpointRollingPolicy:
        return OnCheckpointRollingPolicy()


class DefaultRollingPolicy(RollingPolicy):
    """Rolls at ``part_size`` bytes and at every epoch end. The intervals (``timedelta``
    or milliseconds) are validated; epochs end sooner than Flink's one-minute default,
    so they never roll a file later than Flink would (see docs/limitations.md)."""

    def __init__(self, part_size: int, rollover_interval: Any, inactivity_interval: Any) -> None:
        from streamstate.common.time import to_millis

        if not isinstance(part_size, int) or part_size <= 0:
            raise ConfigurationError(
                f"DefaultRollingPolicy part_size must be a positive number of bytes, "
                f"got {part_size!r}"
            )
        self.part_size = part_size
        self.rollover_interval_ms = to_millis(rollover_interval)
        self.inactivity_interval_ms = to_millis(inactivity_interval)


class OnCheckpointRollingPolicy(RollingPolicy):
    """Rolls at every checkpoint (epoch end) only."""


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


class FileSource(Source):
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


class FileSink(Sink):
    """Row-format file sink with exactly-once commits (see the module docstring)."""

    def __init__(
        self,
        base_path: str,
        encoder: Any,
        output_file_config: OutputFileConfig | None = None,
        rolling_policy: RollingPolicy | None = None,
    ) -> None:
        self.base_path = str(base_path)
        self.encoder = encoder
        self.output_file_config = output_file_config or OutputFileConfig()
        self.rolling_policy = rolling_policy or RollingPolicy.default_rolling_policy()

    @staticmethod
    def for_row_format(base_path: str, encoder: Any) -> FileSinkBuilder:
        return FileSinkBuilder(base_path, encoder)

    def _sink_parts(self) -> tuple[str, Any, Any]:
        from functools import partial

        from streamstate.connectors.sinks import FileCommitter, FileSinkOperator

        return (
            "FileSink",
            partial(
                FileSinkOperator,
                self.base_path,
                self.encoder,
                self.output_file_config.get_part_prefix(),
                self.output_file_config.get_part_suffix(),
                self.rolling_policy.part_size,
            ),
            lambda exactly_once: FileCommitter(),
        )


class FileSinkBuilder:
    def __init__(self, base_path: str, encoder: Any) -> None:
        self._base_path = base_path
        self._encoder = encoder
        self._config: OutputFileConfig | None = None
        self._policy: RollingPolicy | None = None

    def with_rolling_policy(self, policy: RollingPolicy) -> FileSinkBuilder:
        if not isinstance(policy, RollingPolicy):
            raise ConfigurationError(
                f"with_rolling_policy() needs a RollingPolicy, got {type(policy).__name__}; use "
                f"RollingPolicy.default_rolling_policy(...) or "
                f"RollingPolicy.on_checkpoint_rolling_policy()"
            )
        self._policy = policy
        return self

    def with_output_file_config(self, output_file_config: OutputFileConfig) -> FileSinkBuilder:
        if not isinstance(output_file_config, OutputFileConfig):
            raise ConfigurationError(
                f"with_output_file_config() needs an OutputFileConfig, got "
                f"{type(output_file_config).__name__}"
            )
        self._config = output_file_config
        return self

    def build(self) -> FileSink:
        return FileSink(self._base_path, self._encoder, self._config, self._policy)


if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
