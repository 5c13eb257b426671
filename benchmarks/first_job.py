"""Where the seconds of a three-record job go (`streamstate run job.py a b a`, issue 26).

    .venv/bin/python -m benchmarks.first_job [--rounds 3] [--variants default,spark-ui,...]

Each round runs every variant once, interleaved (a loaded machine slows them alike), each
as a fresh ``streamstate run`` subprocess of the README's counting job on ``local[*]``.
The job script stamps its phases (``time.perf_counter`` in the job's process, relative to
the interpreter's start):

* ``imports``: Python start and ``import streamstate`` (and what it imports);
* ``session``: the driver JVM (``spark-submit``: a launcher JVM, then the driver JVM) and
  the SparkContext, to ``get_or_create_spark`` returning;
* ``to_running``: from there until the job is RUNNING (plan, specs, REST server);
* ``first_epoch``: the epoch that reads the three records (Python workers, a subtask host
  forked, the shuffle, the checkpoint);
* ``rest``: the end of input, the final checkpoint, stopping the job;
* ``exit``: from ``execute()`` returning to the process gone (JVM shutdown), measured
  outside;
* ``cpu``: CPU seconds (user + system) of what the benchmark reaps: the ``streamstate``
  Python driver only (PySpark does not wait for its JVM, so the JVM's, its Python
  workers' and the subtask hosts' seconds are not in it).

Variants change one thing against ``default`` (what streamstate does for sessions it
builds): ``spark-ui`` (Spark's web UI on, as before issue 26), ``no-hosts`` (subtasks in
PySpark's workers, no subtask host), ``c1-jvm`` (the driver JVM compiles with C1 only and
the serial GC: start-up options), ``appcds`` (the driver JVM maps a class-data archive of
the classes an earlier run of the same job loaded: ``-XX:SharedArchiveFile``, made once
before the rounds with ``-XX:ArchiveClassesAtExit``; what an archive kept by streamstate
would give, see docs/benchmarks.md). Every run has its own ``STREAMSTATE_HOME`` (no warm
``streamstate local`` server is used). Prints one JSON line per run and a median table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.results import Sitting, add_result_option, record, rows_table
from tests.support.job_scripts import CLI, COUNT_PER_KEY, cli_env, job_script

JOB = (
    r"""
import json, os, sys, time
T0 = float(os.environ["FIRST_JOB_T0"])
stamps = {"imports": None}
from streamstate.runtime.job_status import JobObserver
from streamstate.spark.session import get_or_create_spark
"""
    + COUNT_PER_KEY
    + r"""
stamps["imports"] = time.time() - T0


class Stamps(JobObserver):
    def on_status_change(self, job_id, status, timestamp_ms):
        stamps.setdefault(status.name, time.time() - T0)

    def on_epoch(self, job_id, stats):
        stamps.setdefault(f"epoch{stats.epoch}", time.time() - T0)


env = StreamExecutionEnvironment.get_execution_environment()
get_or_create_spark(env.get_configuration())
stamps["session"] = time.time() - T0
env.add_job_observer(Stamps())
env.enable_checkpointing(1000)
words = env.from_collection(sys.argv[1:], Types.STRING())
words.key_by(lambda w: w).process(CountPerKey()).print()
env.execute("count-per-key")
stamps["executed"] = time.time() - T0
print("STAMPS " + json.dumps(stamps), file=sys.stderr)
"""
)

#: where the appcds variant's archive is (made by :func:`_make_archive`)
ARCHIVE = "driver.jsa"
#: CDS's own log lines (they go to stdout, the job's output) off
QUIET_CDS = "-Xlog:disable -Xlog:all=off"

VARIANTS: dict[str, list[str]] = {
    "default": [],
    "spark-ui": ["-D", "spark.ui.enabled=true"],
    "no-hosts": ["-D", "execution.runner.spark.subtask-hosts=false"],
    "c1-jvm": [
        "-D",
        "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    ],
    "appcds": [
        "-D",
        f"spark.driver.extraJavaOptions=-XX:SharedArchiveFile={{work}}/{ARCHIVE} {QUIET_CDS}",
    ],
}


def _phases(stamps: dict[str, float], total: float) -> dict[str, float]:
    epoch1 = stamps.get("epoch1", stamps["executed"])
    return {
        "imports": stamps["imports"],
        "session": stamps["session"] - stamps["imports"],
        "to_running": stamps["RUNNING"] - stamps["session"],
        "first_epoch": epoch1 - stamps["RUNNING"],
        "rest": stamps["executed"] - epoch1,
        "exit": total - stamps["executed"],
        "total": total,
    }


def _run(options: list[str], work: Path) -> tuple[subprocess.CompletedProcess[str], float, float]:
    job = job_script(work, JOB)
    env = cli_env(STREAMSTATE_HOME=str(work / "home"))  # a cold start: no warm local server
    options = [o.replace("{work}", str(work)) for o in options]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    env["FIRST_JOB_T0"] = repr(t0)
    proc = subprocess.run(
        [CLI, "run", *options, str(job), "a", "b", "a"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    total = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{options}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc, total, cpu


def _make_archive(work: Path) -> None:
    """The appcds variant's archive: the classes one run of the job loads, dumped when its
    driver JVM exits."""
    dump = f"-XX:ArchiveClassesAtExit={work}/{ARCHIVE} {QUIET_CDS}"
    _run(["-D", f"spark.driver.extraJavaOptions={dump}"], work)
    if not (work / ARCHIVE).exists():
        raise RuntimeError(f"no archive at {work / ARCHIVE}")


def run_once(variant: str, work: Path) -> dict[str, float]:
    proc, total, cpu = _run(VARIANTS[variant], work)
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("STAMPS "))
    return {**_phases(json.loads(line[len("STAMPS ") :]), total), "cpu": cpu}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.first_job", argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="streamstate-first-job-") as tmp:
        if "appcds" in variants:
            _make_archive(Path(tmp))
        for r in range(args.rounds):
            for v in variants:
                got = run_once(v, Path(tmp))
                results[v].append(got)
                print(json.dumps({"round": r, "variant": v, **got}), flush=True)
    names = ["imports", "session", "to_running", "first_epoch", "rest", "exit", "total", "cpu"]
    print("\nmedians (s) over", args.rounds, "rounds; load average", os.getloadavg()[0])
    print(f"{'variant':10} " + " ".join(f"{n:>11}" for n in names))
    medians = {}
    for v, runs in results.items():
        med = medians[v] = {n: statistics.median(r[n] for r in runs) for n in names}
        print(f"{v:10} " + " ".join(f"{med[n]:11.2f}" for n in names))
    if "default" in results:  # round by round: the same moment's load on both
        print("\n/ default's in the same round, median:   total     cpu")
        for v, runs in results.items():
            pairs = list(zip(runs, results["default"], strict=True))
            wall = statistics.median(r["total"] / d["total"] for r, d in pairs)
            cpu = statistics.median(r["cpu"] / d["cpu"] for r, d in pairs)
            medians[v]["total / default (same round)"] = wall
            print(f"{v:10} {' ':28} {wall:7.2f} {cpu:7.2f}")
    if args.result:
        rows = [{"variant, median s": v, **med} for v, med in medians.items()]
        record("first_job", sitting.run([rows_table(rows)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
