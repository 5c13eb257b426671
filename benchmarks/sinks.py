"""Exactly-once sinks: what the transactions and the file formats cost (issue 15).

PostgreSQL (a throwaway server, ``tests/support/postgres.py``, or ``--url``): the same
rows ``(i, k, v)`` written by

* ``baseline``: one psycopg connection, ``executemany`` in batches, autocommit (no
  streamstate, no transaction around the batches) and ``COPY``;
* ``JdbcSink.exactly_once_sink``: a transaction per subtask and epoch, ``PREPARE
  TRANSACTION`` at its end, ``COMMIT PREPARED`` at the checkpoint;
* ``JdbcSink.sink`` with ``INSERT ... ON CONFLICT DO UPDATE`` (at-least-once upserts).

Files: the same rows through ``FileSink.for_row_format`` (text lines), through
``FileSink.for_bulk_format(ParquetBulkWriters...)``, and through a ``DiscardingSink``
(the job without a sink's cost), plus pyarrow writing the rows to one Parquet file
directly.

Every job: in-process runner, parallelism 1, a checkpoint every epoch of
``--epoch-records``. Figures are rows/s, best of ``--repeat`` runs after a warm-up;
ratios are within the same run. Run: ``python -m benchmarks.sinks`` (``--rows N``,
``--no-postgres``, ``--no-files``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.results import Sitting, add_result_option, figures_table, record
from streamstate.common import Configuration, Encoder, Types
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.datastream.connectors import BucketAssigner, DiscardingSink, FileSink
from streamstate.datastream.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
    JdbcSink,
)
from streamstate.datastream.formats.parquet import ParquetBulkWriters
from streamstate.testing import TickingClock

ROW = Types.ROW_NAMED(["i", "k", "v"], [Types.LONG(), Types.STRING(), Types.DOUBLE()])
BATCH = 1000


def rows(n: int) -> list[tuple[int, str, float]]:
    return [(i, f"key-{i % 1000}", i * 0.5) for i in range(n)]


def env_for(epoch_records: int, chk: str) -> StreamExecutionEnvironment:
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", str(epoch_records))
    conf.set_string("execution.progress", "none")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    env.set_clock(TickingClock())
    env.enable_checkpointing(1)  # the clock ticks 1 s per reading: every epoch
    env.get_checkpoint_config().set_checkpoint_storage_dir(chk)
    return env


def best(repeat: int, run: Callable[[int], float]) -> float:
    run(-1)  # warm-up
    return min(run(i) for i in range(repeat))


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# -- PostgreSQL -------------------------------------------------------------------------------

INSERT = "INSERT INTO {} (i, k, v) VALUES (%s, %s, %s)"
UPSERT = INSERT + " ON CONFLICT (i) DO UPDATE SET k = EXCLUDED.k, v = EXCLUDED.v"


def fresh_table(url: str, name: str) -> str:
    """Table ``name`` of rows ``(i, k, v)``, dropped and created empty."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"DROP TABLE IF EXISTS {name}")
        c.execute(f"CREATE TABLE {name} (i BIGINT PRIMARY KEY, k TEXT, v DOUBLE PRECISION)")
    return name


def jdbc_options(url: str) -> tuple[Any, Any]:
    """The connection and execution options (batches of ``BATCH``) of the JDBC sinks."""
    conn = JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(url).build()
    return conn, JdbcExecutionOptions.builder().with_batch_size(BATCH).build()


def exactly_once_sink(url: str, table: str) -> Any:
    """``JdbcSink.exactly_once_sink`` inserting into ``table`` (transaction ids prefixed by it)."""
    conn, execution = jdbc_options(url)
    eo = JdbcExactlyOnceOptions.builder().with_transaction_id_prefix(table).build()
    return JdbcSink.exactly_once_sink(INSERT.format(table), None, conn, execution, eo)


def upsert_sink(url: str, table: str) -> Any:
    """``JdbcSink.sink`` upserting into ``table`` (``INSERT ... ON CONFLICT DO UPDATE``)."""
    conn, execution = jdbc_options(url)
    return JdbcSink.sink(UPSERT.format(table), None, conn, execution)


def postgres_job(
    url: str, data: list[Any], epoch_records: int
) -> Callable[[Callable[[str], Any], str], Callable[[int], float]]:
    """``job(sink_for, name)``: a timed run writing ``data`` through ``sink_for(table)`` into
    table ``name``, fresh each run (in-process runner, a checkpoint every epoch)."""

    def job(sink_for: Callable[[str], Any], name: str) -> Callable[[int], float]:
        def run(r: int) -> float:
            t = fresh_table(url, name)
            with tempfile.TemporaryDirectory() as chk:
                env = env_for(epoch_records, chk)
                env.from_collection(data).add_sink(sink_for(t))
                return timed(lambda: env.execute(name))

        return run

    return job


