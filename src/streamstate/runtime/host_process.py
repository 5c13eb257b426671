"""The processes subtasks run in on Spark: subtask hosts and the zygote that forks them.

See ``subtask_host.py`` (the worker side) for the design. A **host** serves one
``(job, stage, subtask)``: one epoch at a time, with its own instance cache
(``task._INSTANCES``), until the job's runner stops it or it idled
``idle_timeout_s``. The **zygote** is one process per machine and installation with the
runtime imported (:data:`PREWARM`): forking a host from it costs milliseconds instead of
an interpreter start and the imports (a few hundred ms per host and job on the
keyed-count benchmark). Its socket is ``<host dir>/zygote-<digest>.sock``, the digest
covering the interpreter, the streamstate installation and its source files'
modification times (edited code never runs in a stale zygote); it exits after
:data:`ZYGOTE_IDLE_S` without a request. A forked host leaves the zygote's session,
takes the requesting worker's ``sys.path`` (the job's files) and its stdout/stderr
(passed over the socket).

Run as ``python -m streamstate.runtime.host_process host <socket> <job id> <idle s>`` or
``... zygote <socket>``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import pickle
import select
import signal
import socket
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection, Listener
from multiprocessing.reduction import recv_handle
from typing import Any

from streamstate.runtime.gc_pause import gc_paused
from streamstate.runtime.subtask_host import authkey

__all__ = ["PREWARM", "ZYGOTE_IDLE_S"]

ZYGOTE_IDLE_S = 600.0
#: imported before forking: what every host needs on its first epoch
PREWARM = (
    "streamstate.runtime.task",
    "streamstate.runtime.versions",
    "streamstate.runtime.subtask_host",
    "streamstate.runtime.queryable.query_host",
    "streamstate.runtime.state.heap.backend",
    "streamstate.runtime.checkpoint.filesystem",
    "streamstate.runtime.checkpoint.memory",
    "fsspec.implementations.local",
    "cloudpickle",
    # by name, not as a dependency of the runtime: the job's functions subclass the public
    # API, so unpickling them imports it (measured: ~0.36 s per host's first epoch without
    # bytecode caches, tens of ms with), and a RocksDB job's hosts need the binding
    "streamstate.datastream",
    "streamstate.runtime.state.rocksdb.backend",
)


class _Host:
    def __init__(self, path: str, job_id: str, idle_timeout_s: float) -> None:
        self.path, self.job_id, self.idle_timeout_s = path, job_id, idle_timeout_s
        self.lock = threading.Lock()  # one epoch at a time
        self.last = time.monotonic()

    def serve(self) -> None:
        from streamstate.runtime import task
        from streamstate.runtime.queryable.query_host import ensure_query_host

        # acks of subtasks with keyed state name this machine's query host (started then)
        task.QUERY_HOST[:] = [
            functools.partial(ensure_query_host, idle_timeout_s=self.idle_timeout_s)
        ]
        listener = Listener(self.path, family="AF_UNIX", authkey=authkey(self.job_id))
        os.chmod(self.path, 0o600)
        threading.Thread(target=self._watchdog, daemon=True).start()
        while True:
            try:
                conn = listener.accept()
            except OSError:
                continue  # a client that failed authentication
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _watchdog(self) -> None:
        while True:
            time.sleep(min(1.0, self.idle_timeout_s))
            if time.monotonic() - self.last > self.idle_timeout_s and self.lock.acquire(False):
                if time.monotonic() - self.last > self.idle_timeout_s:
                    self.exit()  # holding the lock: no epoch starts meanwhile
                self.lock.release()

    def exit(self) -> None:
        from streamstate.runtime import task

        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        for inst in list(task._INSTANCES.values()):
            inst.close()  # stops source threads, disposes RocksDB databases
        os._exit(0)

    def _connection(self, conn: Connection) -> None:
        with conn:
            while True:
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    return
                if msg[0] == "stop":
                    with self.lock:
                        with contextlib.suppress(OSError):
                            conn.send(("stopped",))
                        self.exit()
                self._run(conn, *msg[1:])

    def _run(
        self,
        conn: Connection,
        job_id: str,
        stage: int,
        meta: Any,
        es: Any,
        index: int,
        items: Any,
        executor: str | None = None,
    ) -> None:
        from streamstate.runtime import task

        with self.lock:
            try:
                blob: bytes = b""
                if (job_id, stage) not in task._SPECS:
                    conn.send(("spec?",))
                    blob = conn.recv_bytes()
                try:
                    with gc_paused():
                        out = list(
                            task.run_stage_partition(
                                (job_id, stage, blob), meta, es, index, items, executor
                            )
                        )
                    reply: tuple[Any, ...] = ("ok", out)
                except BaseException as e:  # noqa: BLE001 - every failure goes back to the worker
                    reply = ("err", _picklable(e), traceback.format_exc())
                conn.send(reply)
            finally:
                self.last = time.monotonic()


def _picklable(e: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001 - any pickling failure: send the type and message instead
        return RuntimeError(f"{type(e).__module__}.{type(e).__qualname__}: {e}")


def main(argv: list[str]) -> None:
    if argv[0] == "zygote":
        _serve(argv[1])
    else:
        path, job_id, idle = argv[1], argv[2], float(argv[3])
        _Host(path, job_id, idle).serve()


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
                out, err = recv_handle(conn), recv_handle(conn)
                try:
                    conn.send(("forked", _fork(srv, conn, out, err, *msg[1:])))
                finally:
                    os.close(out)
                    os.close(err)
        except (OSError, EOFError):
            pass
        finally:
            conn.close()


def _fork(
    srv: Any,
    conn: Connection,
    out: int,
    err: int,
    path: str,
    job_id: str,
    idle: float,
    paths: list[str],
    kind: str = "subtask",
    bind: str = "",
) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:  # the host: its own session, the worker's import path
        srv.close()
        conn.close()
        os.setsid()
        os.dup2(out, 1)
        os.dup2(err, 2)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sys.path[:] = paths
        if kind == "query":
            from streamstate.runtime.queryable.query_host import serve

            serve(path, job_id, bind, idle)
        else:
            _Host(path, job_id, idle).serve()
    finally:
        os._exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
