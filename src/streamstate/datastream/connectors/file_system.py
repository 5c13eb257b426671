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

from typing import TYPE_CHECKING, Any, Self

from streamstate.common._unsupported import unsupported_attribute
from streamstate.common.serialization import BulkWriterFactory
from streamstate.connectors.buckets import (
    BasePathBucketAssigner,
    BucketAssigner,
    DateTimeBucketAssigner,
)
from streamstate.datastream.connectors.base import (
    Sink,
    Source,
    StreamTransformer,
    SupportsPreprocessing,
)
from streamstate.errors import ConfigurationError

__all__ = [
    "BasePathBucketAssigner",
    "BucketAssigner",
    "BulkWriterFactory",
    "DateTimeBucketAssigner",
    "DefaultRollingPolicy",
    "FileEnumeratorProvider",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "FileSplitAssignerProvider",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
    "StreamingFileSink",
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
    """When a part file rolls (in-progress -> pending; visible once a checkpoint covering
    it completes). Evaluated at record and epoch boundaries (see docs/architecture.md)."""

    def _rules(self) -> Any:
        raise NotImplementedError

    @staticmethod
    def default_rolling_policy(
        part_size: int = 1024 * 1024 * 128,
        rollover_interval: Any = 60 * 1000,
        inactivity_interval: Any = 60 * 1000,
    ) -> DefaultRollingPolicy:
        """Rolls a part when it reached ``part_size`` bytes, is older than
        ``rollover_interval`` or was not written to for ``inactivity_interval``
        (durations: ``timedelta``, ``Duration`` or milliseconds)."""
        return DefaultRollingPolicy(part_size, rollover_interval, inactivity_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> OnCheckpointRollingPolicy:
        return OnCheckpointRollingPolicy()


class DefaultRollingPolicy(RollingPolicy):
    """Part size (checked before every record), rollover and inactivity intervals
    (checked against the epoch's processing time before its first record and at its
    end); a part also rolls when the input ends. A checkpoint does not roll a part
    that is below ``part_size`` (as in Flink): it stays in progress across checkpoints."""

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
        for what, ms in (
            ("rollover_interval", self.rollover_interval_ms),
            ("inactivity_interval", self.inactivity_interval_ms),
        ):
            if ms <= 0:
                raise ConfigurationError(
                    f"DefaultRollingPolicy {what} must be positive, got {ms} ms"
                )

    def _rules(self) -> Any:
        from streamstate.connectors.file_sink import RollingRules

        return RollingRules(
            self.part_size, self.rollover_interval_ms, self.inactivity_interval_ms, False
        )


class OnCheckpointRollingPolicy(RollingPolicy):
    """Rolls at every checkpoint (and when the input ends) only."""

    def _rules(self) -> Any:
        from streamstate.connectors.file_sink import RollingRules

        return RollingRules(on_checkpoint=True)


class StreamFormat:
    """A record format read from a file stream, line by line: text lines
    (``text_line_format``), CSV (``formats.csv.CsvReaderFormat``) or JSON lines
    (``formats.json.JsonLinesReaderFormat``)."""

    def __init__(self, kind: str, charset: str = "UTF-8") -> None:
        self.kind = kind
        self.charset = charset

    def _line_format(self) -> Any:
        """The runtime line format (``connectors/line_formats.py``)."""
        from streamstate.connectors.line_formats import TextLine

        return TextLine()

    def _produced_type(self) -> Any:
        """The type of the records (the stream's type in ``from_source``, as PyFlink)."""
        from streamstate.common.typeinfo import Types

        return Types.STRING()

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

    def set_file_enumerator(self, file_enumerator: FileEnumeratorProvider) -> FileSourceBuilder:
        """Accepted and kept: every file is one split (read by one reader from its start),
        whichever enumerator; hidden files (``.``/``_``) are skipped, as Flink's do."""
        self._enumerator = _check_kind(file_enumerator, FileEnumeratorProvider)
        return self

    def set_split_assigner(self, split_assigner: FileSplitAssignerProvider) -> FileSourceBuilder:
        """Accepted and kept: splits go to the readers round robin (no host locality)."""
        self._assigner = _check_kind(split_assigner, FileSplitAssignerProvider)
        return self

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths, self._monitor_ms)


def _check_kind(provider: Any, cls: type) -> Any:
    if not isinstance(provider, cls):
        raise ConfigurationError(f"expected a {cls.__name__}, got {type(provider).__name__}")
    return provider


class FileEnumeratorProvider:
    """How a FileSource lists and splits its files (PyFlink's providers). Here every
    file is one split whichever provider is set (``docs/pyflink-compat.md``)."""

    def __init__(self, j_file_enumerator_provider: Any = "non-splittable") -> None:
        self.kind = str(j_file_enumerator_provider)

    @staticmethod
    def default_splittable_file_enumerator() -> FileEnumeratorProvider:
        return FileEnumeratorProvider("splittable")

    @staticmethod
    def default_non_splittable_file_enumerator() -> FileEnumeratorProvider:
        return FileEnumeratorProvider("non-splittable")


class FileSplitAssignerProvider:
    """How a FileSource hands splits to readers. Here: round robin, always."""

    def __init__(self, j_file_split_assigner: Any = "locality-aware") -> None:
        self.kind = str(j_file_split_assigner)

    @staticmethod
    def locality_aware_split_assigner() -> FileSplitAssignerProvider:
        return FileSplitAssignerProvider("locality-aware")


class FileSource(Source):
    def __init__(
        self, stream_format: StreamFormat, paths: list[str], monitor_ms: int | None
    ) -> None:
        from streamstate.connectors.files import TextLineFileSource

        self._source = TextLineFileSource(
            paths,
            monitor_ms,
            charset=stream_format.charset,
            line_format=stream_format._line_format(),
        )
        self._type = stream_format._produced_type()

    def _produced_type(self) -> Any:
        return self._type

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> FileSourceBuilder:
        return FileSourceBuilder(stream_format, paths)

    def _runtime_source(self) -> Any:
        return self._source


def _check_assigner(assigner: Any) -> BucketAssigner:
    if not isinstance(assigner, BucketAssigner):
        raise ConfigurationError(
            f"with_bucket_assigner() needs a BucketAssigner, got {type(assigner).__name__}; use "
            f"BucketAssigner.date_time_bucket_assigner(...), "
            f"BucketAssigner.base_path_bucket_assigner() or a subclass with get_bucket_id()"
        )
    return assigner


def _check_config(output_file_config: Any) -> OutputFileConfig:
    if not isinstance(output_file_config, OutputFileConfig):
        raise ConfigurationError(
            f"with_output_file_config() needs an OutputFileConfig, got "
            f"{type(output_file_config).__name__}"
        )
    return output_file_config


class FileSink(Sink, SupportsPreprocessing):
    """Exactly-once file sink (Flink's ``FileSink``): records go into buckets (sub-
    directories chosen by a ``BucketAssigner``, hourly ``DateTimeBucketAssigner`` by
    default) under the base path; part files roll by the ``RollingPolicy`` and become
    visible when a checkpoint covering them completes (see the module docstring)."""

    def __init__(
        self,
        base_path: str,
        part_format: Any,
        output_file_config: OutputFileConfig | None = None,
        rolling_policy: RollingPolicy | None = None,
        bucket_assigner: BucketAssigner | None = None,
    ) -> None:
        self.base_path = str(base_path)
        self.part_format = part_format
        self.output_file_config = output_file_config or OutputFileConfig()
        self.rolling_policy = rolling_policy or (
            OnCheckpointRollingPolicy()
            if part_format.bulk
            else RollingPolicy.default_rolling_policy()
        )
        self.bucket_assigner = bucket_assigner or DateTimeBucketAssigner()

    @staticmethod
    def for_row_format(base_path: str, encoder: Any) -> FileSink.RowFormatBuilder:
        return FileSink.RowFormatBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: Any) -> FileSink.BulkFormatBuilder:
        """Bulk-encoded part files, e.g. ``ParquetBulkWriters.for_row_type(...)``
        (``streamstate.datastream.formats.parquet``); they roll on every checkpoint."""
        if not isinstance(writer_factory, BulkWriterFactory):
            raise ConfigurationError(
                f"for_bulk_format() needs a BulkWriterFactory such as "
                f"ParquetBulkWriters.for_row_type(...), got {type(writer_factory).__name__}"
            )
        return FileSink.BulkFormatBuilder(base_path, writer_factory)

    def get_transformer(self) -> StreamTransformer | None:
        """None: there is no compaction step to put before the sink (PyFlink returns one
        only when compaction is enabled, which streamstate does not support)."""
        return None

    def _bind_input_type(self, type_info: Any) -> None:
        """The type of the stream written (``sink_to``): a row format's simple string
        encoder writes typed records as Flink does."""
        if hasattr(self.part_format, "type_info"):
            self.part_format.type_info = type_info

    def _sink_parts(self) -> tuple[str, Any, Any]:
        from functools import partial

        from streamstate.connectors.file_sink import FileCommitter, FileSinkOperator

        prefix = self.output_file_config.get_part_prefix()
        suffix = self.output_file_config.get_part_suffix()
        base = self.base_path
        return (
            "FileSink",
            partial(
                FileSinkOperator,
                base,
                self.part_format,
                prefix,
                suffix,
                self.rolling_policy._rules(),
                self.bucket_assigner,
            ),
            lambda exactly_once: FileCommitter(base, prefix, suffix),
        )

    class BaseBuilder:
        """The base of FileSink's builders (PyFlink's ``FileSink.BaseBuilder``)."""

        _config: OutputFileConfig | None = None
        _assigner: BucketAssigner | None = None
        _check_interval_ms = 60_000

        def with_bucket_check_interval(self, interval: int) -> Self:
            """Accepted for PyFlink compatibility: time-based rolling is checked at every
            epoch boundary (see ``DefaultRollingPolicy``)."""
            self._check_interval_ms = int(interval)
            return self

        def with_bucket_assigner(self, bucket_assigner: BucketAssigner) -> Self:
            self._assigner = _check_assigner(bucket_assigner)
            return self

        def with_output_file_config(self, output_file_config: OutputFileConfig) -> Self:
            self._config = _check_config(output_file_config)
            return self

        def disable_compact(self) -> Self:
            """No compaction (the only mode here)."""
            return self

        def with_rolling_policy(self, rolling_policy: RollingPolicy) -> Self:
            raise NotImplementedError("the row and bulk format builders implement this")

        def build(self) -> FileSink:
            raise NotImplementedError("the row and bulk format builders implement this")

    class RowFormatBuilder(BaseBuilder):
        """Builder of a row-format FileSink (``FileSink.for_row_format``)."""

        def __init__(self, base_path: str, encoder: Any) -> None:
            self._base_path = base_path
            self._encoder = encoder
            self._config: OutputFileConfig | None = None
            self._policy: RollingPolicy | None = None
            self._assigner: BucketAssigner | None = None
            self._check_interval_ms = 60_000

        def with_rolling_policy(self, rolling_policy: RollingPolicy) -> Self:
            if not isinstance(rolling_policy, RollingPolicy):
                raise ConfigurationError(
                    f"with_rolling_policy() needs a RollingPolicy, got "
                    f"{type(rolling_policy).__name__}; use "
                    f"RollingPolicy.default_rolling_policy(...) or "
                    f"RollingPolicy.on_checkpoint_rolling_policy()"
                )
            self._policy = rolling_policy
            return self

        def build(self) -> FileSink:
            from streamstate.connectors.file_sink import RowPartFormat

            return FileSink(
                self._base_path,
                RowPartFormat(self._encoder),
                self._config,
                self._policy,
                self._assigner,
            )

    class BulkFormatBuilder(BaseBuilder):
        """Builder of a bulk-format FileSink (``FileSink.for_bulk_format``)."""

        def __init__(self, base_path: str, writer_factory: BulkWriterFactory) -> None:
            self._base_path = base_path
            self._factory = writer_factory
            self._config: OutputFileConfig | None = None
            self._assigner: BucketAssigner | None = None

        def with_rolling_policy(self, rolling_policy: RollingPolicy) -> Self:
            if not isinstance(rolling_policy, OnCheckpointRollingPolicy):
                raise ConfigurationError(
                    f"a bulk-format FileSink rolls on checkpoints only (as in Flink): "
                    f"with_rolling_policy() needs RollingPolicy.on_checkpoint_rolling_policy(), "
                    f"got {type(rolling_policy).__name__}"
                )
            return self

        def build(self) -> FileSink:
            return FileSink(
                self._base_path,
                self._factory._part_format(),
                self._config,
                OnCheckpointRollingPolicy(),
                self._assigner,
            )


