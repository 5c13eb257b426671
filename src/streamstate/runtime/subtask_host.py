"""Subtask hosts: a subtask's state and function objects live in one process per executor.

A PySpark Python worker is a short-lived process: Spark hands each task to whichever
worker is free (and with ``spark.python.worker.reuse=false`` starts a new one per task),
so state kept in the worker is found again only by chance. A **subtask host** is a
process of its own, one per ``(job, stage, subtask)`` on an executor, started by the
first worker that runs the subtask there and reached by every later one over a Unix
socket (``<tmp>/streamstate-hosts-<uid>/<job>-<stage>-<subtask>.sock``, in an owner-only
directory, with the job id as the connection's auth key). The worker sends the epoch's
instructions and input; the host runs the stage (``task.run_stage_partition``, with its
own instance cache) and sends the outputs back. So on one executor a subtask's keyed
state, operator state, open RocksDB database and user function objects (a
``SourceFunction``'s thread too) stay put from epoch to epoch, whatever worker Spark
picks: the epoch's token check then always hits.

Correctness never depends on the host: a host that is gone (killed, idle-timed out,
another executor) is started again and rebuilds the subtask from its lineage, as a new
worker always did. A host that dies while running an epoch fails the task with
:class:`SubtaskHostCrashed` (the restart strategy takes over). A host exits when the
job's runner stops it, or after ``idle_timeout_s`` without a request.

Costs: one more copy of the epoch's input and output through the socket (pickled), and
one process per subtask and executor. Pure Python, no pyspark: the host imports only
the runtime.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterable
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from streamstate.errors import StreamStateError

__all__ = [
    "DEFAULT_IDLE_TIMEOUT_S",
    "SubtaskHostCrashed",
    "host_dir",
    "run_hosted",
    "stop_hosts",
]

PROTOCOL = 1
DEFAULT_IDLE_TIMEOUT_S = 60.0
#: how long a worker waits for a host it started to listen
_START_TIMEOUT_S = 60.0

# worker side: one connection per host, kept across tasks of this worker process
_CONNECTIONS: dict[str, Connection] = {}


class SubtaskHostCrashed(StreamStateError, RuntimeError):
    """The process hosting a subtask died while it ran an epoch (killed, ``os._exit``,
    out of memory, a crash in native code)."""


def host_dir() -> str:
    """The owner-only directory of this user's host sockets on this machine."""
    d = os.path.join(tempfile.gettempdir(), f"streamstate-hosts-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def _socket_path(job_id: str, stage: int, index: int) -> str:
    # AF_UNIX paths are short (108 bytes): a digest of the job id keeps them so
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:20]
    return os.path.join(host_dir(), f"{digest}-{stage}-{index}.sock")


def _authkey(job_id: str) -> bytes:
    return hashlib.sha256(f"streamstate-host-{PROTOCOL}:{job_id}".encode()).digest()


# ------------------------------------------------------------------------------- worker side


def run_hosted(
    spec_blob: Any,
    stages_meta: dict[int, tuple[int, int]],
    epoch_spec: Any,
    index: int,
    items: Iterable[Any],
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
) -> list[Any]:
    """``task.run_stage_partition`` run by the subtask's host (started when needed);
    returns its outputs. The user's exception is re-raised here as itself, with the
    host's traceback as its cause."""
    job_id, stage, blob = spec_blob
    path = _socket_path(job_id, stage, index)
    request = ("run", job_id, stage, stages_meta, epoch_spec, index, list(items))
    for attempt in range(2):
        conn = _connection(path, job_id, idle_timeout_s)
        try:
            conn.send(request)
        except OSError:
            _drop(path)  # a host that went away since the last task: start it again
            if attempt:
                raise
            continue
        try:
            reply = conn.recv()
            if reply[0] == "spec?":
                conn.send_bytes(blob if isinstance(blob, (bytes, bytearray)) else blob.value)
                reply = conn.recv()
        except (EOFError, OSError) as e:
            _drop(path)
            raise SubtaskHostCrashed(
                f"the process hosting subtask {index} of stage {stage} died without raising "
                f"an exception while it ran epoch {epoch_spec.epoch} (killed by a signal, "
                f"os._exit, out of memory, or a crash in native code). Check the executor's "
                f"log and memory (spark.executor.memory)"
            ) from e
        break
    if reply[0] == "ok":
        return reply[1]  # type: ignore[no-any-return]  # the host's list of outputs
    _, exc, tb = reply
    # the user's frames are in the host: their traceback goes last, where Spark's error
    # translation (spark/runner.translate_spark_error) reads the exception from
    exc.add_note(f"subtask host traceback:\n{tb}")
    raise exc


