"""What the control plane costs: keyed count with the REST server on vs off, and the
latency of ``/jobs/<id>/checkpoints`` with 1000 checkpoints in the history (issue 13).

1. The keyed running count of ``benchmarks/keyed_count.py`` (Spark ``local[2]``, a
   checkpoint every epoch) with ``rest.enabled: false`` and with the server on and a
   client polling ``/jobs/<id>``, ``/jobs/<id>/checkpoints`` and ``/metrics`` once a second
   (an open dashboard). Runs alternate; each figure is the best of ``--repeat``; the ratio
   on/off is measured in the same run.
2. A job on the in-process runner held after epoch ``--checkpoints`` (one checkpoint per
   epoch, so that many in the history); ``--calls`` GETs of ``/jobs/<id>/checkpoints``:
   median, p90 and max milliseconds, and the response size.

Run: ``python -m benchmarks.control_plane [--records N] [--repeat N] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.request
from typing import Any

from benchmarks.keyed_count import CountPerKey, workload
from benchmarks.results import Sitting, add_result_option, figures_table, publish
from streamstate.common import Configuration
from streamstate.control.registry import list_jobs
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.datastream.connectors import DiscardingSink
from streamstate.runtime.job_status import EpochStats, JobObserver
from streamstate.testing import TickingClock


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        return bytes(r.read())


class _Poller(threading.Thread):
    """Polls a running job's REST API once a second, as an open dashboard does."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.calls = 0

    def run(self) -> None:
        while not self.stop.wait(1.0):
            for rec in list_jobs():
                for path in (f"/jobs/{rec.job_id}", f"/jobs/{rec.job_id}/checkpoints", "/metrics"):
                    _get(rec.address + path)
                    self.calls += 1


def keyed_count(spark: Any, data: list[Any], epochs: int, rest: bool) -> float:
    conf = Configuration()
    conf.set_string("execution.epoch.max-records", str(-(-len(data) // epochs)))
    conf.set_string("rest.enabled", "true" if rest else "false")
    conf.set_string("execution.progress", "none")
    env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
    env.set_parallelism(2)
    env.enable_checkpointing(1)
    env.from_collection(data).key_by(lambda v: v[0]).process(CountPerKey()).uid("count").add_sink(
        DiscardingSink()
    )
    poller = _Poller()
    if rest:
        poller.start()
    t0 = time.perf_counter()
    acc = env.execute("control-plane-bench").get_all_accumulator_results()
    dt = time.perf_counter() - t0
    poller.stop.set()
    assert acc["records-in.count"] == len(data), acc
    return len(data) / dt


class _HoldAt(JobObserver):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.reached = threading.Event()
        self.go = threading.Event()

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        if stats.epoch == self.epoch:
            self.reached.set()
            self.go.wait(600)


def checkpoint_history_latency(checkpoints: int, calls: int) -> dict[str, float]:
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", "1")
    conf.set_string("execution.progress", "none")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.enable_checkpointing(1)
    env.set_clock(TickingClock())  # time advances at every reading: a checkpoint every epoch
    hold = _HoldAt(checkpoints + 1)
    env.add_job_observer(hold)
    env.from_collection([(f"k{i % 50}", 1) for i in range(checkpoints + 10)]).key_by(
        lambda v: v[0]
    ).process(CountPerKey()).uid("count").add_sink(DiscardingSink())
    client = env.execute_async("checkpoint-history")
    try:
        assert hold.reached.wait(600), "the job did not reach the epoch"
        (rec,) = [r for r in list_jobs() if r.job_id == client.get_job_id()]
        url = f"{rec.address}/jobs/{rec.job_id}/checkpoints"
        body = _get(url)
        history = len(json.loads(body)["history"])
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            _get(url)
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        hold.go.set()
        client.cancel()
        client.get_job_execution_result().result(600)
    times.sort()
    return {
        "history": history,
        "median_ms": round(statistics.median(times), 2),
        "p90_ms": round(times[int(len(times) * 0.9) - 1], 2),
        "max_ms": round(times[-1], 2),
        "response_kb": round(len(body) / 1024, 1),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=500_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--checkpoints", type=int, default=1000)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--latency-only", action="store_true", help="skip the throughput runs")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.control_plane", argv)
    figures: dict[str, Any] = {}
    if not args.latency_only:
        figures.update(throughput(args))
    lat = checkpoint_history_latency(args.checkpoints, args.calls)
    figures["checkpoints_endpoint"] = lat
    print(
        f"GET /jobs/<id>/checkpoints with {lat['history']} checkpoints in the history "
        f"({lat['response_kb']} KB): median {lat['median_ms']} ms, p90 {lat['p90_ms']} ms, "
        f"max {lat['max_ms']} ms over {args.calls} calls"
    )
    publish(
        "control_plane",
        lambda: sitting.run([figures_table(figures)]),
        args.result,
        args.json,
        figures,
    )


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    """Keyed count with REST off and on (polled), alternating; best of ``--repeat`` each."""
    from streamstate.spark.session import get_or_create_spark

    spark = get_or_create_spark(
        Configuration({"spark.master": "local[2]", "spark.ui.enabled": "false"})
    )
    data = workload(args.records, args.keys)
    keyed_count(spark, data[: len(data) // 10], 2, rest=True)  # warm-up
    off, on = [], []
    for _ in range(args.repeat):  # alternate, so drift hits both alike
        off.append(keyed_count(spark, data, args.epochs, rest=False))
        on.append(keyed_count(spark, data, args.epochs, rest=True))
    figures = {
        "records": args.records,
        "epochs": args.epochs,
        "rest_off_rps": round(max(off)),
        "rest_on_polled_rps": round(max(on)),
        "ratio_on_off": round(max(on) / max(off), 3),
    }
    print(f"keyed count, {args.records} records, {args.epochs} epochs, checkpoint per epoch:")
    print(f"  REST off            {figures['rest_off_rps']:>10,} records/s")
    print(f"  REST on + polling   {figures['rest_on_polled_rps']:>10,} records/s")
    print(f"  ratio on/off        {figures['ratio_on_off']:>10.3f}")
    return figures


if __name__ == "__main__":
    main()
