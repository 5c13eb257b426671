"""The SparkSession a job runs on: the one given, the active one, or a new ``local[*]``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

from streamstate.errors import ConfigurationError

__all__ = [
    "QUIET_KEY",
    "TASK_FAILURE_LOGGERS",
    "check_java",
    "check_worker_python",
    "connect_session",
    "get_or_create_spark",
    "resolve_master",
    "silence_task_failure_logs",
]

#: ``true`` (default): Spark's console progress bar off and its logs at WARN
QUIET_KEY = "execution.runner.spark.quiet"


def resolve_master(
    conf: dict[str, str], launched: bool, default_master: str | None = None
) -> str | None:
    """The master to set on the builder, or None to keep the submitted one.

    A ``spark.master`` key wins; under ``spark-submit``/``pyspark`` (``launched``) the
    submitted master wins over any default; otherwise ``STREAMSTATE_SPARK_MASTER``,
    ``default_master``, ``local[*]``."""
    if conf.get("spark.master"):
        return conf["spark.master"]
    if launched:
        return None
    return os.environ.get("STREAMSTATE_SPARK_MASTER") or default_master or "local[*]"


def check_java() -> None:
    """Raise a ConfigurationError saying how to get Java when Spark could not start a JVM."""
    home = os.environ.get("JAVA_HOME")
    if (home and os.path.exists(os.path.join(home, "bin", "java"))) or shutil.which("java"):
        return
    raise ConfigurationError(
        "Spark needs Java 17, and no java was found (JAVA_HOME is "
        f"{'unset' if not home else repr(home) + ' without bin/java'} and java is not on the "
        "PATH). Install a JDK or JRE 17 (e.g. `apt-get install openjdk-17-jre-headless`, "
        "`brew install openjdk@17`, or https://adoptium.net) and set JAVA_HOME. To run a job "
        "without Spark (tests, small inputs), set execution.runner: local."
    )


_probed: set[str] = set()


def check_worker_python(master: str | None) -> None:
    """On a local master, probe ``PYSPARK_PYTHON`` once: it must import streamstate."""
    worker = os.environ.get("PYSPARK_PYTHON")
    if not worker or (master is not None and not master.startswith("local")):
        return
    path = shutil.which(worker) or worker
    if os.path.realpath(path) == os.path.realpath(sys.executable) or path in _probed:
        return
    try:
        done = subprocess.run(
            [path, "-c", "import streamstate"], capture_output=True, text=True, timeout=120
        )
        failed, why = done.returncode != 0, (done.stderr.strip().splitlines() or [""])[-1]
    except OSError as e:
        failed, why = True, str(e)
    if failed:
        raise ConfigurationError(
            f"PYSPARK_PYTHON={worker} cannot import streamstate ({why}); Spark's Python "
            f"workers run that interpreter. Install streamstate into it "
            f"(`{path} -m pip install streamstate`), or point PYSPARK_PYTHON at this "
            f"interpreter ({sys.executable}) or unset it."
        )
    _probed.add(path)


def get_or_create_spark(
    configuration: Any = None, app_name: str = "streamstate", default_master: str | None = None
) -> Any:
    """An existing session wins (``spark-submit`` / notebooks); otherwise build one.

    ``spark.master`` and any other ``spark.*`` keys of the job configuration are
    passed to the builder; under ``spark-submit`` the submitted master wins over
    ``default_master`` (default ``local[*]``). Python workers are reused across tasks
    (``spark.python.worker.reuse``), which is what lets a subtask find its state in memory
    in the next epoch. Unless ``execution.runner.spark.quiet: false``, Spark's console
    progress bar is off and its logs at WARN. Before a JVM starts: a clear error when
    there is no Java, or when ``PYSPARK_PYTHON`` (on a local master) lacks streamstate.
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
    quiet = str(conf.get(QUIET_KEY, "true")).strip().lower() != "false"
    master = resolve_master(conf, launched, default_master)
    if not launched:
        check_java()
    check_worker_python(master)
    if master is not None and "spark.master" not in conf:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        # a single machine: keep driver and executors on loopback
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = builder.config("spark.python.worker.reuse", "true")
    if quiet:
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    for k, v in conf.items():
        if k.startswith("spark."):
            builder = builder.config(k, v)
    session = builder.getOrCreate()
    if quiet:
        session.sparkContext.setLogLevel("WARN")
    return session


#: the JVM loggers that print every failed task's Python traceback (the executor's ERROR and
#: the scheduler's WARN): streamstate raises the worker's error itself, once
TASK_FAILURE_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
)


def silence_task_failure_logs(spark: Any) -> None:
    """Turn off the JVM's per-task failure logs (``execution.task-failure-logs: true`` keeps
    them): the job's error already carries the worker's traceback, so they only repeat it."""
    sc = spark.sparkContext
    if getattr(sc, "_streamstate_silenced", False):
        return  # once per context: each call costs JVM round trips on every job's start
    try:
        jvm = sc._jvm
        level = jvm.org.apache.logging.log4j.Level.OFF
        for name in TASK_FAILURE_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    except Exception:  # noqa: BLE001 - a JVM without log4j 2 keeps its logs; nothing breaks
        pass
    sc._streamstate_silenced = True


def connect_session(url: str, configuration: Any = None) -> Any:
    """A new Spark Connect session at ``url`` (``sc://host:port``): a session of its own on
    the server (its own session id; the user id is this OS user), with the job's
    ``spark.sql.*`` keys set on it (a Connect client cannot set the server's static keys).

    Made with the Connect client's own builder, not ``SparkSession.builder.remote``: that
    one refuses to run next to a classic SparkContext in the same process and switches the
    whole process to Connect mode (``SPARK_CONNECT_MODE_ENABLED``)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    conf = configuration.to_dict() if configuration is not None else {}
    builder = ConnectSession.builder.remote(url)
    for k, v in conf.items():
        if k.startswith("spark.sql."):
            builder = builder.config(k, v)
    return builder.create()
