"""Record latency at a steady rate: source to sink, with epochs paced by time (issue 16).

A ``SourceFunction`` emits ``--rate`` records per second for ``--seconds`` (each record
carries its emission time), a keyed running count processes them, and a ``SinkFunction``
records, per record, the time from emission to the sink seeing its result (at-least-once
visibility: the sink acts as the epoch runs; an exactly-once sink adds the wait for the
checkpoint). ``execution.epoch.interval`` is ``--interval-ms``. Reported: median, p90 and
p99 latency and the epochs' count, next to Spark Structured Streaming's shortest
micro-batch (``triggerExecution``) for a trivial stateful query (``rate`` source, count
per key) in the same run: the floor of a micro-batch engine's latency on this machine.

Run: ``python -m benchmarks.latency [--rate 10000] [--seconds 20] [--interval-ms 100]
[--runner rdd|barrier]``.

``--timeline``: instead, the steady-rate job alone in a session that writes Spark's event
log, and where its epochs' time goes (``benchmarks/spark_timeline.py``): the phases of each
epoch's Spark job (submission to first task, each stage's tasks, the stage boundary, the
job's end) next to the epoch's wall time on the driver, and the same phases of a bare
PySpark job of the epoch's shape run in the same session (a source task sleeping the
interval, two keyed tasks sleeping the keyed stage's process time): what Spark itself
costs. Then such bare jobs run one at a time and two in flight (the next started as the
previous one's window ends), alternately: what overlapping epochs could gain here, as the
latency of records arriving every ms, counted from their arrival or, as ``Paced`` stamps
them, from when the window that reads them opened. The event log costs the driver's JVM some time itself, so the latency figures of
this run are not the headline ones.

``--fast N``: instead, a source as fast as the job can read (``from_sequence`` of ``N``
numbers, a budget of ``--max-records`` per reader and epoch), each record stamped
as it leaves the reader, the same keyed count, and a sink that samples every 50th result
of a key. Run alternately in the same process: epochs cut by the interval, and without
the interval: epochs by records only, which is what the interval gave such a source before
epochs were cut by time (it only paced epochs that did not fill their budget).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from functools import partial
from typing import Any

from benchmarks.results import Sitting, add_result_option, figures_table, record, rows_table
from benchmarks.spark_timeline import epoch_phases, event_log_conf
from streamstate.common import Configuration, Types
from streamstate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from streamstate.datastream.functions import MapFunction, SinkFunction, SourceFunction
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.job_status import JobObserver


class Paced(SourceFunction):
    """``rate`` records/s for ``seconds``, in bursts every 10 ms: ``(key, emitted_at)``."""

    def __init__(self, rate: int, seconds: float, keys: int) -> None:
        self.rate, self.seconds, self.keys = rate, seconds, keys
        self.running = True

    def run(self, ctx: Any) -> None:
        start = time.time()
        sent = 0
        while self.running:
            elapsed = time.time() - start
            if elapsed >= self.seconds:
                return
            due = int(elapsed * self.rate)
            now = time.time()
            for i in range(sent, due):
                ctx.collect((f"k{i % self.keys}", now))
            sent = due
            time.sleep(0.01)

    def cancel(self) -> None:
        self.running = False


class Count(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield value[1], c


class LatencySink(SinkFunction):
    """Appends ``now - emitted_at`` (ms) of every result to a file of its own."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.path: str | None = None

    def invoke(self, value: Any, context: Any) -> None:
        if self.path is None:
            self.path = os.path.join(self.out_dir, f"lat-{uuid.uuid4().hex}.txt")
        with open(self.path, "a") as f:
            f.write(f"{(time.time() - value[0]) * 1000:.2f}\n")


class Stamp(MapFunction):
    """``n -> (key, now)``: the time a record leaves its reader (chained to the source)."""

    def map(self, value: int) -> tuple[str, float]:
        return f"k{value % 1000}", time.time()


