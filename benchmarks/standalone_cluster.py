"""A Spark standalone cluster of two workers, started from the pip install, measured.

Starts a master and two workers on this machine with ``spark-class`` from the installed
``pyspark`` (no Spark download: ``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker``, one core and ``--worker-memory`` each), then:

1. runs the keyed count of ``tests/integration/cluster_job.py`` (3000 records, 50 keys,
   150 records per epoch, a checkpoint every epoch, parallelism 2) once per
   configuration (subtask hosts on/off x preferred locations on/off, heap and RocksDB),
   reporting per run the subtask-epochs whose state was found in place and the ones
   whose task ran on the executor of the subtask's previous epoch;
2. kills one executor JVM with SIGKILL in the middle of a job
   (``tests/integration/executor_kill_job.py``) and checks the output against the
   failure-free run.

Everything is stopped at the end (the processes it started, by pid).

Run: ``python -m benchmarks.standalone_cluster [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

from benchmarks.results import Sitting, add_result_option, figures_table, publish, rows_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = os.path.join(ROOT, "tests", "integration")
CONFIGS = [
    "true:true:hashmap",
    "true:true:rocksdb",
    "false:true:hashmap",
    "false:true:rocksdb",
    "false:false:hashmap",
]


def spark_class() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def start_cluster(
    work: str, workers: int, memory: str, cores: int = 1
) -> tuple[str, str, list[subprocess.Popen]]:
    """Master URL, its web UI and the started processes (master first); every worker
    offers ``cores`` cores and ``memory``.

    The master binds ports the kernel picks (``--port 0 --webui-port 0``), read back from
    its log: a port chosen here and bound later could be taken in between by another
    process (Spark would then move to the next port, and the workers and the status poll
    would talk to the wrong server)."""
    import pyspark

    env = dict(os.environ)
    env["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    procs: list[subprocess.Popen] = []
    master_log = os.path.join(work, "master.log")
    try:
        procs.append(
            subprocess.Popen(
                [spark_class(), "org.apache.spark.deploy.master.Master"]
                + ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
                stdout=open(master_log, "w"),
                stderr=subprocess.STDOUT,
                env=env,
            )
        )
        port, ui = _bound_ports(master_log, procs[0], ("sparkMaster", "MasterUI"))
        master = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            wdir = os.path.join(work, f"worker-{i}")
            os.makedirs(wdir)
            procs.append(
                subprocess.Popen(
                    [spark_class(), "org.apache.spark.deploy.worker.Worker"]
                    + ["--cores", str(cores), "--memory", memory, "--work-dir", wdir]
                    + ["--webui-port", "0", "--host", "127.0.0.1", master],
                    stdout=open(os.path.join(work, f"worker-{i}.log"), "w"),
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
        ui_url = f"http://127.0.0.1:{ui}/json/"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(ui_url, timeout=5) as r:
                    if json.load(r).get("aliveworkers", 0) >= workers:
                        return master, ui_url, procs
            except OSError:
                pass
            time.sleep(1)
        raise RuntimeError(f"the standalone cluster did not come up; logs in {work}")
    except BaseException:
        stop(procs)  # the master and workers never outlive a start that failed
        raise


def _bound_ports(
    log_path: str, proc: subprocess.Popen, services: tuple[str, ...], timeout_s: float = 120
) -> list[int]:
    """The ports Spark's ``Successfully started service '<name>' on port N`` lines of the
    log at ``log_path`` name for ``services``, in that order, once all were logged."""
    patterns = {name: re.compile(rf"started service '{name}' on port (\d+)") for name in services}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(log_path, errors="replace") as f:
            text = f.read()
        found = {name: p.search(text) for name, p in patterns.items()}
        if all(found.values()):
            return [int(found[name].group(1)) for name in services]  # type: ignore[union-attr]  # all matched
        if proc.poll() is not None:
            raise RuntimeError(f"the Spark master exited ({proc.returncode}); log: {log_path}")
        time.sleep(0.2)
    raise RuntimeError(
        f"the Spark master did not log its ports within {timeout_s:.0f} s: {log_path}"
    )


def stop(procs: list[subprocess.Popen]) -> None:
    for p in reversed(procs):  # workers first (they stop their executors), then the master
        p.terminate()
    for p in reversed(procs):
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


def reports(cmd: list[str]) -> list[dict[str, Any]]:
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(proc.stderr[-3000:])
    return [json.loads(ln[len("REPORT ") :]) for ln in lines]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker-memory", default="1g")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--json", help="also write the figures to this file")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.standalone_cluster", argv)
    work = tempfile.mkdtemp(prefix="ss-standalone-")
    t0 = time.monotonic()
    master, _, procs = start_cluster(work, 2, args.worker_memory)
    started = time.monotonic() - t0
    try:
        t0 = time.monotonic()
        runs = reports(
            [sys.executable, os.path.join(JOBS, "cluster_job.py"), master, f"{work}/chk"]
            + args.configs.split(",")
        )
        t_runs = time.monotonic() - t0
        print(f"standalone cluster {master}: 2 workers up in {started:.1f} s")
        print(
            f"{'hosts:placement:backend':<26s} {'correct':>7s} {'in place':>10s} "
            f"{'same exec':>10s} {'seconds':>8s}"
        )
        for r in runs:
            total = r["cache_hits"] + r["cache_misses"]
            moved = r["executor_kept"] + r["executor_moved"]
            print(
                f"{r['config']:<26s} {r['correct']!s:>7s} "
                f"{r['cache_hits']:>4d}/{total:<5d} {r['executor_kept']:>4d}/{moved:<5d} "
                f"{r.get('seconds', 0):>8.1f}",
                flush=True,
            )
        print(f"(all runs: {t_runs:.1f} s in one Spark application)", flush=True)
        t0 = time.monotonic()
        (kill,) = reports(
            [sys.executable, os.path.join(JOBS, "executor_kill_job.py"), master, f"{work}/kill"]
        )
        t_kill = time.monotonic() - t0
    finally:
        stop(procs)
    shutil.rmtree(work, ignore_errors=True)  # kept when a run failed: its logs are there
    print(
        f"executor {kill['killed_executor']} killed after epoch {kill['killed_after_epochs']}: "
        f"output equal to the failure-free run: {kill['equal']}, restarts {kill['restarts']}, "
        f"executors after: {kill['executors_after']} ({t_kill:.1f} s with start-up)"
    )
    publish(
        "standalone_cluster",
        lambda: sitting.run([rows_table(runs), figures_table(kill)]),
        args.result,
        args.json,
        {"master_start_s": started, "runs": runs, "kill": kill},
    )


if __name__ == "__main__":
    main()
