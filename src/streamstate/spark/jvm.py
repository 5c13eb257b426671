"""Starting Spark's JVM quietly, for the sessions streamstate builds.

PySpark starts the driver JVM (``spark-submit pyspark-shell``) when the first SparkContext
is created, and that JVM writes to the terminal: Spark's "default log4j profile" banner,
"Setting default log level", Hadoop's NativeCodeLoader warning, and the JVM's own
``WARNING: Using incubator modules`` line (Spark 4 always passes ``--add-modules
jdk.incubator.vector``). None of it says anything about the job.

:func:`start_quiet_gateway` starts that JVM itself, before the session is built, with

* a log4j 2 configuration of our own (``log4j2-quiet.properties``): everything at WARN,
  Hadoop's NativeCodeLoader at ERROR, the console on stderr as Spark's default; and
* its stderr read by a daemon thread that drops the JVM's start-up notices
  (:data:`JVM_NOTICES`) and forwards every other line to this process's stderr as it
  comes (a JVM crash report, a WARN from Spark, ``-verbose`` output: all of it).

A user's own ``spark.driver.extraJavaOptions`` are kept (ours are appended); a user who
sets ``-Dlog4j2.configurationFile`` keeps theirs. Under ``spark-submit`` (the JVM exists
already) nothing is started here.
"""

from __future__ import annotations

import os
import re
import threading
from importlib import resources
from typing import Any

__all__ = ["JVM_NOTICES", "LOG4J_CONFIG", "quiet_java_options", "start_quiet_gateway"]

#: the log4j 2 configuration of quiet sessions (package data of streamstate.spark)
LOG4J_CONFIG = "log4j2-quiet.properties"

#: lines the JVM writes at start-up that say nothing about the job (dropped)
JVM_NOTICES = re.compile(
    r"^(WARNING: Using incubator modules: |Using Spark's default log4j profile: |"
    r"Setting default log level to |To adjust logging level use sc\.setLogLevel)"
)

_DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
#: this process's stderr (the descriptor: ``sys.stderr`` may be replaced by then)
_STDERR_FD = 2


def _log4j_config_path() -> str:
    return str(resources.files("streamstate.spark").joinpath(LOG4J_CONFIG))


def quiet_java_options(user_options: str | None) -> str:
    """``spark.driver.extraJavaOptions`` for a quiet driver JVM: the user's, then our log4j
    configuration (unless the user names one)."""
    user = (user_options or "").strip()
    if "log4j2.configurationFile" in user or "log4j.configurationFile" in user:
        return user
    ours = f"-Dlog4j2.configurationFile=file:{_log4j_config_path()}"
    return f"{user} {ours}".strip()


def _forward(stream: Any, out_fd: int) -> None:
    """Copy the JVM's stderr to ``out_fd`` line by line, without its start-up notices."""
    with stream:
        for raw in iter(stream.readline, b""):
            if JVM_NOTICES.match(raw.decode("utf-8", "replace")):
                continue
            try:
                os.write(out_fd, raw)
            except OSError:
                return  # our stderr is gone (closed pipe): nothing left to show it on


def start_quiet_gateway(conf: dict[str, str]) -> None:
    """Start the driver JVM for a session built from ``conf`` (``spark.*`` keys passed to
    ``spark-submit`` as PySpark would), quietly; a no-op when a JVM is already there."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return
    spark_conf = SparkConf(loadDefaults=False)
    for key, value in conf.items():
        spark_conf.set(key, value)
    spark_conf.set(_DRIVER_OPTIONS, quiet_java_options(conf.get(_DRIVER_OPTIONS)))
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "rb")
    forwarder = threading.Thread(
        target=_forward,
        args=(reader, _STDERR_FD),
        name="streamstate-jvm-stderr",
        daemon=True,
    )
    forwarder.start()  # before the launch: a JVM that dies at start still shows why
    try:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": write_fd})
    finally:
        os.close(write_fd)  # the JVM holds its own copy; EOF comes when it exits
    SparkContext._ensure_initialized(gateway=gateway)
