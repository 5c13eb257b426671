"""Files on Spark: a CSV FileSource (header, typed columns) -> keyed running sum -> a
Parquet FileSink in hourly DateTime buckets; a Python worker exits mid-job and the
restart leaves exactly the failure-free rows, nothing hidden left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from streamstate.common import Row, Types
from streamstate.datastream import KeyedProcessFunction
from streamstate.datastream.connectors import BucketAssigner, FileSink, FileSource, OutputFileConfig
from streamstate.datastream.formats.csv import CsvReaderFormat, CsvSchema
from streamstate.datastream.formats.parquet import ParquetBulkWriters
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.testing import FailOnce, TickingClock
from tests.support import envs

OUT = Types.ROW_NAMED(["id", "sensor", "total"], [Types.LONG(), Types.STRING(), Types.DOUBLE()])


class Total(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.DOUBLE()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        t = (self.total.value() or 0.0) + value.reading
        self.total.update(t)
        yield Row(id=value.id, sensor=value.sensor, total=t)


def test_csv_to_parquet_buckets_on_spark_survive_a_worker_exit(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    totals: dict[str, float] = {}
    for f in range(3):
        lines = ["id,sensor,reading"]
        for j in range(40):
            i = f * 40 + j
            sensor, reading = f"s{i % 4}", float(i % 7)
            totals[sensor] = totals.get(sensor, 0.0) + reading
            lines.append(f"{i},{sensor},{reading}")
        (src / f"part-{f}.csv").write_text("\n".join(lines) + "\n")
    schema = (
        CsvSchema.builder()
        .add_number_column("id")
        .add_string_column("sensor")
        .add_number_column("reading", number_type=Types.DOUBLE())
        .set_use_header()
        .build()
    )
    out = tmp_path / "out"
    env = envs.make_env(2, spark=spark, max_records=15, restarts=2)
    env.set_clock(TickingClock(start_ms=1_700_000_000_000))  # 2023-11-14 22:13:20 UTC
    env.enable_checkpointing(2500)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    fail = FailOnce(str(tmp_path), epoch=4, subtask=0, mode="exit", after_records=2)
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(src))
    sink = (
        FileSink.for_bulk_format(str(out), ParquetBulkWriters.for_row_type(OUT))
        .with_bucket_assigner(BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd--HH", "UTC"))
        .with_output_file_config(OutputFileConfig("part", ".parquet"))
        .build()
    )
    (
        env.from_source(source.build(), None, "csv")
        .map(fail)
        .key_by(lambda r: r.sensor)
        .process(Total(), output_type=OUT)
        .sink_to(sink)
        .uid("parquet")
    )
    result = env.execute("csv-to-parquet")
    assert fail.fired and result.get_accumulator_result("restarts") == 1
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert files and all(not p.name.startswith(".") for p in files)  # nothing left hidden
    assert {p.parent.name for p in files} <= {"2023-11-14--22", "2023-11-14--23"}
    rows = sorted(
        (r["id"], r["sensor"], r["total"]) for p in files for r in pq.read_table(p).to_pylist()
    )
    assert [r[0] for r in rows] == list(range(120))  # every record once
    final: dict[str, float] = {}
    for _, sensor, total in rows:
        final[sensor] = max(final.get(sensor, 0.0), total)
    assert final == totals
    assert Path(files[0]).suffix == ".parquet"
