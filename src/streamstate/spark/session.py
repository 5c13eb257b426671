"""The SparkSession a job runs on: the one given, the active one, or a new ``local[*]``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from typing import Any

from streamstate.errors import ConfigurationError, WorkerEnvironmentError

__all__ = [
    "IgnoredSparkSettingWarning",
    "QUIET_KEY",
    "TASK_FAILURE_LOGGERS",
    "check_java",
    "check_session_python",
    "check_worker_python",
    "connect_session",
    "bind_job_session",
    "require_classic",
    "get_or_create_spark",
    "is_connect_session",
    "job_session",
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


#: worker interpreters that imported streamstate (probed once per process)
_probed: set[str] = set()


def _probe(python: str) -> str | None:
    """None when ``python`` imports streamstate, else why not (its last error line)."""
    try:
        done = subprocess.run(
            [python, "-c", "import streamstate"], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]


def _same_interpreter(path: str) -> bool:
    # not realpath: a virtualenv's python is a symlink to the system's, with other packages
    return os.path.abspath(path) == os.path.abspath(sys.executable)


def check_worker_python(master: str | None, worker: str | None = None) -> None:
    """On a local master, probe the Python that Spark's workers run (``worker``, default
    ``PYSPARK_PYTHON``) once: it must import streamstate. A cluster's workers are not
    probed from here (their first task fails with :class:`WorkerEnvironmentError`)."""
    explicit = worker is None
    worker = os.environ.get("PYSPARK_PYTHON") if worker is None else worker
    if not worker or (master is not None and not master.startswith("local")):
        return
    path = shutil.which(worker) or worker
    if _same_interpreter(path) or path in _probed:
        return
    why = _probe(path)
    if why is None:
        _probed.add(path)
        return
    if explicit:
        raise WorkerEnvironmentError(
            f"PYSPARK_PYTHON={worker} cannot import streamstate ({why}); Spark's Python "
            f"workers run that interpreter. Install streamstate into it "
            f"(`{path} -m pip install streamstate`), or point PYSPARK_PYTHON at this "
            f"interpreter ({sys.executable}) or unset it."
        )
    raise WorkerEnvironmentError(_worker_python_advice(worker, path, why))


def _worker_python_advice(worker: str, path: str, why: str) -> str:
    how = (
        "PYSPARK_PYTHON and spark.pyspark.python were unset when the SparkSession was "
        "created, so PySpark runs `python3` from the PATH"
        if worker == "python3" and not os.environ.get("PYSPARK_PYTHON")
        else f"the SparkSession was created with PYSPARK_PYTHON={worker}"
    )
    return (
        f"the SparkSession's Python workers run {worker} ({path}), which cannot import "
        f"streamstate ({why}): {how}, while this driver runs {sys.executable}. Set "
        f"PYSPARK_PYTHON={sys.executable} before the SparkSession is created (`export "
        f"PYSPARK_PYTHON={sys.executable}` in the shell, or os.environ['PYSPARK_PYTHON'] = "
        f"sys.executable before SparkSession.builder; with spark-submit: --conf "
        f"spark.pyspark.python={sys.executable}), or install streamstate into {path} "
        f"(`{path} -m pip install <streamstate wheel or clone>`). Sessions that streamstate "
        f"creates itself set it for you."
    )


def check_session_python(spark: Any) -> None:
    """A session's Python workers must import streamstate: on a local master the
    interpreter they run (PySpark's ``SparkContext.pythonExec``) is probed once, so a
    user's own session built without ``PYSPARK_PYTHON`` fails here with one paragraph
    saying what to set, before any task fails inside a Java stack trace."""
    sc = spark.sparkContext
    worker = getattr(sc, "pythonExec", None)
    if worker:
        check_worker_python(str(sc.master), str(worker))


def get_or_create_spark(
    configuration: Any = None, app_name: str = "streamstate", default_master: str | None = None
) -> Any:
    """An existing session wins (``spark-submit`` / notebooks); otherwise build one.

    ``spark.master`` and any other ``spark.*`` keys of the job configuration are
    passed to the builder; under ``spark-submit`` the submitted master wins over
    ``default_master`` (default ``local[*]``). The workers run this interpreter
    (``spark.pyspark.python`` and ``PYSPARK_PYTHON`` set to ``sys.executable`` unless
    given). Python workers are reused across tasks (``spark.python.worker.reuse``), which
    is what lets a subtask find its state in memory in the next epoch. Spark's own web UI
    is off (``spark.ui.enabled: false`` unless given: the job's dashboard is
    streamstate's). Unless ``execution.runner.spark.quiet: false``, the driver JVM starts
    quietly (``spark/jvm.py``), Spark's console progress bar is off and its logs at WARN.
    Before a JVM starts: a clear error when there is no Java, or when the workers'
    Python (on a local master) lacks streamstate.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    conf = configuration.to_dict() if configuration is not None else {}
    worker = conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
    worker = worker or sys.executable
    # PySpark's driver reads the environment variable; the key is what Spark shows
    os.environ.setdefault("PYSPARK_PYTHON", worker)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Under spark-submit (or pyspark shell) the JVM already exists with its --master:
    # PYSPARK_GATEWAY_PORT is set, and the master must not be overridden.
    launched = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    quiet = str(conf.get(QUIET_KEY, "true")).strip().lower() != "false"
    master = resolve_master(conf, launched, default_master)
    if not launched:
        check_java()
    check_worker_python(master)
    settings = {
        "spark.app.name": app_name,
        "spark.pyspark.python": worker,
        "spark.python.worker.reuse": "true",
        "spark.ui.enabled": "false",
    }
    if quiet:
        settings["spark.ui.showConsoleProgress"] = "false"
    if master is not None:
        settings["spark.master"] = master
        if master.startswith("local"):
            # a single machine: keep driver and executors on loopback
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings.update({k: str(v) for k, v in conf.items() if k.startswith("spark.")})
    if quiet and not launched:
        from streamstate.spark.jvm import start_quiet_gateway

        start_quiet_gateway(settings)
    builder = SparkSession.builder
    for k, v in settings.items():
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


class IgnoredSparkSettingWarning(UserWarning):
    """A ``spark.*`` setting of a job that the Spark session it runs on did not take."""


#: keys that choose a job's session rather than configure it (``runners.remote_url``)
_SESSION_CHOICE_KEYS = frozenset({"spark.remote"})
#: the settings warned about in this process (each once)
_WARNED_SETTINGS: set[str] = set()


def connect_session(url: str, configuration: Any = None) -> Any:
    """A new Spark Connect session at ``url`` (``sc://host:port``): a session of its own on
    the server (its own session id; the user id is this OS user), with the job's
    ``spark.*`` keys set on it; those the server refuses (static ones, and Spark's core
    settings, which need a SparkContext: ``spark.executor.*``, ``spark.pyspark.*`` ...)
    are named in one :class:`IgnoredSparkSettingWarning`, each once per process.

    Made with the Connect client's own builder, not ``SparkSession.builder.remote``: that
    one refuses to run next to a classic SparkContext in the same process and switches the
    whole process to Connect mode (``SPARK_CONNECT_MODE_ENABLED``)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    conf = configuration.to_dict() if configuration is not None else {}
    session = ConnectSession.builder.remote(url).create()
    settings = {
        k: str(v)
        for k, v in conf.items()
        if k.startswith("spark.") and k not in _SESSION_CHOICE_KEYS
    }
    refused = set_connect_settings(session, settings)
    if refused:
        warn_ignored_settings(refused, url)
    return session


def set_connect_settings(session: Any, settings: dict[str, str]) -> dict[str, str]:
    """Set ``settings`` on the Connect ``session`` one by one (a refused key does not keep
    the others from being set); the refused ones, key -> the server's reason."""
    from pyspark.errors import AnalysisException

    refused: dict[str, str] = {}
    for key, value in settings.items():
        try:
            session.conf.set(key, value)
        except AnalysisException as e:  # the server's answer: not settable in a session
            refused[key] = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return refused


def warn_ignored_settings(refused: dict[str, str], url: str) -> None:
    """One :class:`IgnoredSparkSettingWarning` naming the refused settings not named yet in
    this process, and what to do instead."""
    import warnings

    new = {k: why for k, why in sorted(refused.items()) if k not in _WARNED_SETTINGS}
    if not new:
        return
    _WARNED_SETTINGS.update(new)
    listed = "; ".join(f"{k} ({why})" for k, why in new.items())
    warnings.warn(
        f"the Spark Connect session at {url} did not take these settings of the job, which "
        f"run without them: {listed}. A Connect session takes only its runtime SQL settings; "
        f"Spark's static and core settings (spark.executor.*, spark.driver.*, "
        f"spark.pyspark.*, spark.sql.warehouse.dir, ...) belong to the server and are set "
        f"when it starts: `streamstate local start --conf KEY=VALUE` (stop the running one "
        f"first), a cluster's own configuration, or run the job on a classic session "
        f"(`streamstate run --master local[*]`)",
        IgnoredSparkSettingWarning,
        stacklevel=3,
    )


_JOB_SESSION = threading.local()


def bind_job_session(spark: Any) -> None:
    """The runner of the job this thread runs says which session it runs on (None: the job
    ended): driver-side Spark work of the job (e.g. ``SparkTableSink``'s commits) uses it."""
    _JOB_SESSION.spark = spark


def job_session() -> Any:
    """The session of the job this thread runs, or None."""
    return getattr(_JOB_SESSION, "spark", None)


def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no RDDs)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def require_classic(spark: Any, what: str) -> Any:
    """``spark``, if it is a classic session; a ConfigurationError naming ``what`` and the
    way out if it is a Spark Connect session (which has no SparkContext and no RDDs)."""
    if spark is not None and is_connect_session(spark):
        raise ConfigurationError(
            f"{what} runs on a classic SparkSession (it uses RDDs), and this is a Spark "
            f"Connect session, which has none: pass a classic session "
            f"(SparkSession.builder.master(...).getOrCreate()); jobs themselves run on "
            f"Spark Connect"
        )
    return spark
