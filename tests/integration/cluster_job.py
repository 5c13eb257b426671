"""Run the keyed count on a given master and print a JSON report (used by test_local_cluster)."""

from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def main() -> None:
    master, chk_dir = sys.argv[1], sys.argv[2]
    hosts = sys.argv[3] if len(sys.argv) > 3 else "true"
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # tests stay on loopback
    from pyspark.sql import SparkSession

    from streamstate.datastream import ExternalizedCheckpointCleanup
    from tests.integration.jobs import count_job, final_counts, make_env, records

    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.executor.memory", "768m")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    data = records(3000, 50)
    env = make_env(spark, epoch_records=150, **{"execution.runner.spark.subtask-hosts": hosts})
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(chk_dir)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(
        ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    )
    sink = count_job(env, data)
    result = env.execute("local-cluster count")
    acc = result.get_all_accumulator_results()
    expected: dict[str, int] = {}
    for k, _ in data:
        expected[k] = expected.get(k, 0) + 1
    out = sink.get_results()
    report = {
        "correct": final_counts(out) == expected and len(out) == len(data),
        "epochs": acc["epochs"],
        "cache_hits": acc["cache_hits"],
        "cache_misses": acc["cache_misses"],
        "subtask_workers": acc["subtask-workers"],
        "executors": spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1,
    }
    print("REPORT " + json.dumps(report))
    spark.stop()


if __name__ == "__main__":
    main()
