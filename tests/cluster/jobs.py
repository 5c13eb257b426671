"""The jobs the cluster bed runs on its driver machine; each prints one ``REPORT {json}`` line.

    python -m tests.cluster.jobs count --master spark://... --checkpoints s3://bed/chk ...

The driver is this process: its SparkSession binds the machine's address (``SPARK_LOCAL_IP``,
set by the bed), its executors run on the worker machines and find this checkout on
``PYTHONPATH`` (the same install on every machine).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["cluster_session", "main"]

EXECUTOR_MEMORY = "512m"


def cluster_session(master: str, conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession on the bed's master, its driver on this machine's address; ``conf``:
    more Spark settings."""
    from pyspark.sql import SparkSession

    address = os.environ["SPARK_LOCAL_IP"]
    builder = (
        SparkSession.builder.master(master)
        .appName(f"bed-{socket.gethostname()}")
        .config("spark.driver.host", address)
        .config("spark.driver.bindAddress", address)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", EXECUTOR_MEMORY)
        .config("spark.executor.cores", "1")
        .config("spark.python.worker.reuse", "true")
        .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def wait_executors(spark: Any, count: int, timeout: float = 300) -> None:
    """Until ``count`` executors registered (the first job would otherwise run on fewer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1 >= count:
            return
        time.sleep(0.5)
    raise RuntimeError(f"fewer than {count} executors registered within {timeout:.0f} s")


def count(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The keyed count (tests/integration/jobs.py) once per ``--run BACKEND:PARALLELISM``,
    in one Spark application; checkpoints every epoch under ``--checkpoints``."""
    spark = cluster_session(args.master)
    wait_executors(spark, args.executors)
    reports = []
    for n, run in enumerate(args.run or ["hashmap:3"]):
        backend, parallelism, *where = run.split(":", 2)
        chk = where[0] if where else f"{args.checkpoints.rstrip('/')}/{n}-{backend}-p{parallelism}"
        try:
            reports.append(count_once(spark, args, backend, int(parallelism), chk))
        except Exception as e:  # noqa: BLE001 - reported: some runs are meant to be refused
            reports.append(
                {
                    "backend": backend,
                    "parallelism": int(parallelism),
                    "checkpoints": chk,
                    "error": type(e).__name__,
                    "cause": type(e.__cause__).__name__ if e.__cause__ else None,
                    "message": str(e),
                }
            )
    spark.stop()
    return reports


def count_once(
    spark: Any, args: argparse.Namespace, backend: str, parallelism: int, checkpoints: str
) -> dict[str, Any]:
    from tests.integration.jobs import count_job, final_counts, records
    from tests.support.envs import checkpoint_every_epoch, make_env

    data = records(args.records, args.keys)
    env = make_env(
        parallelism,
        spark=spark,
        max_records=args.epoch_records,
        restarts=3,
        conf={"state.backend.type": backend},
    )
    if checkpoints != "none":  # "none": no checkpointing, the default storage
        checkpoint_every_epoch(env, checkpoints, retain=True)
    sink = count_job(env, data)
    t0 = time.monotonic()
    result = env.execute("bed count")
    seconds = time.monotonic() - t0
    expected: dict[str, int] = {}
    for k, _ in data:
        expected[k] = expected.get(k, 0) + 1
    out = sink.get_results()
    acc = result.get_all_accumulator_results()
    return {
        "backend": backend,
        "parallelism": parallelism,
        "checkpoints": checkpoints,
        "job_id": str(result.get_job_id()),
        "seconds": round(seconds, 1),
        "correct": final_counts(out) == expected and len(out) == len(data),
        "records_out": len(out),
        "epochs": acc["epochs"],
        "subtask_workers": acc["subtask-workers"],
        "subtask_executors": acc.get("subtask-executors", {}),
        "restarts": acc.get("restarts", 0),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.cluster.jobs")
    sub = p.add_subparsers(dest="job", required=True)
    c = sub.add_parser("count", help="the keyed count, checkpoints every epoch")
    c.add_argument("--master", required=True)
    c.add_argument("--checkpoints", default="none")
    c.add_argument(
        "--run",
        action="append",
        help="BACKEND:PARALLELISM[:CHECKPOINTS] (repeatable); CHECKPOINTS: a URL (default: "
        "a directory under --checkpoints) or none (no checkpointing)",
    )
    c.add_argument("--executors", type=int, default=3)
    c.add_argument("--records", type=int, default=3000)
    c.add_argument("--keys", type=int, default=50)
    c.add_argument("--epoch-records", type=int, default=500)
    args = p.parse_args(argv)
    for report in {"count": count}[args.job](args):
        print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()


def run_reports(
    bed: Any, machine: str, job_args: list[str], timeout: float
) -> list[dict[str, Any]]:
    """Run ``python -m tests.cluster.jobs JOB_ARGS`` on ``machine`` of ``bed`` (a driver);
    its REPORT lines. Raises AssertionError with the driver's output when it failed."""
    got = bed.run(machine, [sys.executable, "-m", "tests.cluster.jobs", *job_args], timeout)
    lines = [ln for ln in got.stdout.splitlines() if ln.startswith("REPORT ")]
    assert got.returncode == 0 and lines, (
        f"exit {got.returncode}\n{got.stdout[-3000:]}\n{got.stderr[-6000:]}"
    )
    return [json.loads(ln[len("REPORT ") :]) for ln in lines]
