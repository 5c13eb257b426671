"""A warm local Spark Connect server: ``streamstate local start|stop|status``.

Starting a job on a new local SparkSession costs seconds of JVM and Python-worker start
before the first epoch. ``streamstate local start`` starts a Spark Connect server from
the pip-installed pyspark (``pyspark/sbin/start-connect-server.sh``; the server's jar,
``spark-connect_2.13``, ships in the wheel's ``jars/``) on loopback, and jobs started
afterwards by this user (``streamstate run``, ``get_execution_environment()`` without a
session) run on it through a Connect session of their own (``runners.remote_url``).

* **State file**: ``$STREAMSTATE_HOME/local-server.json`` (default ``~/.streamstate``,
  owner-only): ``{version, pid, url, port, master, log, python, started_ms}``, written
  atomically once the server answered. A server is *running* when its process is alive
  and its port accepts connections; a stale file is ignored (and removed by ``stop``).
* **Warm workers**: the server's Python workers fork from a daemon that imported
  streamstate's runtime first (``spark.python.daemon.module`` =
  :mod:`streamstate.spark.warm_daemon`), so a task's worker starts with the runtime
  loaded; ``spark.python.worker.reuse`` keeps them between tasks.
* **Isolation**: the server binds 127.0.0.1 only; every job gets a Connect session of its
  own (the server's session id; the user id is the OS user); its state and checkpoints
  live under the job's own id; subtask hosts' sockets are per user (``host_dir``). One
  server per ``STREAMSTATE_HOME``: another user (or home) starts their own, on another
  port (``--port``, default 15002, or the next free one).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from streamstate.errors import ConfigurationError, StreamStateError
from streamstate.runtime.host_owner import Owner, start_time
from streamstate.spark.local_server_watchdog import end_group, group_alive

__all__ = [
    "DEFAULT_PORT",
    "STATE_VERSION",
    "LocalServer",
    "LocalServerError",
    "running_server",
    "server_home",
    "start_server",
    "stop_server",
]

#: 2: ``pid_start`` (the server's start time) added; a version-1 file is read with 0
STATE_VERSION = 2
_READABLE_VERSIONS = (1, 2)
DEFAULT_PORT = 15002
_STATE_FILE = "local-server.json"
_START_TIMEOUT_S = 180.0


class LocalServerError(StreamStateError, RuntimeError):
    """The warm local Spark Connect server could not be started or stopped."""


@dataclass(frozen=True)
class LocalServer:
    """A running warm local server, as its state file says."""

    pid: int
    url: str
    port: int
    master: str
    log: str
    python: str
    started_ms: int
    #: the start time of ``pid`` (clock ticks after boot, as ``host_owner.start_time``):
    #: a live ``pid`` of another start time is a reused pid, not this server; 0 unknown
    pid_start: int = 0
    version: int = STATE_VERSION

    def alive(self) -> bool:
        """Whether the process this file names is still this server's (not a reused pid)."""
        return Owner(self.pid, self.pid_start).alive()


def server_home(home: str | os.PathLike[str] | None = None) -> Path:
    """``home``, else ``$STREAMSTATE_HOME`` (default ``~/.streamstate``), created owner-only."""
    path = Path(home or os.environ.get("STREAMSTATE_HOME") or Path.home() / ".streamstate")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _state_path(home: str | os.PathLike[str] | None = None) -> Path:
    return server_home(home) / _STATE_FILE


