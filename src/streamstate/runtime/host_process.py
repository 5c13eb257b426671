"""The processes subtasks run in on Spark: subtask hosts and the zygote that forks them.

See ``subtask_host.py`` (the worker side) for the design. A **host** serves one
``(job, stage, subtask)``: one epoch at a time, with its own instance cache
(``worker/host.py``), until the job's runner stops it, it idled ``idle_timeout_s``, or
its application ended. The **zygote** is one process per application, machine and
installation with the runtime imported (:data:`PREWARM`): forking a host from it costs
milliseconds instead of an interpreter start and the imports (a few hundred ms per host
and job on the keyed-count benchmark). Its socket is ``<app dir>/zygote-<digest>.sock``,
the digest covering the interpreter, the streamstate installation and its source files'
modification times (edited code never runs in a stale zygote). It forks at most one host
per socket path (workers asking at once get the same host), and a forked host leaves the
zygote's session and takes the requesting worker's process state: umask, environment,
working directory, ``sys.path`` and ``argv`` (:func:`_take`), and its stdout/stderr
(passed over the socket).

**Lifetime.** Everything here belongs to one application (``host_owner.py``): the zygote
and every host watch the application's owner process (a pidfd) and end with it; the
zygote then ends its hosts (SIGTERM, SIGKILL after :data:`SHUTDOWN_WAIT_S` + 5 s) and
removes the application's directory. A zygote without hosts also exits after
:data:`ZYGOTE_IDLE_S` without a request.

Run as ``python -m streamstate.runtime.host_process host <socket> <job id> <idle s>
<owner>`` or ``... zygote <socket> <owner>`` (owner: ``<pid>-<start time>``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import os
import pickle
import select
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
import zipimport
from multiprocessing.connection import Connection, Listener
from multiprocessing.reduction import recv_handle
from typing import Any

from streamstate.runtime import host_owner
from streamstate.runtime.gc_pause import gc_paused
from streamstate.runtime.host_owner import this_owner
from streamstate.runtime.job_end import end_job
from streamstate.runtime.runtime_dir import remove_empty
from streamstate.runtime.spent import release, release_after_reply
from streamstate.runtime.subtask_host import authkey

__all__ = ["PREWARM", "ZYGOTE_IDLE_S"]

ZYGOTE_IDLE_S = 600.0
#: how long a host asked to end (its application ended) waits for a running epoch
SHUTDOWN_WAIT_S = 5.0
#: how long the zygote waits for a connected client's request
_REQUEST_TIMEOUT_S = 5.0
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
        from streamstate.runtime.queryable.process import PROCESS
        from streamstate.runtime.queryable.query_host import ensure_query_host

        # acks of subtasks with queryable state name this machine's query host (started then)
        PROCESS.query_host_starter = functools.partial(
            ensure_query_host, idle_timeout_s=self.idle_timeout_s
        )
        release_after_reply()  # _run releases an epoch's spent input after its reply
        listener = Listener(self.path, family="AF_UNIX", authkey=authkey(self.job_id))
        os.chmod(self.path, 0o600)
        threading.Thread(target=self._watchdog, daemon=True).start()
        owner = this_owner()
        host_owner.watch(owner, host_owner.owner_fd(owner), self.application_ended)
        signal.signal(signal.SIGTERM, lambda *_: self.shutdown())  # the zygote's, at the end
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

    def application_ended(self) -> None:
        """The owner ended: so did the application; what is left of it here goes."""
        shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)
        remove_empty(os.path.dirname(os.path.dirname(self.path)))
        self.shutdown()

    def shutdown(self) -> None:
        """The application ended (or the zygote says so): exit once the running epoch (if
        any) ended, or after SHUTDOWN_WAIT_S anyway; the job ended with it."""
        self.lock.acquire(timeout=SHUTDOWN_WAIT_S)
        self.exit(job_ended=True)

    def exit(self, job_ended: bool = False) -> None:
        """Exit; ``job_ended``: what this process keeps for the job goes too (job_end.py),
        not only what it keeps for the subtask (an idle host's local copies may still serve
        the subtask's rebuild on this machine)."""
        from streamstate.runtime.worker.host import HOST

        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        if job_ended:
            end_job(self.job_id)
        HOST.close_instances()  # stops source threads, disposes RocksDB databases
        os._exit(0)

    def _connection(self, conn: Connection) -> None:
        with conn:
            while True:
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    return
                if msg[0] == "stop":  # the job ended
                    with self.lock:
                        with contextlib.suppress(OSError):
                            conn.send(("stopped",))
                        self.exit(job_ended=True)
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
        from streamstate.runtime.worker.host import HOST

        # The collector stays off until the spent input is freed: turned on while the
        # epoch's objects are alive, its first collection traverses all of them (~0.1 s
        # for a 1M-record epoch), before the reply. After the release it finds few.
        with self.lock, gc_paused():
            try:
                blob: bytes = b""
                if not HOST.has_spec(job_id, stage, meta):
                    conn.send(("spec?",))
                    blob = conn.recv_bytes()
                try:
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
                release()  # the epoch's spent input, freed once the worker has its reply
                self.last = time.monotonic()


def _picklable(e: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001 - any pickling failure: send the type and message instead
        return RuntimeError(f"{type(e).__module__}.{type(e).__qualname__}: {e}")


def main(argv: list[str]) -> None:
    if argv[0] == "zygote":
        host_owner.adopt(host_owner.Owner.decode(argv[2]))
        _Zygote(argv[1]).serve()
    else:
        path, job_id, idle = argv[1], argv[2], float(argv[3])
        host_owner.adopt(host_owner.Owner.decode(argv[4]))
        _Host(path, job_id, idle).serve()


class _Zygote:
    """Forks the hosts of one application on this machine (see the module docstring).

    Single-threaded on purpose: a fork copies only the forking thread, so a lock another
    thread held would stay locked in the host forever."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.directory = os.path.dirname(path)
        self.owner = this_owner()
        #: host path -> pid of the host forked for it (reaped ones removed)
        self.children: dict[str, int] = {}

    def serve(self) -> None:
        for name in PREWARM:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        gc.freeze()  # the hosts' collections skip the runtime imported here (gc_pause.py)
        owner_fd = host_owner.owner_fd(self.owner)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(self.path)
        os.chmod(self.path, 0o600)
        srv.listen(64)
        watched: list[Any] = [srv] if owner_fd is None else [srv, owner_fd]
        last = time.monotonic()
        while True:
            # a second at most: children are reaped, an owner without pidfd is polled
            ready, _, _ = select.select(watched, [], [], 1.0)
            self._reap()
            if (owner_fd is not None and owner_fd in ready) or (
                owner_fd is None and not self.owner.alive()
            ):
                self.end_application()
            if srv not in ready:
                if not self.children and time.monotonic() - last > ZYGOTE_IDLE_S:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.path)
                    remove_empty(self.directory)
                    return
                continue
            last = time.monotonic()
            sock, _ = srv.accept()
            conn = Connection(sock.detach())
            try:
                self._request(srv, conn)
            except (OSError, EOFError):
                pass
            finally:
                conn.close()

    def _request(self, srv: Any, conn: Connection) -> None:
        if not conn.poll(_REQUEST_TIMEOUT_S):
            return  # a client that connected and sent nothing must not hold up the others
        msg = conn.recv()
        if msg[0] == "exit":
            conn.send(("exiting",))
            self.end_application()
        if msg[0] != "fork":
            return
        out, err = recv_handle(conn), recv_handle(conn)
        try:
            path = msg[1]
            pid = self.children.get(path)
            if pid is None or not host_owner.running(pid):
                pid = _fork(srv, conn, out, err, *msg[1:])
                self.children[path] = pid
            conn.send(("forked", pid))
        finally:
            os.close(out)
            os.close(err)

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for path, child in list(self.children.items()):
                if child == pid:
                    del self.children[path]

    def end_application(self) -> None:
        """The owner ended (or a test asked): end every host, remove what is ours, exit."""
        for pid in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)  # hosts close their state (RocksDB directories)
        deadline = time.monotonic() + SHUTDOWN_WAIT_S + 5
        while self.children and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.01)
        for pid in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # stuck in native code: no second chance
        self._reap()
        shutil.rmtree(self.directory, ignore_errors=True)
        remove_empty(os.path.dirname(self.directory))
        os._exit(0)


def _fork(
    srv: Any,
    conn: Connection,
    out: int,
    err: int,
    path: str,
    job_id: str,
    idle: float,
    context: dict[str, Any],
    kind: str = "subtask",
    bind: str = "",
) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:  # the host: its own session, the requesting worker's process state
        srv.close()
        conn.close()
        os.setsid()
        os.dup2(out, 1)
        os.dup2(err, 2)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _take(context)
        if kind == "query":
            from streamstate.runtime.queryable.query_host import serve

            serve(path, job_id, bind, idle)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # a dead host's socket (the zygote knows of no live one)
            _Host(path, job_id, idle).serve()
    finally:
        os._exit(1)


def _take(context: dict[str, Any]) -> None:
    """Become the worker that asked for this host, as far as user code can tell: a host
    forked for one job must not see the umask, environment, working directory or import
    path of whichever worker started the zygote (issue 27: files written with another
    umask; helper modules on the job's PYTHONPATH not found)."""
    os.umask(context["umask"])
    os.environ.clear()
    os.environ.update(context["environ"])
    with contextlib.suppress(OSError):  # a working directory gone since: stay where we are
        os.chdir(context["cwd"])
    sys.path[:] = context["sys_path"]
    sys.argv[:] = context["argv"]
    invalidate_directory_caches()  # directories listed by the zygote may have changed since


def invalidate_directory_caches() -> None:
    """``importlib.invalidate_caches()`` for the import path's directories only.

    A zip archive on the path (PySpark's ``pyspark.zip`` and ``py4j-*.zip`` on every Python
    worker's) does not change while the application runs, and invalidating its importer
    re-reads its whole directory: ~10% of the CPU of a one-epoch job (py-spy, issue 32),
    paid by every host forked. Its importers are set aside while the rest is invalidated."""
    zips = {
        path: finder
        for path, finder in sys.path_importer_cache.items()
        if isinstance(finder, zipimport.zipimporter) and os.path.isabs(path)
    }
    for path in zips:
        del sys.path_importer_cache[path]
    try:
        importlib.invalidate_caches()
    finally:
        sys.path_importer_cache.update(zips)


if __name__ == "__main__":
    main(sys.argv[1:])
