"""Issue 31's autoscaling scenario on a Spark cluster; prints one ``REPORT`` line (JSON).

    python autoscale_job.py MASTER CHECKPOINT_DIR [--low 10000] [--high 50000]
        [--capacity 25000] [--target-ms 5000]
    python autoscale_job.py MASTER CHECKPOINT_DIR --fixed P [--seconds 40] [--high N]

``--bed``: the driver is a machine of the cluster bed (tests/cluster/bed.py: its
session binds the machine's address, the checkpoints are an ``s3://`` URL);
``--max-parallelism N`` bounds ``enrich`` (the autoscaler's
``job.autoscaler.vertex.max-parallelism``, 4 by default).

A :class:`~streamstate.connectors.rate.RateSource` at ``--low`` records/s feeds a keyed
operator (uid ``enrich``, ``KEYS`` keys) whose every record waits ``1 / --capacity`` s
(an external lookup: what a subtask can do is bounded by that wait, not by this
machine's cores, so more subtasks do more; ``--capacity 0``: no wait); every
``SAMPLE``-th record leaves it with its latency, the time it was processed minus the
time it fell due at the source, and reaches a collecting sink. With the autoscaler on
(``job.autoscaler.*``) the script, waiting on events only:

1. lets the job run at the low rate until the autoscaler has had a full metrics window;
2. steps the rate to ``--high`` and waits for a decision that scales ``enrich`` out,
   then for the median latency of the records due after it to come back under
   ``--target-ms``;
3. steps the rate back to ``--low`` and waits for decisions that scale ``enrich`` in,
   until one releases executors the smaller plan does not need (and they are gone);

reading the decisions as the dashboard does (REST ``/jobs/<id>``, ``autoscaler``), and
the executors the application holds after each decision; the report's ``trace`` is the
median latency per ``TRACE_MS`` of due time. Used by
tests/integration/test_autoscale_cluster.py and benchmarks/autoscale.py; the issue's
figures are the defaults.

``--fixed P`` measures capacity instead: the autoscaler off, ``enrich`` at parallelism
``P``, the source at ``--high`` records/s (a backlog from the start when that is more
than the job moves) in epochs of at most a second of it, for ``--seconds``; the report
has the epochs' records and seconds (REST ``/jobs/<id>``), the first ``WARM_EPOCHS``
left out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from streamstate.common import Types  # noqa: E402
from streamstate.connectors.rate import RateSource  # noqa: E402
from streamstate.control.registry import list_jobs  # noqa: E402
from streamstate.datastream import KeyedProcessFunction  # noqa: E402
from streamstate.datastream.connectors import CollectSink, Source  # noqa: E402
from streamstate.datastream.state import ValueStateDescriptor  # noqa: E402
from tests.support import envs  # noqa: E402
from tests.support.control import http  # noqa: E402
from tests.support.waits import wait_until  # noqa: E402

SAMPLE = 100
#: distinct keys: with 97 the busiest of 4 subtasks got 1.32x its share of the key
#: groups (1.14x of 3), with 1000 1.07x (1.04x): a skew the per-record wait turns
#: into the whole stage's pace
KEYS = 1000
#: the trace's bucket of due time
TRACE_MS = 5_000
#: epochs a capacity run leaves out (start-up, the first backlog)
WARM_EPOCHS = 3
#: the latency window: records due within this many ms of the newest sample
WINDOW_MS = 5_000
CEILING_S = 420

CONF = {
    "execution.epoch.interval": "500 ms",
    "execution.epoch.max-records": "500000",
    "job.autoscaler.enabled": "true",
    "job.autoscaler.stabilization.interval": "10 s",
    "job.autoscaler.metrics.window": "10 s",
    "job.autoscaler.catch-up.duration": "60 s",
    "job.autoscaler.vertex.max-parallelism": "4",
    "job.autoscaler.scale-down.max-factor": "1.0",
}


class Enrich(KeyedProcessFunction):
    """Counts per key, waits ``cost_s`` per record (in slices of at least 2 ms) and emits
    every ``SAMPLE``-th record as ``(index, due_ms, latency_ms)``."""

    def __init__(self, cost_s: float) -> None:
        self.cost_s = cost_s  # 0: no wait

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.owed_s = 0.0

    def process_element(self, value: Any, ctx: Any) -> Any:
        index, due_ms = value
        self.count.update((self.count.value() or 0) + 1)
        self.owed_s += self.cost_s
        if self.owed_s >= 0.002 and self.cost_s:
            time.sleep(self.owed_s)
            self.owed_s = 0.0
        if index % SAMPLE == 0:
            yield index, due_ms, time.time_ns() // 1_000_000 - due_ms


def executors(spark: Any) -> list[str]:
    """The executor ids the application holds now."""
    ids = spark.sparkContext._jsc.sc().getExecutorIds()
    return sorted(str(ids.apply(i)) for i in range(ids.size()))


def median_latency(samples: list[Any], due_after_ms: int) -> tuple[float, int] | None:
    """(median latency, samples) of the newest ``WINDOW_MS`` of records due after
    ``due_after_ms``; None with fewer than 100 samples there."""
    after = [s for s in samples if s[1] >= due_after_ms]
    if not after:
        return None
    newest = max(s[1] for s in after)
    window = [s[2] for s in after if s[1] >= newest - WINDOW_MS]
    return (statistics.median(window), len(window)) if len(window) >= 100 else None


def latency_trace(samples: list[Any], since_ms: int) -> list[list[float]]:
    """``[seconds of due time since since_ms, median latency ms, samples]`` per
    ``TRACE_MS`` bucket of due time."""
    buckets: dict[int, list[int]] = {}
    for _, due_ms, latency_ms in samples:
        buckets.setdefault((due_ms - since_ms) // TRACE_MS, []).append(latency_ms)
    return [
        [b * TRACE_MS / 1000, float(statistics.median(v)), len(v)]
        for b, v in sorted(buckets.items())
    ]


def build(
    env: Any, source: RateSource, sink: CollectSink, capacity: int, parallelism: int = 1
) -> None:
    """The scenario's job: rate -> key_by -> enrich -> sink, ``enrich`` at
    ``parallelism``, the rest at 1."""
    (
        env.from_source(Source(source), source_name="rate")
        .uid("rate")
        .key_by(lambda r: r[0] % KEYS)
        .process(Enrich(1 / capacity if capacity else 0.0))
        .uid("enrich")
        .set_parallelism(parallelism)
        .sink_to(sink)
        .set_parallelism(1)
    )


def capacity_run(
    spark: Any, chk_dir: str, parallelism: int, rate: int, capacity: int, seconds: float
) -> dict[str, Any]:
    """What the job moves at a fixed parallelism (see the module's docstring)."""
    conf = {k: v for k, v in CONF.items() if not k.startswith("job.autoscaler")}
    # epochs of at most a second of the source's rate: many epochs within ``seconds``
    conf["execution.epoch.max-records"] = str(max(10_000, rate))
    source = RateSource(rate, splits=4)
    env = envs.make_env(1, spark=spark, conf=conf)
    envs.checkpoint_every_epoch(env, chk_dir)
    build(env, source, CollectSink(), capacity, parallelism)
    client = env.execute_async(f"capacity-p{parallelism}")
    try:
        (rec,) = [r for r in list_jobs() if r.job_id == client.get_job_id()]
        url = f"{rec.address}/jobs/{rec.job_id}"
        time.sleep(seconds)  # a measurement's length, not a wait for an event
        status, body = http(url)
        assert status == 200, body
    finally:
        client.cancel()
        try:
            client.get_job_execution_result().result(120)
        except Exception:  # noqa: BLE001 - a cancelled job ends with its error
            pass
    steady = [e for e in body["epochs"] if e["epoch"] > WARM_EPOCHS]
    records = sum(e["source_records"] for e in steady)
    wall_s = sum(e["duration_ms"] for e in steady) / 1000
    return {
        "parallelism": parallelism,
        "rate": rate,
        "capacity": capacity,
        "epochs": len(steady),
        "records": records,
        "seconds": round(wall_s, 2),
        "records_per_s": round(records / wall_s) if wall_s else None,
        "enrich_busy_s": round(
            sum(
                s["process_s"] + s["restore_s"] + s["commit_s"]
                for e in steady
                for s in e["stages"][1:2]
            ),
            2,
        ),
        "source_busy_s": round(sum(s["process_s"] for e in steady for s in e["stages"][:1]), 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("master")
    p.add_argument("checkpoints")
    p.add_argument("--low", type=int, default=10_000, help="records/s before and after")
    p.add_argument("--high", type=int, default=50_000, help="records/s of the step")
    p.add_argument("--capacity", type=int, default=25_000, help="records/s one subtask waits for")
    p.add_argument("--target-ms", type=int, default=5_000, help="the median latency to get under")
    p.add_argument("--fixed", type=int, help="measure capacity at this parallelism instead")
    p.add_argument("--seconds", type=float, default=40.0, help="how long --fixed runs")
    p.add_argument("--bed", action="store_true", help="the driver is a machine of the bed")
    p.add_argument("--max-parallelism", type=int, default=4, help="enrich's upper bound")
    args = p.parse_args()
    low, high, target_ms = args.low, args.high, args.target_ms
    master, chk_dir = args.master, args.checkpoints
    if args.bed:
        from tests.cluster.jobs import cluster_session as bed_session

        spark = bed_session(master)
    else:
        from tests.support.cluster import cluster_session

        spark = cluster_session(master, conf={"spark.executor.cores": "1"})
    if args.fixed:
        got = capacity_run(spark, chk_dir, args.fixed, high, args.capacity, args.seconds)
        print("REPORT " + json.dumps(got), flush=True)
        spark.stop()
        return
    report: dict[str, Any] = {"executors_at_start": executors(spark)}
    source = RateSource(low, splits=4)
    conf = {**CONF, "job.autoscaler.vertex.max-parallelism": str(args.max_parallelism)}
    env = envs.make_env(1, spark=spark, conf=conf)
    envs.checkpoint_every_epoch(env, chk_dir)
    sink = CollectSink()
    build(env, source, sink, args.capacity)
    client = env.execute_async("autoscaled-rate")
    try:
        (rec,) = [r for r in list_jobs() if r.job_id == client.get_job_id()]
        url = f"{rec.address}/jobs/{rec.job_id}"

        def decisions() -> list[dict[str, Any]]:
            status, body = http(url)
            assert status == 200, body
            return list(body["autoscaler"]["decisions"])

        def enrich_changes(after: int) -> list[dict[str, Any]]:
            return [
                {**v, "timestamp": d["timestamp"], "applied": d["applied"], "note": d["note"]}
                for d in decisions()[after:]
                for v in d["vertices"]
                if v["uid"] == "enrich"
            ]

        def epochs() -> int:
            return int(http(url)[1]["stats"]["epochs"])

        # 1. at 10k/s for a stabilization interval and a full window (and a few epochs more)
        started = time.time()
        wait_until(
            lambda: time.time() - started > 12 and epochs() >= 10,
            CEILING_S,
            lambda: f"the job ran {epochs()} epochs",
        )
        report["low_latency"] = median_latency(sink.get_results(), 0)
        before_step = len(decisions())
        report["decisions_at_low_rate"] = decisions()
        # 2. step up: a scale-out of enrich, then the latency back under its target
        stepped_up_ms = time.time_ns() // 1_000_000
        source.set_rate(high)
        out = wait_until(
            lambda: [c for c in enrich_changes(before_step) if c["to"] > c["from"]],
            CEILING_S,
            lambda: f"no scale-out of enrich; decisions {decisions()}",
        )
        report["scale_out"] = out[0]
        report["executors_after_scale_out"] = executors(spark)
        peak: list[float] = [0.0]

        def latency_back() -> tuple[float, int] | None:
            got = median_latency(sink.get_results(), out[0]["timestamp"])
            if got is None:
                return None
            peak[0] = max(peak[0], got[0])
            return got if got[0] < target_ms else None

        report["high_latency_back"] = wait_until(
            latency_back,
            CEILING_S,
            lambda: f"latency {median_latency(sink.get_results(), out[0]['timestamp'])}",
            poll_s=1.0,
        )
        report["high_latency_peak_ms"] = peak[0]
        report["high_latency_since_step"] = median_latency(sink.get_results(), stepped_up_ms)
        # 3. step down: scale-ins of enrich, down to a plan that needs fewer executors
        # than the application holds (it released the surplus)
        after_out = len(decisions())
        held = len(report["executors_after_scale_out"])
        report["stepped_down_ms"] = time.time_ns() // 1_000_000
        source.set_rate(low)
        scaled_in = wait_until(
            lambda: [c for c in enrich_changes(after_out) if c["to"] < c["from"]],
            CEILING_S,
            lambda: f"no scale-in of enrich; decisions {decisions()}",
        )
        report["scale_in"] = scaled_in[0]
        released = wait_until(
            lambda: [c for c in enrich_changes(after_out) if "released" in c["note"]],
            CEILING_S,
            lambda: f"no executor released ({held} held); decisions {decisions()}",
        )
        report["released"] = released[0]
        wait_until(  # a kill completes asynchronously
            lambda: len(executors(spark)) < held,
            CEILING_S,
            lambda: f"executors {executors(spark)} after {released[0]['note']}",
        )
        report["executors_after_scale_in"] = executors(spark)
        report["decisions"] = decisions()
        report["latency_target_ms"] = target_ms
        report["stepped_up_ms"] = stepped_up_ms
        report["trace"] = latency_trace(sink.get_results(), stepped_up_ms)
        report["rates"] = [low, high, low]
    finally:
        client.cancel()
        try:
            client.get_job_execution_result().result(120)
        except Exception as e:  # noqa: BLE001 - a cancelled job ends with its error
            report["end"] = type(e).__name__
    print("REPORT " + json.dumps(report), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
