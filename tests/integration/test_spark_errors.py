"""What a failing job raises: the user's exception type, the worker traceback once."""

from __future__ import annotations

import traceback
from typing import Any

import pytest

from streamstate.common import RestartStrategies
from streamstate.errors import JobExecutionError, TaskFailure
from streamstate.testing import FailOnce
from tests.support import envs
from tests.support.runners import on_both_runners

spark = on_both_runners()


class BadRecord(Exception):
    """A user exception class defined in the job's own module."""


def explode_on_7(v: int) -> int:
    if v == 7:
        raise ValueError(f"bad record {v}")
    return v


def user_error_on_7(v: int) -> int:
    if v == 7:
        raise BadRecord("record 7 is not allowed")
    return v


def run(spark: Any, fn: Any) -> None:
    env = envs.make_env(spark=spark, max_records=10)
    env.set_restart_strategy(RestartStrategies.no_restart())
    env.from_collection(list(range(20))).map(fn).key_by(lambda v: v % 2).map(lambda v: v).print()
    env.execute("errors")


def test_the_users_exception_type_is_catchable_with_the_worker_traceback_once(spark):
    with pytest.raises(ValueError, match="bad record 7") as ei:
        run(spark, explode_on_7)
    err = ei.value
    assert isinstance(err, JobExecutionError)
    cause = err.__cause__
    assert type(cause) is ValueError and str(cause) == "bad record 7"
    text = "".join(traceback.format_exception(err))
    assert text.count("worker traceback:") == 1
    assert text.count('raise ValueError(f"bad record {v}")') == 1
    assert "Py4JJavaError" not in text and "PythonException" not in text
    assert len(text.splitlines()) < 80


def test_a_user_exception_class_of_the_job_module_is_rebuilt(spark):
    with pytest.raises(BadRecord, match="record 7 is not allowed") as ei:
        run(spark, user_error_on_7)
    assert isinstance(ei.value, JobExecutionError)


def test_a_killed_worker_names_its_subtask(spark, tmp_path):
    fail = FailOnce(str(tmp_path), epoch=1, subtask=1, mode="exit")
    with pytest.raises(JobExecutionError) as ei:
        run(spark, fail)
    cause = ei.value.__cause__
    assert isinstance(cause, TaskFailure) and cause.error_type == "WorkerCrashed"
    assert "subtask 1" in str(ei.value) and "died without raising" in str(ei.value)


def test_in_process_runner_raises_the_same_shape():
    env = envs.make_env(max_records=10)
    env.set_restart_strategy(RestartStrategies.no_restart())
    env.from_collection(list(range(20))).map(explode_on_7).print()
    with pytest.raises(ValueError, match="bad record 7") as ei:
        env.execute("errors-local")
    assert isinstance(ei.value, JobExecutionError)


_NO_STREAMSTATE_JOB = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.argv[1]
from pyspark.sql import SparkSession
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.errors import JobExecutionError, WorkerEnvironmentError
spark = SparkSession.builder.master("local[1]").getOrCreate()
env = StreamExecutionEnvironment.get_execution_environment(spark=spark)
env.enable_checkpointing(1000)  # the default strategy then restarts a curable failure forever
env.from_collection([1, 2, 3]).key_by(lambda x: x).map(lambda x: x).print()
try:
    env.execute("workers without streamstate")
except WorkerEnvironmentError as e:  # before the first epoch: the workers' Python is probed
    assert not isinstance(e, JobExecutionError)
    print("FAILED FAST:", e)
    sys.exit(3)
"""


def test_workers_without_streamstate_fail_the_job_instead_of_restarting(tmp_path):
    """Executors whose Python cannot import streamstate (here: the interpreter this
    virtualenv was made from, which PySpark can run but which has no streamstate) fail the
    job with WorkerEnvironmentError before its first epoch (a local master's worker Python
    is probed), whatever the restart strategy, naming what to set."""
    import subprocess
    import sys

    base = getattr(sys, "_base_executable", sys.executable)
    probe = subprocess.run([base, "-c", "import streamstate"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{base} has streamstate installed: no interpreter without it here")
    script = tmp_path / "job.py"
    script.write_text(_NO_STREAMSTATE_JOB)
    proc = subprocess.run(
        [sys.executable, str(script), base], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "cannot import streamstate" in proc.stdout
    assert f"Set PYSPARK_PYTHON={sys.executable}" in proc.stdout
    assert "restarting in" not in proc.stderr  # no restart was attempted
