"""The SparkSession a job runs on: the one given, the active one, or a new ``local[*]``."""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["TASK_FAILURE_LOGGERS", "get_or_create_spark", "silence_task_failure_logs"]


def get_or_create_spark(configuration: Any = None, app_name: str = "streamstate") -> Any:
    """An existing session wins (``spark-submit`` / notebooks); otherwise build one.

    ``spark.master`` and any other ``spark.*`` keys of the job configuration are
    passed to the builder; the default master is ``local[*]``. Python workers are
    reused across tasks (``spark.python.worker.reuse``), which is what lets a
    subtask find its state in memory in the next epoch.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    conf = configuration.to_dict() if configuration is not None else {}
    # Under spark-submit (or pyspark shell) the JVM already exists with its --master:
    # PYSPARK_GATEWAY_PORT is set, and the master must not be overridden.
    launched = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    master = conf.get("spark.master") or (
        None if launched else os.environ.get("STREAMSTATE_SPARK_MASTER", "local[*]")
    )
    if master is not None and "spark.master" not in conf:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        # a single machine: keep driver and executors on loopback
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = builder.config("spark.python.worker.reuse", "true").config(
        "spark.ui.showConsoleProgress", "false"
    )
    for k, v in conf.items():
        if k.startswith("spark."):
            builder = builder.config(k, v)
    return builder.getOrCreate()


#: the JVM loggers that print every failed task's Python traceback (the executor's ERROR and
#: the scheduler's WARN): streamstate raises the worker's error itself, once
TASK_FAILURE_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
)


def silence_task_failure_logs(spark: Any) -> None:
    """Turn off the JVM's per-task failure logs (``execution.task-failure-logs: true`` keeps
    them): the job's error already carries the worker's traceback, so they only repeat it."""
    try:
        jvm = spark.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.OFF
        for name in TASK_FAILURE_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    except Exception:  # noqa: BLE001 - a JVM without log4j 2 keeps its logs; nothing breaks
        pass
