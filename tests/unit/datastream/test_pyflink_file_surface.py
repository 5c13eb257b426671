"""File connector names added for PyFlink parity: StreamingFileSink (add_sink), the
builders' BaseBuilder, FileSink.get_transformer, enumerator and split-assigner providers."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamstate.common.serialization import Encoder
from streamstate.datastream.connectors.base import SupportsPreprocessing
from streamstate.datastream.connectors.file_system import (
    BucketAssigner,
    FileEnumeratorProvider,
    FileSink,
    FileSource,
    FileSplitAssignerProvider,
    StreamFormat,
    StreamingFileSink,
)
from streamstate.errors import ConfigurationError
from tests.support.envs import make_env


def _committed(out: Path) -> list[str]:
    return sorted(
        line
        for f in out.rglob("*")
        if f.is_file() and not f.name.startswith(".")
        for line in f.read_text().splitlines()
    )


def test_streaming_file_sink_via_add_sink_commits_part_files(tmp_path):
    out = tmp_path / "out"
    sink = (
        StreamingFileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )
    assert isinstance(sink, StreamingFileSink) and isinstance(sink, FileSink)
    builder = StreamingFileSink.for_row_format(str(out), Encoder.simple_string_encoder())
    assert isinstance(builder, StreamingFileSink.BaseBuilder)
    assert isinstance(builder, FileSink.BaseBuilder)
    env = make_env(parallelism=2)
    env.from_sequence(1, 20).add_sink(sink)
    env.execute()
    assert _committed(out) == sorted(str(i) for i in range(1, 21))


def test_file_sink_has_no_preprocessing_step():
    sink = FileSink.for_row_format("/tmp/x", Encoder.simple_string_encoder()).build()
    assert isinstance(sink, SupportsPreprocessing)
    assert sink.get_transformer() is None
    assert isinstance(FileSink.for_row_format("/tmp/x", None), FileSink.BaseBuilder)


def test_enumerator_and_split_assigner_are_accepted_and_every_file_is_read(tmp_path):
    for i in range(3):
        (tmp_path / f"f{i}.txt").write_text(f"a{i}\nb{i}\n")
    source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path))
        .set_file_enumerator(FileEnumeratorProvider.default_splittable_file_enumerator())
        .set_split_assigner(FileSplitAssignerProvider.locality_aware_split_assigner())
        .build()
    )
    env = make_env(parallelism=2)
    lines = env.from_source(source, source_name="files").execute_and_collect()
    with lines as results:
        assert sorted(results) == sorted(f"{c}{i}" for i in range(3) for c in "ab")
    builder = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path))
    with pytest.raises(ConfigurationError, match="FileEnumeratorProvider"):
        builder.set_file_enumerator("splittable")


def test_builders_share_pyflinks_base_and_refuse_compaction():
    from streamstate.datastream.connectors.file_system import OnCheckpointRollingPolicy
    from streamstate.errors import UnsupportedFeatureError

    row = FileSink.for_row_format("/tmp/x", Encoder.simple_string_encoder())
    assert row.with_rolling_policy(rolling_policy=OnCheckpointRollingPolicy()) is row
    assert row.disable_compact() is row
    with pytest.raises(UnsupportedFeatureError, match="compaction"):
        row.enable_compact(None, None)
    legacy = StreamingFileSink.for_row_format("/tmp/x", Encoder.simple_string_encoder())
    assert legacy.with_rolling_policy(policy=OnCheckpointRollingPolicy()) is legacy
    with pytest.raises(UnsupportedFeatureError):
        legacy.enable_compact(None, None)
