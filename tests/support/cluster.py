"""The SparkSession of the cluster test scripts (tests/integration/cluster_job.py,
executor_kill_job.py): a master of the caller's choice whose executors find this checkout."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

__all__ = ["cluster_session"]


def cluster_session(
    master: str, log_level: str = "ERROR", conf: Mapping[str, str] | None = None
) -> Any:
    """A SparkSession on ``master`` (``local-cluster[...]`` or ``spark://...``) whose Python
    workers import streamstate and the tests from this checkout, on loopback; ``conf``:
    further Spark settings."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # tests stay on loopback
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = (
        builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.executor.memory", "768m")
        .config("spark.python.worker.reuse", "true")
        # a standalone worker starts executors with its own environment, not the driver's
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(log_level)
    return spark