class SampledLatencySink(SinkFunction):
    """Like :class:`LatencySink`, for every 50th result of a key (``(emitted_at, count)``)."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.path: str | None = None

    def invoke(self, value: Any, context: Any) -> None:
        if value[1] % 50:
            return
        if self.path is None:
            self.path = os.path.join(self.out_dir, f"lat-{uuid.uuid4().hex}.txt")
        with open(self.path, "a") as f:
            f.write(f"{(time.time() - value[0]) * 1000:.2f}\n")


def _latencies(out_dir: str) -> list[float]:
    lat = sorted(float(x) for p in glob.glob(os.path.join(out_dir, "lat-*.txt")) for x in open(p))
    for p in glob.glob(os.path.join(out_dir, "lat-*.txt")):
        os.remove(p)
    return lat


class EpochTimes(JobObserver):
    """Per epoch with records: its wall time and each stage's process time per subtask."""

    def __init__(self, parallelism: int) -> None:
        self.parallelism = parallelism
        self.durations: list[float] = []
        #: the epochs with records, by number
        self.epochs: list[int] = []
        self.stages: dict[int, list[float]] = {}

    def on_epoch(self, job_id: str, stats: Any) -> None:
        if not stats.source_records:
            return
        self.durations.append(stats.duration_ms)
        self.epochs.append(stats.epoch)
        for st in stats.stages:
            per_subtask = st.process_s / self.parallelism * 1000.0
            self.stages.setdefault(st.stage, []).append(per_subtask)

    def medians(self) -> dict[str, Any]:
        return {
            "epoch_ms": round(statistics.median(self.durations)),
            "process_ms_per_subtask_by_stage": {
                sid: round(statistics.median(v)) for sid, v in sorted(self.stages.items())
            },
        }


def fast_source_latency(
    spark: Any, args: Any, out_dir: str, cut: bool, records: int
) -> dict[str, Any]:
    """The unthrottled run; ``cut``: epochs cut by the interval, else by records only."""
    conf = Configuration()
    if cut:  # without: epochs by records only (an interval used to pace only epochs that
        # did not fill their budget, which a source this fast always fills)
        conf.set_string("execution.epoch.interval", f"{args.interval_ms}ms")
    conf.set_string("execution.epoch.max-records", str(args.max_records))
    env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
    env.set_parallelism(2)
    times = EpochTimes(2)
    env.add_job_observer(times)
    env.from_sequence(1, records).map(Stamp()).key_by(lambda v: v[0]).process(Count()).add_sink(
        SampledLatencySink(out_dir)
    )
    t0 = time.perf_counter()
    result = env.execute("latency-fast")
    elapsed = time.perf_counter() - t0
    lat = _latencies(out_dir)
    return {
        "cut_by_time": cut,
        "records": records,
        "max_records": args.max_records,
        "records_per_s": round(records / elapsed),
        "epochs": result.get_accumulator_result("epochs"),
        "sampled": len(lat),
        "median_ms": statistics.median(lat),
        "p90_ms": lat[int(0.9 * (len(lat) - 1))],
        "p99_ms": lat[int(0.99 * (len(lat) - 1))],
        "max_ms": lat[-1],
        **times.medians(),
    }


def streamstate_latency(
    spark: Any, args: Any, out_dir: str, times: EpochTimes | None = None
) -> dict[str, Any]:
    conf = Configuration()
    conf.set_string("execution.epoch.interval", f"{args.interval_ms}ms")
    if args.runner is not None:
        conf.set_string("execution.runner", args.runner)
    env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
    env.set_parallelism(2)
    times = times or EpochTimes(2)  # where an epoch's time goes: its stages' work vs the rest
    env.add_job_observer(times)
    env.add_source(Paced(args.rate, args.seconds, 1000)).key_by(lambda v: v[0]).process(
        Count()
    ).add_sink(LatencySink(out_dir))
    result = env.execute("latency")
    lat = sorted(float(x) for p in glob.glob(os.path.join(out_dir, "lat-*.txt")) for x in open(p))
    return {
        "records": len(lat),
        "epochs": result.get_accumulator_result("epochs"),
        "median_ms": statistics.median(lat),
        "p90_ms": lat[int(0.9 * (len(lat) - 1))],
        "p99_ms": lat[int(0.99 * (len(lat) - 1))],
        **times.medians(),
    }


#: Spark's side runs ``--seconds`` and at least until this many batches with input ran
_MIN_SPARK_BATCHES = 3
#: ... but no longer than this
_SPARK_GIVE_UP_S = 300.0