def postgres_figures(url: str, data: list[Any], epoch_records: int, repeat: int) -> dict[str, Any]:
    import psycopg

    def baseline_inserts(r: int) -> float:
        t = fresh_table(url, "bench_plain")
        with psycopg.connect(url, autocommit=True) as c:

            def go() -> None:
                with c.cursor() as cur:
                    for s in range(0, len(data), BATCH):
                        cur.executemany(INSERT.format(t), data[s : s + BATCH])

            return timed(go)

    def baseline_copy(r: int) -> float:
        t = fresh_table(url, "bench_copy")
        with psycopg.connect(url, autocommit=True) as c:

            def go() -> None:
                with c.cursor() as cur, cur.copy(f"COPY {t} (i, k, v) FROM STDIN") as cp:
                    for row in data:
                        cp.write_row(row)

            return timed(go)

    job = postgres_job(url, data, epoch_records)
    exactly_once = job(lambda t: exactly_once_sink(url, t), "bench_exactly_once")
    upsert = job(lambda t: upsert_sink(url, t), "bench_upsert")
    n = len(data)
    secs = {
        "baseline_executemany": best(repeat, baseline_inserts),
        "baseline_copy": best(repeat, baseline_copy),
        "exactly_once_sink": best(repeat, exactly_once),
        "upsert_sink": best(repeat, upsert),
    }
    rate = {k: round(n / s) for k, s in secs.items()}
    return {
        "rows_per_s": rate,
        "exactly_once / baseline_executemany": round(
            rate["exactly_once_sink"] / rate["baseline_executemany"], 2
        ),
        "exactly_once / upsert_sink": round(rate["exactly_once_sink"] / rate["upsert_sink"], 2),
        "upsert_sink / baseline_executemany": round(
            rate["upsert_sink"] / rate["baseline_executemany"], 2
        ),
        "exactly_once / baseline_copy": round(rate["exactly_once_sink"] / rate["baseline_copy"], 2),
    }


# -- files ------------------------------------------------------------------------------------


def file_figures(data: list[Any], epoch_records: int, repeat: int) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def job(sink_for: Callable[[str], Any], name: str) -> Callable[[int], float]:
        def run(r: int) -> float:
            with tempfile.TemporaryDirectory() as d:
                env = env_for(epoch_records, str(Path(d) / "chk"))
                env.from_collection(data).sink_to(sink_for(str(Path(d) / "out")))
                return timed(lambda: env.execute(name))

        return run

    base = BucketAssigner.base_path_bucket_assigner()
    row_format = job(
        lambda out: (
            FileSink.for_row_format(out, Encoder.simple_string_encoder())
            .with_bucket_assigner(base)
            .build()
        ),
        "bench_row_format",
    )
    parquet = job(
        lambda out: (
            FileSink.for_bulk_format(out, ParquetBulkWriters.for_row_type(ROW))
            .with_bucket_assigner(base)
            .build()
        ),
        "bench_parquet",
    )
    discard = job(lambda out: DiscardingSink(), "bench_discard")

    def pyarrow_direct(r: int) -> float:
        with tempfile.TemporaryDirectory() as d:

            def go() -> None:
                cols = list(zip(*data, strict=True))
                table = pa.table({"i": cols[0], "k": cols[1], "v": cols[2]})
                pq.write_table(table, str(Path(d) / "direct.parquet"))

            return timed(go)

    n = len(data)
    secs = {
        "discarding_sink": best(repeat, discard),
        "file_sink_row_format": best(repeat, row_format),
        "file_sink_parquet": best(repeat, parquet),
        "pyarrow_direct": best(repeat, pyarrow_direct),
    }
    rate = {k: round(n / s) for k, s in secs.items()}
    return {
        "rows_per_s": rate,
        "row_format / discarding": round(rate["file_sink_row_format"] / rate["discarding_sink"], 2),
        "parquet / discarding": round(rate["file_sink_parquet"] / rate["discarding_sink"], 2),
        "parquet / row_format": round(rate["file_sink_parquet"] / rate["file_sink_row_format"], 2),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--epoch-records", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--url", help="a PostgreSQL conninfo URL (default: a throwaway server)")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--no-files", action="store_true")
    add_result_option(ap)
    args = ap.parse_args(argv)
    sitting = Sitting.begin("benchmarks.sinks", argv)
    data = rows(args.rows)
    report: dict[str, Any] = {"rows": args.rows, "epoch_records": args.epoch_records}
    if not args.no_files:
        report["files"] = file_figures(data, args.epoch_records, args.repeat)
    if not args.no_postgres:
        if args.url:
            report["postgres"] = postgres_figures(args.url, data, args.epoch_records, args.repeat)
        else:
            from tests.support.postgres import postgres_server

            with postgres_server() as url:
                report["postgres"] = postgres_figures(url, data, args.epoch_records, args.repeat)
    print(json.dumps(report, indent=2))
    if args.result:
        record("sinks", sitting.run([figures_table(report)]))


if __name__ == "__main__":
    main()
