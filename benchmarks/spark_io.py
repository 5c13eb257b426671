"""Spark in and out: what ``from_dataframe``, ``SparkTableSink`` and the PostgreSQL
exactly-once sinks cost (issue 15).

Spark (``local[2]``, one SparkSession, the DataFrame cached before timing):

* baselines: ``df.collect()`` and ``df.count()`` of the same DataFrame (rows ``(id, k,
  v)``, 4 partitions);
* ``env.from_dataframe(df)`` into a ``DiscardingSink`` (parallelism 2, epochs of
  ``--epoch-records`` per reader, a checkpoint every epoch): the whole job including
  staging, and the staging alone;
* ``env.from_collection(rows)`` of the same rows into a ``DiscardingSink`` (same job);
* the ``from_dataframe`` job into ``SparkTableSink(parquet)`` instead.

PostgreSQL (a throwaway server from ``tests/support/postgres.py``, in-process runner,
parallelism 1, a checkpoint every epoch): ``JdbcSink.exactly_once_sink`` (prepared
transactions), ``PostgresWriteAheadSink`` (rows and commit record in one transaction
after the checkpoint) and ``JdbcSink.sink`` with ``INSERT ... ON CONFLICT`` (upserts).

Figures are rows/s, best of ``--repeat`` after a warm-up; ratios are within one run.
Run: ``python -m benchmarks.spark_io [--rows N] [--pg-rows N] [--repeat N]
[--no-postgres] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks.results import Sitting, add_result_option, figures_table, publish
from benchmarks.sinks import (
    BATCH,
    INSERT,
    best,
    exactly_once_sink,
    postgres_job,
    rows,
    timed,
    upsert_sink,
)
from streamstate.common import Configuration
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.datastream.connectors import DiscardingSink, SparkTableSink
from streamstate.datastream.connectors.write_ahead import PostgresWriteAheadSink
from streamstate.testing import TickingClock


def spark_env(spark: Any, epoch_records: int, chk: str) -> StreamExecutionEnvironment:
    conf = Configuration()
    conf.set_string("execution.epoch.max-records", str(epoch_records))
    conf.set_string("execution.progress", "none")
    conf.set_string("rest.enabled", "false")
    env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
    env.set_parallelism(2)
    env.set_clock(TickingClock())
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(chk)
    return env


def spark_figures(spark: Any, n: int, epoch_records: int, repeat: int) -> dict[str, Any]:
    df = (
        spark.range(n)
        .selectExpr("id", "concat('key-', CAST(id % 1000 AS STRING)) AS k", "id * 0.5 AS v")
        .repartition(4)
        .cache()
    )
    df.count()
    data = [tuple(r) for r in df.collect()]
    stage_secs: list[float] = []

    def job(source: Callable[[StreamExecutionEnvironment], Any], sink: Callable[[str], Any]):
        def run(r: int) -> float:
            with tempfile.TemporaryDirectory() as tmp:
                env = spark_env(spark, epoch_records, f"{tmp}/chk")
                t0 = time.perf_counter()
                source(env).sink_to(sink(tmp))
                return time.perf_counter() - t0 + timed(lambda: env.execute("spark-io"))

        return run

    def staged(env: StreamExecutionEnvironment) -> Any:
        t0 = time.perf_counter()
        ds = env.from_dataframe(df)
        stage_secs.append(time.perf_counter() - t0)
        return ds

    secs = {
        "df.collect()": best(repeat, lambda r: timed(df.collect)),
        "df.count()": best(repeat, lambda r: timed(df.count)),
        "from_dataframe -> DiscardingSink": best(repeat, job(staged, lambda tmp: DiscardingSink())),
        "from_collection -> DiscardingSink": best(
            repeat, job(lambda env: env.from_collection(data), lambda tmp: DiscardingSink())
        ),
        "from_dataframe -> SparkTableSink(parquet)": best(
            repeat, job(staged, lambda tmp: SparkTableSink(f"{tmp}/table"))
        ),
    }
    secs["from_dataframe staging alone"] = min(stage_secs)
    rate = {k: round(n / s) for k, s in secs.items()}
    fd = rate["from_dataframe -> DiscardingSink"]
    df.unpersist()
    return {
        "rows": n,
        "rows_per_s": rate,
        "from_dataframe / df.collect()": round(fd / rate["df.collect()"], 3),
        "from_dataframe / from_collection": round(
            fd / rate["from_collection -> DiscardingSink"], 2
        ),
        "from_dataframe / df.count()": round(fd / rate["df.count()"], 4),
        "SparkTableSink / DiscardingSink": round(
            rate["from_dataframe -> SparkTableSink(parquet)"] / fd, 2
        ),
    }


def postgres_figures(url: str, data: list[Any], epoch_records: int, repeat: int) -> dict[str, Any]:
    job = postgres_job(url, data, epoch_records)
    secs = {
        "JdbcSink.exactly_once_sink": best(
            repeat, job(lambda t: exactly_once_sink(url, t), "bench_eo")
        ),
        "PostgresWriteAheadSink": best(
            repeat,
            job(
                lambda t: PostgresWriteAheadSink(INSERT.format(t), url, batch_size=BATCH),
                "bench_wal",
            ),
        ),
        "JdbcSink.sink upsert": best(repeat, job(lambda t: upsert_sink(url, t), "bench_upsert")),
    }
    n = len(data)
    rate = {k: round(n / s) for k, s in secs.items()}
    up = rate["JdbcSink.sink upsert"]
    return {
        "rows": n,
        "rows_per_s": rate,
        "exactly_once / upsert": round(rate["JdbcSink.exactly_once_sink"] / up, 2),
        "write_ahead / upsert": round(rate["PostgresWriteAheadSink"] / up, 2),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--pg-rows", type=int, default=100_000)
    p.add_argument("--epoch-records", type=int, default=25_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument("--json", default=None)
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.spark_io", argv)
    from benchmarks.peers import spark_stateful as peers

    spark = peers.build_spark("streamstate-spark-io")
    spark.sparkContext.setLogLevel("ERROR")
    out: dict[str, Any] = {
        "spark": spark_figures(spark, args.rows, args.epoch_records, args.repeat)
    }
    print(json.dumps(out["spark"], indent=2), flush=True)
    spark.stop()
    if not args.no_postgres:
        from tests.support.postgres import postgres_server

        with postgres_server() as url:
            out["postgres"] = postgres_figures(
                url, rows(args.pg_rows), args.epoch_records, args.repeat
            )
        print(json.dumps(out["postgres"], indent=2), flush=True)
    publish("spark_io", lambda: sitting.run([figures_table(out)]), args.result, args.json, out)


if __name__ == "__main__":
    main()