def spark_min_batch_ms(spark: Any, rate: int, seconds: float) -> dict[str, Any]:
    """Structured Streaming: rate source -> count per key (stateful) -> noop sink."""
    from pyspark.sql import functions as F

    df = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", rate)
        .load()
        .select((F.col("value") % 1000).alias("key"))
        .groupBy("key")
        .count()
    )
    chk = tempfile.mkdtemp(prefix="ss-latency-spark-")
    q = (
        df.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", chk)
        .trigger(processingTime="0 seconds")
        .start()
    )
    start = time.monotonic()
    try:
        while True:  # `seconds`, and on a loaded machine until a few batches with input ran
            time.sleep(0.5)
            times = [
                p["durationMs"]["triggerExecution"]
                for p in q.recentProgress
                if p.get("numInputRows", 0) > 0 and "triggerExecution" in p.get("durationMs", {})
            ]
            waited = time.monotonic() - start
            if waited >= seconds and len(times) >= _MIN_SPARK_BATCHES:
                break
            if waited >= max(seconds, _SPARK_GIVE_UP_S):
                break
    finally:
        q.stop()
        shutil.rmtree(chk, ignore_errors=True)
    if not times:
        raise RuntimeError(
            f"Spark completed no micro-batch with input in {waited:.0f} s: the machine is "
            f"too loaded for this comparison"
        )
    return {
        "batches": len(times),
        "min_ms": min(times),
        "median_ms": statistics.median(times),
    }


#: the bare PySpark jobs run one at a time are described so (their phases are measured)
SKELETON_JOBS = re.compile(r"^skeleton epoch (\d+)$")


def _skeleton_source(window_s: float, chunk: int, _index: int, it: Any) -> Any:
    for _ in it:
        pass
    opened = time.time()
    time.sleep(window_s)  # the read window
    return iter([(k, (k, (opened, b"k" * chunk))) for k in (0, 1)] + [(-1, b"ack")])


def _to_keyed(x: Any) -> bool:
    return bool(x[0] >= 0)


def _strip(x: Any) -> Any:
    return x[1]


def _same(k: int) -> int:
    return k


def _skeleton_keyed(work_s: float, _index: int, it: Any) -> Any:
    opened = [window[0] for _, window in it]
    time.sleep(work_s)  # the keyed stage's own work
    return iter([(opened[0], time.time())])


def skeleton_job(spark: Any, description: str, window_s: float, keyed_s: float) -> list[Any]:
    """One bare PySpark job of an epoch's shape: a source stage of one task that sleeps
    ``window_s`` and sends a chunk to each of two keyed tasks, which sleep ``keyed_s``:
    Spark's own cost of the job, with nothing of streamstate in it. Returns, per keyed
    task, ``(when the window opened, when the task ended)`` (epoch seconds)."""
    sc = spark.sparkContext
    sc.setJobDescription(description)
    rdd = sc.parallelize(range(1), 1).mapPartitionsWithIndex(
        partial(_skeleton_source, window_s, 30_000)
    )
    keyed = rdd.filter(_to_keyed).map(_strip).partitionBy(2, _same)
    return keyed.mapPartitionsWithIndex(partial(_skeleton_keyed, keyed_s)).collect()  # type: ignore[no-any-return]


def skeleton_run(
    spark: Any, jobs: int, window_s: float, keyed_s: float, in_flight: int, warm_up: bool = False
) -> dict[str, Any]:
    """``jobs`` bare jobs, one at a time (``in_flight`` 1) or overlapped (2: the next job
    is started as the previous one's window should end, at most two running): what
    overlapping epochs could gain on this machine's task slots. Latencies of records
    arriving every ms: *arrival* counts from when a record arrived (a source that keeps
    producing between windows), *parked* from when the next window opened for one that
    arrived between windows (a source parked between epochs, as :class:`Paced` is).
    ``warm_up``: its jobs are left out of the phases (:data:`SKELETON_JOBS`)."""
    results: list[list[Any]] = []
    started = time.perf_counter()
    if in_flight == 1:
        for n in range(jobs):
            description = f"skeleton {'warm-up' if warm_up else 'epoch'} {n}"
            results.append(skeleton_job(spark, description, window_s, keyed_s))
    else:
        threads: list[threading.Thread] = []
        for n in range(jobs):
            description = f"skeleton overlapped {n}"
            thread = threading.Thread(
                target=lambda d=description: results.append(
                    skeleton_job(spark, d, window_s, keyed_s)
                )
            )
            thread.start()
            threads.append(thread)
            time.sleep(window_s)
            while sum(t.is_alive() for t in threads) >= in_flight:
                time.sleep(0.005)
        for thread in threads:
            thread.join()
    elapsed = time.perf_counter() - started
    windows = sorted((tasks[0][0], [end for _, end in tasks]) for tasks in results)
    arrival: list[float] = []
    parked: list[float] = []
    for (previous, _), (opened, ends) in zip(windows, windows[1:], strict=False):
        # records arriving after the previous window closed, up to this one's close
        for ms in range(int((previous + window_s) * 1000), int((opened + window_s) * 1000)):
            arrived = ms / 1000.0
            arrival += [end - arrived for end in ends]
            parked += [end - max(arrived, opened) for end in ends]
    return {
        "in_flight": in_flight,
        "jobs_per_s": round(jobs / elapsed, 2),
        "arrival_median_ms": round(1000 * statistics.median(arrival)),
        "parked_median_ms": round(1000 * statistics.median(parked)),
    }


