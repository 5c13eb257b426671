"""FileSource formats (CSV, JSON lines) and a monitored directory whose file positions
are checkpointed: a stop and a restore, and a failure, lose and duplicate nothing."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import pytest

from streamstate.common import Row, Types
from streamstate.datastream import ExternalizedCheckpointCleanup
from streamstate.datastream.connectors import CollectSink, FileSource
from streamstate.datastream.formats.csv import CsvReaderFormat, CsvSchema
from streamstate.datastream.formats.json import (
    JsonLinesReaderFormat,
    JsonRowDeserializationSchema,
    JsonRowSerializationSchema,
)
from streamstate.errors import ConfigurationError, InputFormatError, JobExecutionError
from streamstate.testing import FailOnce, TickingClock
from tests.support import envs


def read_all(fmt: Any, *paths: Path, parallelism: int = 2) -> list[Any]:
    env = envs.make_env(parallelism, max_records=3, restarts=0)
    sink = CollectSink()
    source = FileSource.for_record_stream_format(fmt, *map(str, paths)).build()
    env.from_source(source, None, "files").sink_to(sink)
    env.execute("file-formats")
    return list(sink.get_results())


def test_csv_with_header_arrays_numbers_nulls_and_comments(tmp_path):
    (tmp_path / "a.csv").write_text(
        "id|name|score|tags|ok\n"
        "1|ann|1.5|x;y|true\n"
        "# a comment\n"
        '2|"bob|jr"|NULL||false\n'
        "\n"
        "3|cy|2.25|z|true\n"
    )
    (tmp_path / "b.csv").write_text("id|name|score|tags|ok\n4|dee|0.5|w|false\n")
    schema = (
        CsvSchema.builder()
        .add_number_column("id", number_type=Types.INT())
        .add_string_column("name")
        .add_number_column("score", number_type=Types.BIG_DEC())
        .add_array_column("tags", separator=";")
        .add_boolean_column("ok")
        .set_column_separator("|")
        .set_null_value("NULL")
        .set_allow_comments()
        .set_use_header()
        .build()
    )
    rows = sorted(read_all(CsvReaderFormat.for_schema(schema), tmp_path), key=lambda r: r.id)
    assert rows == [
        Row(id=1, name="ann", score=decimal.Decimal("1.5"), tags=["x", "y"], ok=True),
        Row(id=2, name="bob|jr", score=None, tags=[], ok=False),
        Row(id=3, name="cy", score=decimal.Decimal("2.25"), tags=["z"], ok=True),
        Row(id=4, name="dee", score=decimal.Decimal("0.5"), tags=["w"], ok=False),
    ]
    assert rows[0].name == "ann" and len(schema) == 5
    assert schema.get_type_info() == Types.ROW_NAMED(
        ["id", "name", "score", "tags", "ok"],
        [Types.INT(), Types.STRING(), Types.BIG_DEC(), Types.LIST(Types.STRING()), Types.BOOLEAN()],
    )


def test_csv_errors_name_the_file_line_and_column(tmp_path):
    schema = CsvSchema.builder().add_number_column("n").add_string_column("s").build()
    (tmp_path / "bad.csv").write_text("1,a\nx,b\n")
    with pytest.raises(JobExecutionError) as ei:
        read_all(CsvReaderFormat.for_schema(schema), tmp_path, parallelism=1)
    cause = ei.value.__cause__
    assert isinstance(cause, InputFormatError)
    assert "bad.csv" in str(cause) and "byte 4" in str(cause) and "'n'" in str(cause)
    (tmp_path / "bad.csv").write_text("1,a,extra\n")
    with pytest.raises(JobExecutionError, match="3 CSV fields, the schema has 2"):
        read_all(CsvReaderFormat.for_schema(schema), tmp_path, parallelism=1)
    with pytest.raises(ConfigurationError, match="single char"):
        CsvSchema.builder().set_column_separator("||")
    with pytest.raises(ConfigurationError, match="numeric"):
        CsvSchema.builder().add_number_column("x", number_type=Types.STRING())


def test_json_lines_into_rows_or_plain_values(tmp_path):
    lines = [
        {"id": 1, "name": "a", "at": "2024-01-02T03:04:05", "tags": ["x"]},
        {"id": 2, "tags": []},
        {"id": 3, "name": "c", "at": None, "tags": ["y", "z"], "extra": 1},
    ]
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    row = Types.ROW_NAMED(
        ["id", "name", "at", "tags"],
        [Types.LONG(), Types.STRING(), Types.SQL_TIMESTAMP(), Types.LIST(Types.STRING())],
    )
    rows = sorted(read_all(JsonLinesReaderFormat.for_type_info(row), tmp_path), key=lambda r: r.id)
    assert rows == [
        Row(id=1, name="a", at=dt.datetime(2024, 1, 2, 3, 4, 5), tags=["x"]),
        Row(id=2, name=None, at=None, tags=[]),
        Row(id=3, name="c", at=None, tags=["y", "z"]),
    ]
    plain = read_all(JsonLinesReaderFormat.for_type_info(), tmp_path)
    assert sorted(plain, key=lambda d: d["id"]) == lines
    strict = JsonRowDeserializationSchema.builder().type_info(row).fail_on_missing_field().build()
    with pytest.raises(JobExecutionError, match="field 'name' is missing"):
        read_all(JsonLinesReaderFormat.for_schema(strict), tmp_path)


def test_json_row_schemas_round_trip_and_skip_errors_when_asked():
    row = Types.ROW_NAMED(["k", "v"], [Types.STRING(), Types.DOUBLE()])
    ser = JsonRowSerializationSchema.builder().with_type_info(row).build()
    de = JsonRowDeserializationSchema.builder().type_info(row).build()
    assert ser.serialize(Row(k="a", v=1.5)) == b'{"k":"a","v":1.5}'
    assert de.deserialize(ser.serialize(("b", 2.0))) == Row(k="b", v=2.0)
    lenient = JsonRowDeserializationSchema.builder().type_info(row).ignore_parse_errors().build()
    assert lenient.deserialize(b"{not json") is None
    with pytest.raises(InputFormatError, match="ignore_parse_errors"):
        de.deserialize(b"{not json")


# -- a monitored directory with checkpointed positions ------------------------------------------


def monitored_job(src: Path, chk: Path, max_epochs: int, restore: bool = False,
                  fail: Any = None) -> tuple[Any, CollectSink]:  # fmt: skip
    env = envs.make_env(2, max_records=7, max_epochs=max_epochs, restarts=2 if fail else 0)
    env.set_clock(TickingClock())
    env.enable_checkpointing(2500)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(chk))
    env.get_checkpoint_config().set_num_retained_checkpoints(2)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(
        ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    )
    if restore:
        env.set_restore_path(str(chk))
    source = (
        FileSource.for_record_stream_format(JsonLinesReaderFormat.for_type_info(), str(src))
        .monitor_continuously(dt.timedelta(seconds=1))
        .build()
    )
    sink = CollectSink()
    ds = env.from_source(source, None, "monitored")
    if fail is not None:
        ds = ds.map(fail)
    ds.map(lambda v: v["k"]).sink_to(sink)
    return env, sink


def jsonl(d: Path, name: str, n: int) -> list[str]:
    keys = [f"{name}-{i}" for i in range(n)]
    (d / name).write_text("".join(json.dumps({"k": k}) + "\n" for k in keys))
    return keys


def test_a_stopped_monitoring_job_resumes_from_its_checkpointed_positions(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    expected = jsonl(src, "a.jsonl", 30) + jsonl(src, "b.jsonl", 25)
    env, first = monitored_job(src, tmp_path / "chk", max_epochs=3)
    env.execute("monitored-1")  # stops after 3 epochs of 2 x 7 records: mid-file
    got1 = list(first.get_results())
    assert 0 < len(got1) < len(expected)
    expected += jsonl(src, "c.jsonl", 12)  # arrives while the job is stopped
    env, second = monitored_job(src, tmp_path / "chk", max_epochs=12, restore=True)
    env.execute("monitored-2")
    got = got1 + list(second.get_results())
    assert sorted(got) == sorted(expected)  # every record once: no loss, no duplicate


def test_a_monitoring_job_that_fails_replays_from_the_checkpointed_positions(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    expected = jsonl(src, "a.jsonl", 40) + jsonl(src, "b.jsonl", 33)
    fail = FailOnce(str(tmp_path), epoch=4, subtask=1, after_records=2)
    env, sink = monitored_job(src, tmp_path / "chk", max_epochs=9, fail=fail)
    env.execute("monitored-failing")
    assert fail.fired
    assert sorted(sink.get_results()) == sorted(expected)


def test_checkpoint_ids_keep_growing_after_a_restore_into_a_new_job(tmp_path):
    # Flink's checkpoint id counter restarts at the restored id + 1; a restored job writes
    # into a new job directory, and its ids must still grow (write-ahead sinks and the
    # committers compare them)
    src = tmp_path / "in"
    src.mkdir()
    jsonl(src, "a.jsonl", 60)
    env, _ = monitored_job(src, tmp_path / "chk", max_epochs=4)
    env.execute("first")
    first = max(int(p.name.split("-")[1]) for p in (tmp_path / "chk").glob("*/chk-*"))
    jobs = {p.name for p in (tmp_path / "chk").iterdir()}
    env, _ = monitored_job(src, tmp_path / "chk", max_epochs=8, restore=True)
    env.execute("second")
    (new_job,) = {p.name for p in (tmp_path / "chk").iterdir()} - jobs
    ids = [int(p.name.split("-")[1]) for p in (tmp_path / "chk" / new_job).glob("chk-*")]
    assert ids and min(ids) > first


def test_a_file_source_stream_has_its_format_s_type_as_in_pyflink(tmp_path):
    from streamstate.datastream.connectors import StreamFormat

    (tmp_path / "a.csv").write_text("1,x\n")
    schema = CsvSchema.builder().add_number_column("n").add_string_column("s").build()
    row = Types.ROW_NAMED(["k"], [Types.STRING()])
    env = envs.make_env(1)
    for fmt, expected in [
        (CsvReaderFormat.for_schema(schema), schema.get_type_info()),
        (JsonLinesReaderFormat.for_type_info(row), row),
        (StreamFormat.text_line_format(), Types.STRING()),
    ]:
        source = FileSource.for_record_stream_format(fmt, str(tmp_path)).build()
        assert env.from_source(source, None, "files").get_type() == expected
    # a type given to from_source wins
    text = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path))
    assert env.from_source(text.build(), None, "t", Types.PICKLED_BYTE_ARRAY()).get_type() == (
        Types.PICKLED_BYTE_ARRAY()
    )
