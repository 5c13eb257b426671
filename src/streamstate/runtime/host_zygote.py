"""The subtask-host zygote: one process per machine (and installation) that has the runtime
imported and forks subtask hosts.

Starting a host as a new interpreter costs an interpreter start plus the imports of the
runtime, the checkpoint storage and the backends (a few hundred ms per host and job,
measured on the keyed-count benchmark); forking it from a process that already has them
costs milliseconds. The zygote is started by the first worker that needs a host, listens
on ``<host dir>/zygote-<digest>.sock`` (the digest covers the interpreter, the
streamstate installation and its source files' modification times, so edited code never
runs in a stale zygote) and exits after :data:`ZYGOTE_IDLE_S` without a request. Forked
hosts leave the zygote's session and take the requesting worker's ``sys.path`` (the
job's files). Whenever the zygote cannot be had, the caller starts the host as a new
interpreter instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Client, Connection
from typing import Any

__all__ = ["ZYGOTE_IDLE_S", "fork_host"]

ZYGOTE_IDLE_S = 600.0
#: imported before forking: what every host needs on its first epoch
PREWARM = (
    "streamstate.runtime.task",
    "streamstate.runtime.versions",
    "streamstate.runtime.subtask_host",
    "streamstate.runtime.state.heap.backend",
    "streamstate.runtime.checkpoint.filesystem",
    "streamstate.runtime.checkpoint.memory",
    "fsspec.implementations.local",
    "cloudpickle",
)


def _zygote_path(host_dir: str) -> str:
    import streamstate

    root = os.path.dirname(os.path.abspath(streamstate.__file__))
    h = hashlib.sha256(f"{sys.executable}\0{root}".encode())
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                h.update(str(os.stat(os.path.join(dirpath, f)).st_mtime_ns).encode())
    return os.path.join(host_dir, f"zygote-{h.hexdigest()[:16]}.sock")


def fork_host(host_dir: str, path: str, job_id: str, idle_timeout_s: float) -> int | None:
    """Have this machine's zygote (started if needed) fork the host of ``path``; its pid,
    or ``None`` when no zygote answers (the caller starts the host itself)."""
    zp = _zygote_path(host_dir)
    try:
        conn = _connect(zp)
        with conn:
            conn.send(("fork", path, job_id, idle_timeout_s, list(sys.path)))
            reply = conn.recv()
        return int(reply[1])
    except (OSError, EOFError, ValueError, IndexError):
        return None


def _connect(zp: str) -> Connection:
    try:
        return Client(zp, family="AF_UNIX")
    except OSError:
        pass
    with open(zp + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker starts the zygote, the others wait
        try:
            return Client(zp, family="AF_UNIX")
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(zp)
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
            proc = subprocess.Popen(
                [sys.executable, "-m", "streamstate.runtime.host_zygote", zp],
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                env=env,
            )
            deadline = time.monotonic() + 30
            while True:
                try:
                    return Client(zp, family="AF_UNIX")
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)


def _serve(zp: str) -> None:
    for name in PREWARM:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked hosts are reaped automatically
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(zp)
    os.chmod(zp, 0o600)
    srv.listen(64)
    while True:
        ready, _, _ = select.select([srv], [], [], ZYGOTE_IDLE_S)
        if not ready:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(zp)
            return
        sock, _ = srv.accept()
        conn = Connection(sock.detach())
        try:
            msg = conn.recv()
            if msg[0] == "fork":
                conn.send(("forked", _fork(srv, conn, *msg[1:])))
        except (OSError, EOFError):
            pass
        finally:
            conn.close()


def _fork(srv: Any, conn: Connection, path: str, job_id: str, idle: float, paths: list[str]) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:  # the host: its own session, the worker's import path
        srv.close()
        conn.close()
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sys.path[:] = paths
        from streamstate.runtime.subtask_host import _Host

        _Host(path, job_id, idle).serve()
    finally:
        os._exit(1)


if __name__ == "__main__":
    _serve(sys.argv[1])