def epoch_timeline(args: Any, sitting: Sitting) -> None:
    """The steady-rate job in a session with Spark's event log: its epochs' phases."""
    from benchmarks.peers import spark_stateful as peers

    log_dir = tempfile.mkdtemp(prefix="ss-latency-eventlog-")
    out_dir = tempfile.mkdtemp(prefix="ss-latency-")
    spark = peers.build_spark("streamstate-latency-timeline", event_log_conf(log_dir))
    spark.sparkContext.setLogLevel("ERROR")
    times = EpochTimes(2)
    try:
        ours = streamstate_latency(spark, args, out_dir, times)
        keyed_s = ours["process_ms_per_subtask_by_stage"][1] / 1000.0
        window_s = args.interval_ms / 1000.0
        skeleton_run(spark, 5, window_s, keyed_s, 1, warm_up=True)
        overlap = [skeleton_run(spark, 25, window_s, keyed_s, n) for n in (1, 2, 1, 2)]
        spark.stop()  # the event log is complete once the application ended
        # the first epochs start the workers and hosts: left out, as the median would
        phases = epoch_phases(log_dir, times.epochs[2:])
        bare = epoch_phases(log_dir, None, SKELETON_JOBS)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
        shutil.rmtree(log_dir, ignore_errors=True)
    epoch_ms = statistics.median(times.durations[2:])
    figures = {
        "epoch_ms (driver wall time)": round(epoch_ms, 1),
        "spark job, by phase (ms)": phases,
        "bare PySpark job of the same shape, by phase (ms)": bare,
        "driver outside the job (ms)": round(epoch_ms - phases["job"], 1),
        "process_ms_per_subtask_by_stage": ours["process_ms_per_subtask_by_stage"],
        "median_ms (with the event log)": ours["median_ms"],
    }
    tables = [figures_table(figures), rows_table(overlap)]
    print(json.dumps({"timeline": figures, "bare_jobs": overlap}, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "timeline": figures, "bare_jobs": overlap}, f, indent=2)
    if args.result:
        record("latency", sitting.run(tables, name="Where a paced epoch's time goes"))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=10_000)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--interval-ms", type=int, default=100)
    p.add_argument("--max-records", type=int, default=100_000, help="budget of --fast runs")
    p.add_argument("--fast", type=int, default=0, help="unthrottled run of this many records")
    p.add_argument("--timeline", action="store_true", help="the phases of each epoch's job")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument(
        "--runner",
        choices=["rdd", "barrier"],
        help="streamstate's epoch runner of the steady-rate run (execution.runner; default: "
        "the session's default, the RDD runner)",
    )
    add_result_option(p)
    args = p.parse_args(argv)
    if args.runner is not None and (args.fast or args.timeline):
        p.error("--runner applies to the steady-rate run only (not --fast or --timeline)")
    sitting = Sitting.begin("benchmarks.latency", argv)
    if args.timeline:
        epoch_timeline(args, sitting)
        return

    from benchmarks.peers import spark_stateful as peers

    spark = peers.build_spark("streamstate-latency")
    spark.sparkContext.setLogLevel("ERROR")
    out_dir = tempfile.mkdtemp(prefix="ss-latency-")
    if args.fast:
        try:
            # warm-up (workers, imports)
            fast_source_latency(spark, args, out_dir, True, max(100_000, args.fast // 10))
            _latencies(out_dir)
            runs = [
                fast_source_latency(spark, args, out_dir, c, args.fast)
                for c in (False, True, False, True)
            ]
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        print(json.dumps(runs, indent=2))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "fast": runs}, f, indent=2)
        if args.result:
            run = sitting.run([rows_table(runs)], name="A fast source: epochs cut by time")
            record("latency", run)
        return
    try:
        ours = streamstate_latency(spark, args, out_dir)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    theirs = spark_min_batch_ms(spark, args.rate, args.seconds)
    print(json.dumps({"streamstate": ours, "spark_structured_streaming": theirs}, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "streamstate": ours, "spark": theirs}, f, indent=2)
    if args.result:
        tables = [figures_table({"streamstate": ours, "spark_structured_streaming": theirs})]
        on = "" if args.runner is None else f", {args.runner} runner"
        record("latency", sitting.run(tables, name=f"A steady rate: {args.rate:,} records/s{on}"))


if __name__ == "__main__":
    main()