def _drop(path: str) -> None:
    conn = _CONNECTIONS.pop(path, None)
    if conn is not None:
        with contextlib.suppress(OSError):
            conn.close()


def _connection(path: str, job_id: str, idle_timeout_s: float) -> Connection:
    conn = _CONNECTIONS.get(path)
    if conn is not None:
        return conn
    key = _authkey(job_id)
    try:
        conn = Client(path, family="AF_UNIX", authkey=key)
    except OSError:
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one worker starts the host, the others wait
            try:
                conn = Client(path, family="AF_UNIX", authkey=key)
            except OSError:
                conn = _start(path, job_id, key, idle_timeout_s)
    _CONNECTIONS[path] = conn
    return conn


def _start(path: str, job_id: str, key: bytes, idle_timeout_s: float) -> Connection:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a dead host's socket
    from streamstate.runtime.host_zygote import fork_host

    pid = fork_host(host_dir(), path, job_id, idle_timeout_s)
    if pid is not None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                return Client(path, family="AF_UNIX", authkey=key)
            except OSError:
                if not _alive(pid) or time.monotonic() > deadline:
                    break  # start it as a new interpreter below
                time.sleep(0.002)
    env = dict(os.environ)
    # the host imports what this worker can (Spark adds the job's files to sys.path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamstate.runtime.subtask_host",
            path,
            job_id,
            str(idle_timeout_s),
        ],
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # outlives this worker
        close_fds=True,
        env=env,
    )
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        try:
            return Client(path, family="AF_UNIX", authkey=key)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SubtaskHostCrashed(
                    f"the subtask host {path} did not start (exit code {proc.poll()}); its "
                    f"errors are in the executor's stderr"
                ) from None
            time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_hosts(job_id: str, _items: Iterable[Any] = ()) -> list[int]:
    """Stop this machine's hosts of ``job_id`` (idempotent; for the runner's last Spark
    job); returns how many were stopped."""
    prefix = hashlib.sha256(job_id.encode()).hexdigest()[:20] + "-"
    stopped = 0
    d = host_dir()
    for name in os.listdir(d):
        if not (name.startswith(prefix) and name.endswith(".sock")):
            continue
        path = os.path.join(d, name)
        _drop(path)
        try:
            with Client(path, family="AF_UNIX", authkey=_authkey(job_id)) as conn:
                conn.send(("stop",))
                with contextlib.suppress(EOFError, OSError):
                    conn.recv()
            stopped += 1
        except OSError:
            pass
        for p in (path, path + ".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
    return [stopped]


# ------------------------------------------------------------------------------- host side


class _Host:
    def __init__(self, path: str, job_id: str, idle_timeout_s: float) -> None:
        self.path, self.job_id, self.idle_timeout_s = path, job_id, idle_timeout_s
        self.lock = threading.Lock()  # one epoch at a time
        self.last = time.monotonic()

    def serve(self) -> None:
        listener = Listener(self.path, family="AF_UNIX", authkey=_authkey(self.job_id))
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
        self, conn: Connection, job_id: str, stage: int, meta: Any, es: Any, index: int, items: Any
    ) -> None:
        from streamstate.runtime import task

        with self.lock:
            try:
                blob: bytes = b""
                if (job_id, stage) not in task._SPECS:
                    conn.send(("spec?",))
                    blob = conn.recv_bytes()
                try:
                    out = list(
                        task.run_stage_partition((job_id, stage, blob), meta, es, index, items)
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
    path, job_id, idle = argv[0], argv[1], float(argv[2])
    _Host(path, job_id, idle).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
