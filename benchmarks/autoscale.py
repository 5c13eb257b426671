"""Issue 31's autoscaling scenario on a standalone cluster, measured and traced.

Starts a Spark standalone master and two workers of two cores each from the pip install
(``benchmarks/standalone_cluster.py``), then runs ``tests/integration/autoscale_job.py``:

1. **capacity**: the scenario's job (a ``RateSource`` into a keyed ``enrich`` operator
   and a sink) at a fixed parallelism of ``enrich`` (1, 2, 4), autoscaler off, the source
   above what the job moves (a backlog every epoch, epochs of at most a second of the
   source's rate): records per second over the epochs after the first ``WARM_EPOCHS``, with the per-record wait of the scenario (25k
   records/s per subtask) and without it (what the Python path costs on this machine);
   the busy seconds of the source and ``enrich`` stages per million records say where
   the time goes;
2. **scenario**: the rate steps 10k -> 50k -> 10k records/s with the autoscaler on; the
   decisions as the dashboard lists them (``GET /jobs/<id>``, ``autoscaler``) and the
   median record latency per 5 s of due time since the step up (the trace).

Everything it started is stopped at the end (by pid).

Run: ``python -m benchmarks.autoscale [--seconds 40] [--result]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.results import Sitting, Table, add_result_option, cell, publish, rows_table
from benchmarks.standalone_cluster import start_cluster, stop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "tests", "integration", "autoscale_job.py")
#: the scenario's per-subtask capacity (records/s a subtask's per-record wait allows)
CAPACITY = 25_000
#: the source rate of a capacity run without the wait: beyond what this machine moves
UNBOUNDED_RATE = 400_000


def job_report(cmd: list[str]) -> dict[str, Any]:
    """The ``REPORT`` line of one run of the job script (stderr shown on failure)."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{cmd} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return dict(json.loads(lines[-1][len("REPORT ") :]))


def capacity_rows(master: str, work: str, seconds: float) -> list[dict[str, Any]]:
    rows = []
    for capacity in (CAPACITY, 0):
        for p in (1, 2, 4):
            # with the wait: half again what p subtasks can do, so a backlog builds
            rate = p * capacity * 3 // 2 if capacity else UNBOUNDED_RATE
            got = job_report(
                [sys.executable, JOB, master, f"{work}/cap-{capacity}-{p}", "--fixed", str(p)]
                + ["--high", str(rate), "--capacity", str(capacity), "--seconds", str(seconds)]
            )
            per_million = 1e6 / got["records"] if got["records"] else 0.0
            row = {
                "per-record wait": f"1/{capacity:,} s" if capacity else "none",
                "enrich parallelism": p,
                "records/s": got["records_per_s"],
                "epochs": got["epochs"],
                "s per epoch": got["seconds"] / max(1, got["epochs"]),
                "source busy s / 10^6 rec": got["source_busy_s"] * per_million,
                "enrich busy s / 10^6 rec": got["enrich_busy_s"] * per_million,
                "load": f"{os.getloadavg()[0]:.1f}",
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def decision_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    up = report["stepped_up_ms"]
    return [
        {
            "s since step up": (d["timestamp"] - up) / 1000,
            "enrich": f"{v['from']} -> {v['to']}",
            "reason": v["reason"].split(":")[0],
            "utilization": v["utilization"],
            "target rate": v["targetRate"],
            "executors": d["note"],
        }
        for d in report["decisions"]
        for v in d["vertices"]
        if v["uid"] == "enrich"
    ]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=40.0, help="length of a capacity run")
    p.add_argument("--skip-capacity", action="store_true")
    p.add_argument("--json", help="also write the figures to this file")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.autoscale", argv)
    work = tempfile.mkdtemp(prefix="ss-autoscale-")
    master, _, procs = start_cluster(work, workers=2, memory="2g", cores=2)
    try:
        rows = [] if args.skip_capacity else capacity_rows(master, work, args.seconds)
        t0 = time.monotonic()
        report = job_report([sys.executable, JOB, master, f"{work}/scenario"])
        scenario_s = time.monotonic() - t0
    finally:
        stop(procs)
    shutil.rmtree(work, ignore_errors=True)  # kept when a run failed: its logs are there
    down_s = (report["stepped_down_ms"] - report["stepped_up_ms"]) / 1000
    median, samples = report["high_latency_back"]
    figures = {
        "rates (records/s)": "10,000 -> 50,000 -> 10,000",
        "latency target (median, ms)": report["latency_target_ms"],
        "median latency at 10k/s before the step (ms)": report["low_latency"][0],
        "peak median latency after the step (ms)": report["high_latency_peak_ms"],
        "median latency when back under target (ms, samples)": f"{median:,.0f} ({samples:,})",
        "stepped down at (s since step up)": down_s,
        "executors after scale-out / after scale-in": (
            f"{len(report['executors_after_scale_out'])} / "
            f"{len(report['executors_after_scale_in'])}"
        ),
        "scenario wall time with start-up (s)": scenario_s,
    }
    trace = Table(
        ("due (s since step up)", "median latency (ms)", "samples"),
        tuple((cell(t), cell(m), cell(n)) for t, m, n in report["trace"]),
        caption="median latency (due at the source -> processed by enrich) per 5 s of due time",
    )
    for key, value in figures.items():
        print(f"{key}: {cell(value)}")
    for row in decision_rows(report):
        print(json.dumps(row))
    tables = [Table(("figure", "value"), tuple((k, cell(v)) for k, v in figures.items()))]
    tables += [rows_table(decision_rows(report)), trace]
    if rows:
        tables.insert(0, rows_table(rows))
    publish(
        "autoscale",
        lambda: sitting.run(tables),
        args.result,
        args.json,
        {"capacity": rows, "scenario": report},
    )


if __name__ == "__main__":
    main()