class StreamingFileSink(FileSink):
    """Flink's older file sink, for ``ds.add_sink(...)``: the same exactly-once part
    files as :class:`FileSink` (built the same way, ``StreamingFileSink.for_row_format``)."""

    @staticmethod
    def for_row_format(base_path: str, encoder: Any) -> StreamingFileSink.DefaultRowFormatBuilder:
        return StreamingFileSink.DefaultRowFormatBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(
        base_path: str, writer_factory: Any
    ) -> StreamingFileSink.DefaultBulkFormatBuilder:
        FileSink.for_bulk_format(base_path, writer_factory)  # the same checks
        return StreamingFileSink.DefaultBulkFormatBuilder(base_path, writer_factory)

    @staticmethod
    def _of(sink: FileSink) -> StreamingFileSink:
        return StreamingFileSink(
            sink.base_path,
            sink.part_format,
            sink.output_file_config,
            sink.rolling_policy,
            sink.bucket_assigner,
        )

    class BaseBuilder(FileSink.BaseBuilder):
        """The base of StreamingFileSink's builders (PyFlink names the policy ``policy``
        here, ``rolling_policy`` in FileSink's)."""

        def with_rolling_policy(self, policy: RollingPolicy) -> Self:
            return super().with_rolling_policy(policy)

    class DefaultRowFormatBuilder(FileSink.RowFormatBuilder, BaseBuilder):
        def with_rolling_policy(self, policy: RollingPolicy) -> Self:
            return super().with_rolling_policy(policy)

        def build(self) -> StreamingFileSink:
            return StreamingFileSink._of(super().build())

    class DefaultBulkFormatBuilder(FileSink.BulkFormatBuilder, BaseBuilder):
        def with_rolling_policy(self, policy: RollingPolicy) -> Self:
            return super().with_rolling_policy(policy)

        def build(self) -> StreamingFileSink:
            return StreamingFileSink._of(super().build())


#: the builder's name before PyFlink's nested ``FileSink.RowFormatBuilder``
FileSinkBuilder = FileSink.RowFormatBuilder


if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
