"""Kill an executor JVM with SIGKILL in the middle of a job on a Spark cluster; print a
JSON report comparing the output with a failure-free run of the same job.

    python executor_kill_job.py MASTER CHECKPOINT_DIR [KILL_AFTER_EPOCHS]

MASTER is ``local-cluster[2,1,1024]`` or a standalone master (``spark://host:7077``)
whose executors run on this machine (the script finds their JVMs in ``/proc``). Used by
tests/integration/test_executor_kill.py and docs/cluster.md.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

BACKEND = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def executor_jvms(app_id: str) -> dict[str, int]:
    """Executor id -> pid of this application's executor JVMs on this machine."""
    out: dict[str, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0")]
        except OSError:
            continue
        if BACKEND in args and app_id in args and "--executor-id" in args:
            out[args[args.index("--executor-id") + 1]] = int(name)
    return out


def job(spark, chk_dir: str):
    """The keyed count; on ``spark``, or on the in-process runner when it is ``None``."""
    from tests.integration.jobs import count_job, make_env, records

    env = make_env(spark, epoch_records=100)  # 3 restarts allowed
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(chk_dir)
    sink = count_job(env, records(1000, 40))
    return env, sink


def main() -> None:
    master, chk_dir = sys.argv[1], sys.argv[2]
    kill_after = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    from tests.support.cluster import cluster_session

    spark = cluster_session(master, "OFF")  # the lost executor's task failures are expected
    app_id = spark.sparkContext.applicationId

    # the failure-free run: the same job on the in-process runner (same epochs, same
    # output; it saves a second run on the cluster)
    t0 = time.monotonic()
    env, sink = job(None, os.path.join(chk_dir, "clean"))
    clean = env.execute("executor-kill: failure-free")
    baseline = sink.get_results()
    t_clean = time.monotonic() - t0

    t0 = time.monotonic()
    env, sink = job(spark, os.path.join(chk_dir, "killed"))
    client = env.execute_async("executor-kill: killed")
    deadline = time.monotonic() + 300
    while client.epochs_completed < kill_after and time.monotonic() < deadline:
        time.sleep(0.05)
    jvms = executor_jvms(app_id)
    victim = sorted(jvms)[0] if jvms else None
    if victim is not None:
        os.kill(jvms[victim], signal.SIGKILL)
    killed_at = client.epochs_completed
    result = client.get_job_execution_result().result(600)
    out = sink.get_results()
    t_killed = time.monotonic() - t0
    acc = result.get_all_accumulator_results()
    report = {
        "executors_before": sorted(jvms),
        "killed_executor": victim,
        "killed_after_epochs": killed_at,
        "executors_after": sorted(executor_jvms(app_id)),
        "epochs": acc["epochs"],
        "clean_epochs": clean.get_accumulator_result("epochs"),
        "restarts": acc.get("restarts", 0),
        "records": len(out),
        "equal": sorted(out) == sorted(baseline),
        "same_order_per_key": _per_key(out) == _per_key(baseline),
        "seconds_clean": round(t_clean, 1),
        "seconds_killed": round(t_killed, 1),
    }
    print("REPORT " + json.dumps(report), flush=True)
    spark.stop()


def _per_key(out: list) -> dict:
    by: dict = {}
    for k, c in out:
        by.setdefault(k, []).append(c)
    return by


if __name__ == "__main__":
    main()
