"""Recovery from a lost worker machine on the cluster bed, against the state size.

Builds the bed of tests/cluster/bed.py (3 worker machines, a driver machine, SeaweedFS as
the only shared storage; needs root), then per backend and state size runs the bed's
fault job (tests/cluster/fault_job.py) with ``streamstate run`` on the driver machine:
``--keys`` keys, each keeping ``--value-bytes`` random bytes written once plus a running
sum, a checkpoint every epoch and a FileSink on S3. Two passes over the keys: the first
builds the state, the second only updates the sums. A gate holds the job in the middle of
the second pass; the worker machine holding it is lost (every process killed, its disk
wiped) and the gate released at once.

Measured, from the appearance of each checkpoint's ``_metadata`` in S3 (polled every
0.1 s by this process):

* ``recovery_s``: from the loss to the first checkpoint completed after it (the held
  epoch, run again: Spark notices the lost executor, re-runs its tasks elsewhere, the
  subtasks rebuild their state from the epoch versions in S3);
* ``epoch_s``: the median interval between the checkpoints of the second pass before the
  gate, in the same run (the baseline); ``ratio`` = recovery_s / epoch_s;
* ``state_mb``: the state the job holds (keys x value bytes).

The lost machine comes back (empty disk, a new worker) before the next run; the job's
output is checked against the failure-free output. Everything is torn down at the end.

Run (as root): ``python -m benchmarks.cluster_recovery [--sizes-mb 1,8,32]
[--backends hashmap,rocksdb] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from typing import Any

from benchmarks.cluster_bed import benchmark_bed
from benchmarks.results import Sitting, add_result_option, publish, rows_table
from tests.cluster.bed import ROOT, Bed
from tests.cluster.checks import committed_lines

JOB = f"{ROOT}/tests/cluster/fault_job.py"
VALUE_BYTES = 4096
#: epochs per pass over the keys (the baseline: the second pass's epochs before the gate)
EPOCHS_PER_PASS = 6
SIGNING_KEY = "bed-benchmark-signing-key"


class CheckpointWatch(threading.Thread):
    """When each ``chk-<n>/_metadata`` under a prefix appeared (this host's clock)."""

    def __init__(self, bed: Bed, prefix: str) -> None:
        super().__init__(daemon=True)
        self.fs, self.prefix = bed.s3fs(), prefix
        self.seen: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                found = self.fs.glob(f"{self.prefix}/*/chk-*/_metadata")
            except OSError:
                found = []
            now = time.monotonic()
            for path in found:
                n = int(path.rsplit("/", 2)[1].removeprefix("chk-"))
                self.seen.setdefault(n, now)
            self.done.wait(0.1)


def measure(bed: Bed, backend: str, state_mb: float) -> dict[str, Any]:
    keys = max(3, int(state_mb * 1024 * 1024 / VALUE_BYTES))
    epoch_records = max(10, keys // EPOCHS_PER_PASS)
    gate = keys + keys // 2 + epoch_records // 2  # mid-epoch, in the second pass
    run = f"recovery-{backend}-{state_mb:g}mb-{int(time.time())}"
    fs = bed.s3fs()
    chk = bed.s3_url(f"{run}/chk")
    command = (
        ["streamstate", "run", "--master", bed.spark_master, "-p", "3"]
        + ["-D", f"execution.epoch.max-records={epoch_records}"]
        + ["-D", "spark.executor.memory=512m", "-D", f"spark.executorEnv.PYTHONPATH={ROOT}"]
        + ["-D", "spark.ui.enabled=false"]
        + [JOB, "--", "--out", bed.s3_url(f"{run}/out"), "--checkpoints", chk]
        + ["--gates", bed.s3_url(f"{run}/gates"), "--backend", backend]
        + ["--records", str(2 * keys), "--keys", str(keys), "--gate", str(gate)]
        + ["--value-bytes", str(VALUE_BYTES)]
    )
    watch = CheckpointWatch(bed, f"bed/{run}/chk")
    watch.start()
    driver = bed.spawn("driver", command, f"job-{run}", {"STREAMSTATE_CHECKPOINT_KEY": SIGNING_KEY})
    try:
        deadline = time.monotonic() + 900
        holder = None
        while holder is None:
            if driver.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no gate reached: {bed.log('driver', f'job-{run}')[-4000:]}")
            found = fs.glob(f"bed/{run}/gates/{gate}.reached.*")
            holder = found[0].rsplit(".", 1)[-1] if found else None
            time.sleep(0.1)
        before = dict(watch.seen)
        lost_at = time.monotonic()
        bed.lose(holder)
        fs.pipe_file(f"bed/{run}/gates/{gate}.released", b"")
        code = driver.wait(900)
        if code != 0:
            raise RuntimeError(f"job failed: {bed.log('driver', f'job-{run}')[-4000:]}")
    finally:
        watch.done.set()
        watch.join()
    after = sorted(t for n, t in watch.seen.items() if n not in before and t > lost_at)
    # the second pass's checkpoints before the gate: sums only, as the held epoch
    second = [t for n, t in sorted(before.items()) if n >= EPOCHS_PER_PASS]
    intervals = [b - a for a, b in zip(second, second[1:], strict=False)]
    epoch_s = statistics.median(intervals) if intervals else float("nan")
    recovery_s = after[0] - lost_at
    report_line = bed.log("driver", f"job-{run}").split("REPORT ", 1)[1].splitlines()[0]
    report = json.loads(report_line)
    bed.start_machine(holder)  # a replacement machine: empty disk, same name
    bed.start_worker(holder)
    bed.wait_worker(holder)
    return {
        "backend": backend,
        "state_mb": round(keys * VALUE_BYTES / 2**20, 1),
        "keys": keys,
        "lost": holder,
        "recovery_s": round(recovery_s, 2),
        "epoch_s": round(epoch_s, 2),
        "ratio": round(recovery_s / epoch_s, 1) if intervals else None,
        # subtask-epochs that rebuilt their state (not found in place) and their restore time
        "rebuilt": report.get("cache_misses"),
        "restore_s": report.get("subtask-seconds.restore"),
        "restarts": report.get("restarts"),
        "correct": _correct(fs, run, keys),
    }


def _correct(fs: Any, run: str, keys: int) -> bool:
    """The output is the failure-free one: each (key, i, running sum) once."""
    totals: dict[str, int] = {}
    expected = []
    for i in range(2 * keys):
        k = f"k{i % keys}"
        totals[k] = totals.get(k, 0) + i
        expected.append(f"{k},{i},{totals[k]}")
    return committed_lines(fs, f"bed/{run}/out") == sorted(expected)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cluster_recovery")
    p.add_argument("--sizes-mb", default="1,8,32")
    p.add_argument("--backends", default="hashmap,rocksdb")
    p.add_argument("--json", help="write the rows to this file")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.cluster_recovery", argv)
    rows = []
    with benchmark_bed() as bed:
        for backend in args.backends.split(","):
            for size in args.sizes_mb.split(","):
                row = measure(bed, backend, float(size))
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(
        "| backend | state (MB) | recovery (s) | epoch (s) | recovery / epoch "
        "| rebuilt subtask-epochs | restore (s, whole job) | restarts | correct |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['backend']} | {r['state_mb']} | {r['recovery_s']} | {r['epoch_s']} | "
            f"{r['ratio']} | {r['rebuilt']} | {r['restore_s']} | {r['restarts']} | "
            f"{'yes' if r['correct'] else 'NO'} |"
        )
    publish(
        "cluster_recovery", lambda: sitting.run([rows_table(rows)]), args.result, args.json, rows
    )


if __name__ == "__main__":
    main()
