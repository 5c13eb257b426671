"""Text files in other charsets, and bytes that are not valid in the file's charset."""

from __future__ import annotations

import pytest

from streamstate.common import RestartStrategies
from streamstate.datastream.connectors import CollectSink, FileSource, StreamFormat
from streamstate.errors import ConfigurationError, InputFormatError, JobExecutionError
from tests.support import envs


def read(path: str, charset: str = "UTF-8") -> list[str]:
    env = envs.make_env(parallelism=1, max_records=10)
    env.set_restart_strategy(RestartStrategies.no_restart())
    sink = CollectSink()
    src = FileSource.for_record_stream_format(StreamFormat.text_line_format(charset), path).build()
    env.from_source(src, None, "files").sink_to(sink)
    env.execute("charsets")
    return sorted(sink.get_results())


def test_a_non_utf8_file_is_a_typed_error_naming_file_offset_and_fix(tmp_path):
    f = tmp_path / "latin.txt"
    f.write_bytes("ok\nnaïve café\n".encode("latin-1"))
    with pytest.raises(JobExecutionError) as ei:
        read(str(f))
    cause = ei.value.__cause__
    assert isinstance(cause, InputFormatError)
    assert "latin.txt" in str(cause) and "byte offset 3" in str(cause)
    assert "text_line_format('ISO-8859-1')" in str(cause)
    assert read(str(f), "ISO-8859-1") == ["naïve café", "ok"]


def test_an_unknown_charset_is_refused_when_declared():
    with pytest.raises(ConfigurationError, match="unknown charset 'no-such-charset'"):
        StreamFormat.text_line_format("no-such-charset")
