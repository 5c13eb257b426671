"""Event-time tumbling window count: streamstate vs Spark Structured Streaming, same run.

Workload (issue 5): 1,000,000 records ``(key, ts)`` over 10,000 keys, ``key =
f"k{i % keys}"``, ``ts = BASE + i // 10 - (i * 7919) % 1000`` ms (a 100 s span, up to 1 s
out of order), a count per key and 10 s tumbling event-time window with a 1 s bounded
out-of-orderness watermark, parallelism 2. Reported:

* streamstate records/s as one epoch and as 10 epochs (watermarks advance and windows
  fire at every epoch end), checkpointing off;
* Spark Structured Streaming's ``withWatermark("ts", "1 second").groupBy(window("ts",
  "10 seconds"), "key").count()`` on the same rows, read as 1 or 10 Parquet files with
  ``maxFilesPerTrigger=1`` and ``trigger(availableNow=True)`` (1 or 10 micro-batches),
  RocksDB state store, ``update`` output mode into the memory sink;
* the ratio streamstate / Spark for each.

Both sides are verified: every (key, window) count, summed, is the number of records.
Fairness notes: streamstate emits each (key, window) count once, when the watermark
passes the window's end (Flink's default trigger; the final watermark at end of input
fires the rest); Spark's ``update`` mode emits a row per (key, window) touched in each
micro-batch (so more rows over 10 batches) and, unlike ``append``, does not wait for the
watermark. Spark's aggregation is compiled JVM code (no Python per record); streamstate
runs the window operator, the assigner, the trigger and the AggregateFunction in Python.

``--state-backends hashmap,rocksdb`` runs streamstate on each keyed state backend
(one row per backend; RocksDB databases under the system temp dir).
``--source-parallelism 1,2`` reads the collection with 1 and with 2 subtasks (a row each;
adjacent stripes of every epoch, as K1's ``--source-parallelism``): with one reader the
source stage (reading, timestamps, the shuffle write of every record) runs in one task.

Run: ``python -m benchmarks.window_count [--records N] [--repeat 2] [--no-spark]
[--state-backends hashmap,rocksdb]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import tempfile
import time
import uuid
from typing import Any

from benchmarks.jobs.window_count import Count, KeyWindowCount, Ts
from benchmarks.keyed_count import previous_job_cleaned_up
from benchmarks.process_cpu import KINDS, KindMeter, measured
from benchmarks.results import Sitting, add_result_option, rates_table, record
from streamstate.common import Configuration, Duration, WatermarkStrategy
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.datastream.connectors import DiscardingSink
from streamstate.datastream.window import TumblingEventTimeWindows

WINDOW_MS = 10_000
OUT_OF_ORDER_MS = 1_000
#: 2020-09-13: Spark's initial watermark is the epoch, so times must lie well after it
BASE_MS = 1_600_000_000_000


def workload(records: int, keys: int) -> list[tuple[str, int]]:
    return [
        (f"k{i % keys}", BASE_MS + i // 10 - (i * 7919) % OUT_OF_ORDER_MS) for i in range(records)
    ]


def expected_windows(data: list[tuple[str, int]]) -> int:
    return len({(k, ts - ts % WINDOW_MS) for k, ts in data})


def run_streamstate(
    spark: Any,
    data: list[Any],
    epochs: int,
    backend: str = "hashmap",
    readers: int = 1,
    runner: str = "rdd",
) -> tuple[float, dict[str, Any]]:
    """``readers``: the collection's reader subtasks (adjacent stripes of every epoch);
    ``runner``: ``execution.runner`` (``rdd``, the classic default, or ``barrier``)."""
    conf = Configuration()
    if runner != "rdd":  # unset, older revisions run too (compare_revisions)
        conf.set_string("execution.runner", runner)
    # max-records is per reader subtask: an epoch reads len(data) / epochs records in all
    conf.set_string("execution.epoch.max-records", str(-(-len(data) // (epochs * readers))))
    conf.set_string("state.backend.type", backend)
    env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
    env.set_parallelism(2)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(OUT_OF_ORDER_MS)
    ).with_timestamp_assigner(Ts())
    counts = (
        env.from_collection(data)
        .set_parallelism(readers)
        .assign_timestamps_and_watermarks(strategy)
        .key_by(lambda v: v[0])
        .window(TumblingEventTimeWindows.of(Duration.of_millis(WINDOW_MS)))
        .aggregate(Count(), KeyWindowCount())
        .uid("window-count")
    )
    counts.add_sink(DiscardingSink())
    previous_job_cleaned_up()  # as keyed_count: not inside the last job's host stop
    t0 = time.perf_counter()
    result = env.execute("window-count-bench")
    dt = time.perf_counter() - t0
    acc = result.get_all_accumulator_results()
    # every record reached the window operator exactly once
    assert acc.get("records-in.window-count", len(data)) == len(data), acc
    return len(data) / dt, acc


def run_spark(spark: Any, data: list[tuple[str, int]], batches: int) -> float:
    """Spark Structured Streaming windowed count over Parquet files; returns records/s."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tempfile.mkdtemp(prefix="streamstate-window-peer-")
    name = f"window_peer_{uuid.uuid4().hex[:8]}"
    try:
        data_dir = os.path.join(root, "input")
        os.makedirs(data_dir)
        n = len(data)
        bounds = [n * b // batches for b in range(batches + 1)]
        for b in range(batches):
            part = data[bounds[b] : bounds[b + 1]]
            table = pa.table(
                {
                    "key": pa.array([k for k, _ in part], type=pa.string()),
                    "ts": pa.array([t for _, t in part], type=pa.timestamp("ms")),
                }
            )
            path = os.path.join(data_dir, f"part-{b:05d}.parquet")
            pq.write_table(table, path)
            os.utime(path, (1_600_000_000 + b, 1_600_000_000 + b))

        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        src = (
            spark.readStream.schema("key string, ts timestamp")
            .option("maxFilesPerTrigger", 1)
            .parquet(data_dir)
        )
        counts = (
            src.withWatermark("ts", "1 second").groupBy(F.window("ts", "10 seconds"), "key").count()
        )
        q = (
            counts.writeStream.format("memory")
            .queryName(name)
            .outputMode("update")
            .option("checkpointLocation", os.path.join(root, "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        dt = time.perf_counter() - t0
        if q.exception() is not None:
            raise RuntimeError(f"Spark windowed count failed: {q.exception()}")
        final = spark.sql(
            f"SELECT window.start AS w, key, max(count) AS c FROM {name} GROUP BY window.start, key"
        ).collect()
        total = sum(r["c"] for r in final)
        if total != n or len(final) != expected_windows(data):
            raise AssertionError(f"Spark: {len(final)} windows summing to {total}, expected {n}")
        spark.catalog.dropTempView(name)
        return n / dt
    finally:
        shutil.rmtree(root, ignore_errors=True)


def verify_streamstate(spark: Any, data: list[Any]) -> None:
    """One checked run: every record counted once, one result per (key, window)."""
    env = StreamExecutionEnvironment.get_execution_environment(spark=spark)
    env.set_parallelism(2)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(OUT_OF_ORDER_MS)
    ).with_timestamp_assigner(Ts())
    rows = list(
        env.from_collection(data)
        .assign_timestamps_and_watermarks(strategy)
        .key_by(lambda v: v[0])
        .window(TumblingEventTimeWindows.of(WINDOW_MS))
        .aggregate(Count(), KeyWindowCount())
        .execute_and_collect()
    )
    total = sum(r[2] for r in rows)
    if total != len(data) or len(rows) != expected_windows(data):
        raise AssertionError(f"streamstate: {len(rows)} windows summing to {total}")


def best_of(repeat: int, fn: Any) -> float:
    return max(fn() for _ in range(repeat))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--no-spark", action="store_true", help="skip Structured Streaming")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument(
        "--state-backends", default="hashmap", help="comma-separated keyed state backends"
    )
    p.add_argument(
        "--source-parallelism",
        default="1",
        help="comma-separated reader counts of the collection (a row each; the first is the "
        "ratio's base; Flink's fromCollection reads with 1)",
    )
    p.add_argument(
        "--runners",
        default="rdd",
        help="comma-separated epoch runners (execution.runner: rdd, barrier), a row each",
    )
    p.add_argument(
        "--epochs",
        default="1,10",
        help="comma-separated streamstate cells: the records as 1 epoch and as 10 (Spark's "
        "micro-batches follow: 1 and 10); e.g. 1 to measure the one-epoch cell alone",
    )
    p.add_argument(
        "--kind-cpu",
        action="store_true",
        help="print each streamstate run's CPU seconds per kind of process (the subtask "
        "hosts apart: benchmarks/process_cpu.py; needs a writable cgroup-v1 cpuacct)",
    )
    add_result_option(p)
    args = p.parse_args(argv)
    cells = [int(e) for e in args.epochs.split(",") if e.strip()]
    sitting = Sitting.begin("benchmarks.window_count", argv)
    backends = [b.strip() for b in args.state_backends.split(",") if b.strip()]
    readers = [int(r) for r in args.source_parallelism.split(",") if r.strip()]
    runners = [r.strip() for r in args.runners.split(",") if r.strip()]

    from benchmarks.peers import spark_stateful as peers

    spark = peers.build_spark("streamstate-window-bench")
    spark.sparkContext.setLogLevel("ERROR")
    data = workload(args.records, args.keys)
    verify_streamstate(spark, data[:100_000])  # correctness check + warm-up
    meter = KindMeter("window-count") if args.kind_cpu else None
    try:

        def streamstate_run(epochs: int, backend: str, n: int, runner: str) -> float:
            if meter is None:
                return run_streamstate(spark, data, epochs, backend, n, runner)[0]
            rate, cpu = measured(
                meter, lambda: run_streamstate(spark, data, epochs, backend, n, runner)[0]
            )
            kinds = ", ".join(f"{k} {cpu.get(k, 0):.3f}" for k in KINDS)
            print(
                f"CPU s, {backend}, {n} reader(s), {epochs} epoch(s): {kinds} ({rate:,.0f} rec/s)"
            )
            return rate

        rows: dict[str, dict[str, float]] = {}
        names = []
        for runner in runners:
            if runner != "rdd":  # warm-up: this runner's tasks
                run_streamstate(spark, data[:100_000], 2, backends[0], readers[0], runner)
        for backend, n, runner in itertools.product(backends, readers, runners):
            name = "streamstate" if backend == "hashmap" else f"streamstate ({backend})"
            if readers != [1]:
                name = f"{name}, {n} reader{'s' if n > 1 else ''}"
            if runners != ["rdd"]:
                name = f"{name}, {runner} runner"
            names.append(name)
            for epochs in cells:
                rows.setdefault(name, {})[str(epochs)] = best_of(
                    args.repeat,
                    lambda e=epochs, b=backend, n=n, r=runner: streamstate_run(e, b, n, r),
                )
        if not args.no_spark:
            run_spark(spark, data[:50_000], 1)  # warm-up
            for batches in cells:
                rows.setdefault("Spark Structured Streaming", {})[str(batches)] = best_of(
                    args.repeat, lambda b=batches: run_spark(spark, data, b)
                )
        print(
            f"\nevent-time tumbling window count, {args.records:,} records, {args.keys:,} keys, "
            f"10 s windows, parallelism 2"
        )
        print(f"{'engine':44s} {'1 batch/epoch':>15s} {'10 batches/epochs':>18s}")
        for name, r in rows.items():
            print(f"{name:44s} {r.get('1', 0):>13,.0f}/s {r.get('10', 0):>16,.0f}/s")
        ratios = []
        if not args.no_spark:
            k = rows["Spark Structured Streaming"]
            for name in names:
                s = rows[name]
                ratios.append(
                    f"{name} / Spark: "
                    + ", ".join(
                        f"{s[str(c)] / k[str(c)]:.2f}x ({c} batch{'es' if c > 1 else ''})"
                        for c in cells
                    )
                )
                print(ratios[-1])
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": rows, "records": args.records}, f, indent=2)
        if args.result:
            table = rates_table(
                "engine", rows, {"1": "1 batch / epoch", "10": "10 batches / epochs"}
            )
            notes = [f"Ratio {'; '.join(ratios)}."] if ratios else []
            record("window_count", sitting.run([table], notes))
    finally:
        if meter is not None:
            meter.close()
        spark.stop()


if __name__ == "__main__":
    main()
