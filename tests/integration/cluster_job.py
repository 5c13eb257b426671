"""Run the keyed count on a given master once per configuration and print a JSON report
per run (used by test_local_cluster).

    python cluster_job.py MASTER CHECKPOINT_DIR HOSTS:PLACEMENT:BACKEND ...

HOSTS and PLACEMENT are ``true``/``false`` (``execution.runner.spark.subtask-hosts``,
``execution.runner.spark.preferred-locations``), BACKEND a ``state.backend.type``. All
runs share one Spark application (one start-up).
"""

from __future__ import annotations

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def run(spark, chk_dir: str, hosts: str, placement: str, backend: str) -> dict:
    from streamstate.datastream import ExternalizedCheckpointCleanup
    from tests.integration.jobs import count_job, final_counts, make_env, records

    data = records(3000, 50)
    conf = {
        "execution.runner.spark.subtask-hosts": hosts,
        "execution.runner.spark.preferred-locations": placement,
        "state.backend.type": backend,
    }
    env = make_env(spark, epoch_records=150, **conf)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(chk_dir)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(
        ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    )
    sink = count_job(env, data)
    t0 = time.monotonic()
    result = env.execute("local-cluster count")
    seconds = time.monotonic() - t0
    acc = result.get_all_accumulator_results()
    expected: dict[str, int] = {}
    for k, _ in data:
        expected[k] = expected.get(k, 0) + 1
    out = sink.get_results()
    return {
        "config": f"{hosts}:{placement}:{backend}",
        "seconds": round(seconds, 1),
        "correct": final_counts(out) == expected and len(out) == len(data),
        "epochs": acc["epochs"],
        "cache_hits": acc["cache_hits"],
        "cache_misses": acc["cache_misses"],
        "subtask_workers": acc["subtask-workers"],
        "subtask_executors": acc.get("subtask-executors", {}),
        "executor_kept": acc.get("executor_kept", 0),
        "executor_moved": acc.get("executor_moved", 0),
        "restores": {k: v for k, v in acc.items() if k.startswith("state_restores_")},
        "executors": spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1,
    }


def main() -> None:
    master, chk_dir = sys.argv[1], sys.argv[2]
    configs = sys.argv[3:] or ["true:true:hashmap"]
    from tests.support.cluster import cluster_session

    spark = cluster_session(master, "ERROR")
    for n, config in enumerate(configs):
        hosts, placement, backend = config.split(":")
        report = run(spark, os.path.join(chk_dir, str(n)), hosts, placement, backend)
        print("REPORT " + json.dumps(report), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