def _port_open(port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _read_state(home: str | os.PathLike[str] | None = None) -> LocalServer | None:
    try:
        raw = json.loads(_state_path(home).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("version") not in _READABLE_VERSIONS:
        return None
    raw["version"] = STATE_VERSION
    try:
        return LocalServer(**raw)
    except TypeError:
        return None


def running_server(home: str | os.PathLike[str] | None = None) -> LocalServer | None:
    """The running warm server of ``home`` (default: this ``STREAMSTATE_HOME``), or None."""
    state = _read_state(home)
    if state is None or not state.alive() or not _port_open(state.port):
        return None
    return state


def _free_port(preferred: int) -> int:
    """``preferred`` or the next free port after it; 0: any free port."""
    if preferred == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    for port in range(preferred, preferred + 100):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise LocalServerError(f"no free port in {preferred}..{preferred + 99} on 127.0.0.1")


def _spark_home() -> str:
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    script = os.path.join(home, "sbin", "start-connect-server.sh")
    jars = os.path.join(home, "jars")
    if not os.path.exists(script) or not any(
        j.startswith("spark-connect_") for j in os.listdir(jars)
    ):
        raise LocalServerError(
            f"the pyspark install at {home} has no Spark Connect server "
            f"(sbin/start-connect-server.sh and jars/spark-connect_*.jar): install the "
            f"pyspark wheel from PyPI (pip install 'pyspark[connect]')"
        )
    return home


def start_server(
    port: int = DEFAULT_PORT,
    master: str = "local[*]",
    conf: dict[str, str] | None = None,
    timeout_s: float = _START_TIMEOUT_S,
    home: str | os.PathLike[str] | None = None,
    environment: dict[str, str] | None = None,
    owner_pid: int | None = None,
) -> LocalServer:
    """Start the warm server of ``home`` (or return the running one) and wait until it
    ran a first job. ``port`` 0: any free port; ``environment``: more variables for the
    server and its Python workers (e.g. ``PYTHONPATH``); ``owner_pid``: a watchdog
    process stops the server when that process is gone, however it ended (a test
    session killed by a signal leaves no server behind)."""
    from streamstate.spark.session import check_java

    current = running_server(home)
    if current is not None:
        return current
    if owner_pid is not None and start_time(owner_pid) is None:
        raise LocalServerError(f"owner pid {owner_pid}: no such process")
    check_java()
    home = server_home(home)
    spark_home = _spark_home()
    port = _free_port(port)
    logs = home / "local-server"
    logs.mkdir(mode=0o700, exist_ok=True)
    log_path = logs / "server.log"
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.python.worker.reuse": "true",
        "spark.python.daemon.module": "streamstate.spark.warm_daemon",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "4",
        **(conf or {}),
    }
    cmd = [os.path.join(spark_home, "sbin", "start-connect-server.sh"), "--wait"]
    cmd += ["--master", master]
    for k, v in settings.items():
        cmd += ["--conf", f"{k}={v}"]
    env = dict(os.environ)
    env.update(
        SPARK_HOME=spark_home,
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(logs),
        SPARK_PID_DIR=str(logs),
        SPARK_IDENT_STRING=f"streamstate-{os.getuid()}",
    )
    env.update(environment or {})
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: stop ends the JVM and workers
        )
    server = LocalServer(
        pid=proc.pid,
        url=f"sc://127.0.0.1:{port}",
        port=port,
        master=master,
        log=str(log_path),
        python=sys.executable,
        started_ms=int(time.time() * 1000),
        pid_start=start_time(proc.pid) or 0,
    )
    try:
        if owner_pid is not None:
            _watch(owner_pid, proc.pid)
        _wait_until_serving(proc, server, timeout_s)
    except BaseException:
        _kill_group(proc.pid)
        raise
    _write_state(server, home)
    return server


def _watch(owner_pid: int, group: int) -> subprocess.Popen[bytes]:
    """Start the watchdog (``spark/local_server_watchdog.py``) that ends the server's
    process ``group`` once ``owner_pid`` (as it is now: pid and start time) is gone."""
    started = start_time(owner_pid)
    if started is None:
        raise LocalServerError(f"owner pid {owner_pid}: no such process")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamstate.spark.local_server_watchdog",
            Owner(owner_pid, started).encode(),
            str(group),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not in the owner's group: it outlives a killed owner
    )


def _wait_until_serving(proc: subprocess.Popen[bytes], server: LocalServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not _port_open(server.port, 0.2):
        if proc.poll() is not None:
            raise LocalServerError(
                f"the Spark Connect server exited with code {proc.returncode} before it "
                f"listened on {server.port}; its log: {server.log}\n{_tail(server.log)}"
            )
        if time.monotonic() > deadline:
            raise LocalServerError(
                f"the Spark Connect server did not listen on {server.port} within "
                f"{timeout_s:.0f} s; its log: {server.log}\n{_tail(server.log)}"
            )
        time.sleep(0.2)
    _warm_up(server.url)


def _warm_up(url: str) -> None:
    """One small job through the server: its session, planner and Python workers start
    now instead of in the user's first job."""
    from streamstate.spark.session import connect_session
    from streamstate.spark.warm_daemon import warm_up_job

    session = connect_session(url)
    try:
        warm_up_job(session)
    finally:
        with contextlib.suppress(Exception):
            session.stop()


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _write_state(server: LocalServer, home: str | os.PathLike[str] | None = None) -> None:
    path = _state_path(home)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".local-server-")
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(server), f)
    os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one


def _kill_group(pid: int, grace_s: float = 10.0) -> None:
    """End the server's process group (its id is the server's pid: it was started in a
    session of its own): SIGTERM, SIGKILL what is left after ``grace_s``. The group is
    ended even when its leader (the start script) is gone and the JVM is not; a live pid
    that leads no group is someone else's (the pid was reused) and is left alone."""
    if not group_alive(pid):
        return
    end_group(pid, grace_s)


def stop_server(home: str | os.PathLike[str] | None = None) -> LocalServer | None:
    """Stop the warm server of ``home`` (default: this ``STREAMSTATE_HOME``); returns what
    was stopped (None: none was running; a stale state file is removed)."""
    state = _read_state(home)
    if state is None:
        return None
    stopped = state if state.alive() or group_alive(state.pid) else None
    _kill_group(state.pid)
    with contextlib.suppress(FileNotFoundError):
        _state_path(home).unlink()
    return stopped


def describe(server: LocalServer | None) -> dict[str, Any]:
    """``status``'s answer as a dict (``running``: false when none)."""
    if server is None:
        return {"running": False}
    return {"running": True, **asdict(server)}


def check_port(port: int) -> int:
    """A ``--port`` value: 1..65535, or 0 for any free port."""
    if not 0 <= port <= 65535:
        raise ConfigurationError(f"--port must be in 0..65535 (0: any free port), got {port}")
    return port
