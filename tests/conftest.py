"""Shared fixtures: one session-scoped ``local[2]`` SparkSession for integration tests; a
throwaway PostgreSQL server per test module (``pg``)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# jobs started by tests register in a private job registry, not the user's ~/.streamstate
# (removed when the test process ends)
if "STREAMSTATE_HOME" not in os.environ:
    os.environ["STREAMSTATE_HOME"] = _HOME = tempfile.mkdtemp(prefix="streamstate-home-")
    atexit.register(shutil.rmtree, _HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def spark():
    # Spark's Python workers must import the test modules that define the jobs' functions
    # (cloudpickle pickles importable classes by reference).
    paths = [ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # tests stay on loopback
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("streamstate-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def pg():
    """The URL of a throwaway PostgreSQL server for this test module (tests/support/postgres.py)."""
    from tests.support.postgres import postgres_server

    with postgres_server() as url:
        yield url
