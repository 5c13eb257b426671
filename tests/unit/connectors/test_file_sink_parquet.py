"""FileSink.for_bulk_format with ParquetBulkWriters (pyarrow): Parquet part files that roll
on every checkpoint (as Flink's bulk formats), exactly-once through a failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from streamstate.common import Row, Types
from streamstate.datastream.connectors import (
    BucketAssigner,
    FileSink,
    OutputFileConfig,
    RollingPolicy,
)
from streamstate.datastream.formats.parquet import ParquetBulkWriters
from streamstate.errors import ConfigurationError
from streamstate.testing import FailOnce, TickingClock
from tests.support import envs

ROW = Types.ROW_NAMED(["id", "name", "score"], [Types.LONG(), Types.STRING(), Types.DOUBLE()])


def parts(out: Path) -> list[Path]:
    return sorted(f for f in out.rglob("*.parquet") if not f.name.startswith("."))


def rows(out: Path) -> list[tuple[Any, ...]]:
    got = []
    for f in parts(out):
        t = pq.read_table(f)
        got += list(zip(*(t.column(n).to_pylist() for n in t.column_names), strict=True))
    return sorted(got)


def run(out: Path, chk: Path, n: int, *, interval_ms: int, fail: Any = None, as_row: bool = True) -> Any:  # fmt: skip
    env = envs.make_env(2, max_records=50, restarts=2 if fail else None)
    env.set_clock(TickingClock())
    env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(chk))
    ds = env.from_sequence(1, n)
    if fail is not None:
        ds = ds.map(fail)
    if as_row:
        ds = ds.map(lambda i: Row(id=i, name=f"n{i}", score=i / 2), output_type=ROW)
    else:
        ds = ds.map(lambda i: (i, f"n{i}", i / 2))
    sink = (
        FileSink.for_bulk_format(str(out), ParquetBulkWriters.for_row_type(ROW))
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_output_file_config(OutputFileConfig("part", ".parquet"))
        .build()
    )
    ds.sink_to(sink)
    return env.execute("parquet-sink")


def expected(n: int) -> list[tuple[Any, ...]]:
    return [(i, f"n{i}", i / 2) for i in range(1, n + 1)]


def test_parquet_parts_roll_on_every_checkpoint(tmp_path):
    out = tmp_path / "out"
    result = run(out, tmp_path / "chk", 400, interval_ms=1)  # a checkpoint every epoch
    assert rows(out) == expected(400)
    # 4 epochs of 2 x 50 records, each a checkpoint: one part per subtask and epoch
    assert len(parts(out)) == 8 and result.get_accumulator_result("checkpoints") >= 4
    assert pq.read_schema(parts(out)[0]).names == ["id", "name", "score"]


def test_parquet_part_spanning_epochs_is_merged_into_one_file(tmp_path):
    out = tmp_path / "out"
    run(out, tmp_path / "chk", 400, interval_ms=3_600_000, as_row=False)  # tuples, one checkpoint
    assert rows(out) == expected(400)
    assert len(parts(out)) == 2  # one part per subtask, merged from its 4 epoch segments
    assert not [f for f in out.rglob(".*") if f.is_file()]


def test_parquet_exactly_once_through_a_failure(tmp_path):
    out = tmp_path / "out"
    fail = FailOnce(str(tmp_path), epoch=4, subtask=0, after_records=5)
    run(out, tmp_path / "chk", 600, interval_ms=2500, fail=fail)
    assert fail.fired and rows(out) == expected(600)


def test_bulk_builder_checks_its_arguments(tmp_path):
    with pytest.raises(ConfigurationError, match="ROW_NAMED"):
        ParquetBulkWriters.for_row_type(Types.LONG())
    with pytest.raises(ConfigurationError, match="cannot write"):
        ParquetBulkWriters.for_row_type(Types.ROW_NAMED(["x"], [Types.PICKLED_BYTE_ARRAY()]))
    with pytest.raises(ConfigurationError, match="BulkWriterFactory"):
        FileSink.for_bulk_format(str(tmp_path), object())
    builder = FileSink.for_bulk_format(str(tmp_path), ParquetBulkWriters.for_row_type(ROW))
    with pytest.raises(ConfigurationError, match="checkpoints only"):
        builder.with_rolling_policy(RollingPolicy.default_rolling_policy())
