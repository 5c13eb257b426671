"""Subtask hosts: a subtask's state and function objects live in one process per executor.

A PySpark Python worker is a short-lived process: Spark hands each task to whichever
worker is free (and with ``spark.python.worker.reuse=false`` starts a new one per task),
so state kept in the worker is found again only by chance. A **subtask host** is a
process of its own, one per ``(job, stage, subtask)`` on an executor, started by the
first worker that runs the subtask there and reached by every later one over a Unix
socket (``<host dir>/<job digest>-<stage>-<subtask>.sock``, :func:`host_dir`: the
application's directory in this user's private runtime directory, with the job id as the
connection's auth key). The worker sends the epoch's
instructions and input; the host runs the stage (``task.run_stage_partition``, with its
own instance cache) and sends the outputs back. So on one executor a subtask's keyed
state, operator state, open RocksDB database and user function objects (a
``SourceFunction``'s thread too) stay put from epoch to epoch, whatever worker Spark
picks: the epoch's token check then always hits.

Correctness never depends on the host: a host that is gone (killed, idle-timed out,
another executor) is started again and rebuilds the subtask from its lineage, as a new
worker always did. A host that dies while running an epoch fails the task with
:class:`SubtaskHostCrashed` (the restart strategy takes over). A host exits when the
job's runner stops it, after ``idle_timeout_s`` without a request, or when its
application ends (``host_owner.py``: hosts and zygotes belong to one application).

Costs: one more copy of the epoch's input and output through the socket (pickled), and
one process per subtask and executor. Pure Python, no pyspark: the host imports only
the runtime.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from multiprocessing.connection import Client, Connection
from multiprocessing.reduction import send_handle
from typing import Any

from streamstate.errors import ConfigurationError, StreamStateError
from streamstate.runtime.host_owner import running, this_owner
from streamstate.runtime.runtime_dir import private_dir, runtime_dir

__all__ = [
    "DEFAULT_IDLE_TIMEOUT_S",
    "PROTOCOL",
    "SubtaskHostCrashed",
    "authkey",
    "child_env",
    "dir_lock",
    "existing_host_dir",
    "fork_host",
    "host_dir",
    "run_hosted",
    "stop_hosts",
    "stop_zygote",
    "worker_context",
]

PROTOCOL = 1
#: the longest host directory whose socket paths fit in AF_UNIX's 107 bytes
_MAX_DIR_CHARS = 107 - len("/zygote-0123456789abcdef.sock")
DEFAULT_IDLE_TIMEOUT_S = 60.0
#: how long a worker waits for a host it started to listen
_START_TIMEOUT_S = 60.0

# worker side: one connection per host, kept across tasks of this worker process
_CONNECTIONS: dict[str, Connection] = {}


class SubtaskHostCrashed(StreamStateError, RuntimeError):
    """The process hosting a subtask died while it ran an epoch (killed, ``os._exit``,
    out of memory, a crash in native code)."""


def host_dir() -> str:
    """The directory of this application's hosts on this machine,
    ``<runtime dir>/app-<owner>/`` (``runtime_dir.py``, ``host_owner.py``): sockets of
    the zygote and the hosts, query hosts' address files. Removed when the owner ends."""
    path = private_dir(f"app-{this_owner().key}")
    if len(path) > _MAX_DIR_CHARS:
        raise ConfigurationError(
            f"the subtask hosts' socket directory {path} is too long for Unix sockets "
            f"({len(path)} characters, at most {_MAX_DIR_CHARS} leave room for the socket "
            f"names): set TMPDIR to a shorter directory"
        )
    return path


def existing_host_dir() -> str | None:
    """:func:`host_dir` when it exists, else None: never created, so a caller that only
    looks in it (stopping hosts, a zygote) does not leave an empty directory behind for an
    owner that never had a host here, which nothing would remove."""
    try:
        path = os.path.join(runtime_dir(create=False), f"app-{this_owner().key}")
    except FileNotFoundError:
        return None
    return path if os.path.isdir(path) else None


def _socket_path(job_id: str, stage: int, index: int) -> str:
    # AF_UNIX paths are short (108 bytes): a digest of the job id keeps them so
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:20]
    return os.path.join(host_dir(), f"{digest}-{stage}-{index}.sock")


def authkey(job_id: str) -> bytes:
    """The auth key of the job's host connections (the socket directory is owner-only)."""
    return hashlib.sha256(f"streamstate-host-{PROTOCOL}:{job_id}".encode()).digest()


# ------------------------------------------------------------------------------- worker side


def run_hosted(
    spec_blob: Any,
    stages_meta: dict[int, tuple[int, int]],
    epoch_spec: Any,
    index: int,
    items: Iterable[Any],
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    executor: str | None = None,
) -> list[Any]:
    """``task.run_stage_partition`` run by the subtask's host (started when needed);
    returns its outputs. The user's exception is re-raised here as itself, with the
    host's traceback as its cause."""
    job_id, stage, blob = spec_blob
    path = _socket_path(job_id, stage, index)
    request = ("run", job_id, stage, stages_meta, epoch_spec, index, list(items), executor)
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
    key = authkey(job_id)
    try:
        conn = Client(path, family="AF_UNIX", authkey=key)
    except OSError:
        conn = _start(path, job_id, key, idle_timeout_s)
    _CONNECTIONS[path] = conn
    return conn


def _start(path: str, job_id: str, key: bytes, idle_timeout_s: float) -> Connection:
    """Connect to the host of ``path``, having the zygote start it when none runs (the
    zygote forks at most one host per path: workers asking at once get the same one)."""
    deadline = time.monotonic() + _START_TIMEOUT_S
    pid = fork_host(path, job_id, idle_timeout_s)
    proc = None
    if pid is None:  # no zygote: the host is a new interpreter
        proc = _spawn_host(path, job_id, idle_timeout_s)
        pid = proc.pid
    while True:
        try:
            return Client(path, family="AF_UNIX", authkey=key)
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SubtaskHostCrashed(
                f"the subtask host {path} did not start within {_START_TIMEOUT_S:.0f} s; its "
                f"errors are in the executor's stderr"
            )
        if not running(pid):  # it exited (an idle timeout just then, a crash): again
            if proc is not None:
                raise SubtaskHostCrashed(
                    f"the subtask host {path} did not start (exit code {proc.poll()}); its "
                    f"errors are in the executor's stderr"
                )
            pid = fork_host(path, job_id, idle_timeout_s)
            if pid is None:
                proc = _spawn_host(path, job_id, idle_timeout_s)
                pid = proc.pid
        time.sleep(0.002)


def _spawn_host(path: str, job_id: str, idle_timeout_s: float) -> subprocess.Popen[bytes]:
    """The host as a new interpreter (when no zygote answers), one per path at a time."""
    with dir_lock(os.path.dirname(path)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a dead host's socket
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamstate.runtime.host_process",
                "host",
                path,
                job_id,
                str(idle_timeout_s),
                this_owner().encode(),
            ],
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives this worker (it ends with the owner)
            close_fds=True,
            env=child_env(),
        )


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    # a new interpreter imports what this worker can (Spark adds the job's files to sys.path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


@contextlib.contextmanager
def dir_lock(directory: str) -> Iterator[None]:
    """An exclusive lock on ``directory`` itself (no lock file to leave behind)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def stop_hosts(job_id: str, _items: Iterable[Any] = ()) -> list[int]:
    """Stop this machine's hosts of ``job_id`` (idempotent; for the runner's last Spark
    job); returns how many were stopped."""
    prefix = hashlib.sha256(job_id.encode()).hexdigest()[:20] + "-"
    stopped = 0
    d = existing_host_dir()
    if d is None:
        return [0]  # no host ever ran for this owner here
    try:
        names = os.listdir(d)
    except FileNotFoundError:  # its owner ended meanwhile: the zygote removed it
        names = []
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".sock")):
            continue
        path = os.path.join(d, name)
        _drop(path)
        try:
            with Client(path, family="AF_UNIX", authkey=authkey(job_id)) as conn:
                conn.send(("stop",))
                with contextlib.suppress(EOFError, OSError):
                    conn.recv()
            stopped += 1
        except OSError:
            pass
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return [stopped]


# ------------------------------------------------------------------------------- zygote client


def _zygote_path(directory: str) -> str:
    import streamstate

    root = os.path.dirname(os.path.abspath(streamstate.__file__))
    h = hashlib.sha256(f"{sys.executable}\0{root}".encode())
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                h.update(str(os.stat(os.path.join(dirpath, f)).st_mtime_ns).encode())
    return os.path.join(directory, f"zygote-{h.hexdigest()[:16]}.sock")


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it (and set it back at once)
    os.umask(mask)
    return mask


def worker_context() -> dict[str, Any]:
    """What a host takes from the worker that starts it: the process state a Python worker
    gets from its executor (import path, environment, working directory, umask, argv)."""
    return {
        "sys_path": list(sys.path),
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "umask": _umask(),
        "argv": list(sys.argv),
    }


def fork_host(
    path: str,
    job_id: str,
    idle_timeout_s: float,
    kind: str = "subtask",
    bind: str = "",
) -> int | None:
    """Have this application's zygote on this machine (started if needed) start the host
    of ``path`` (``kind``: a subtask host, or a ``query`` host listening on ``bind``,
    runtime/queryable/query_host.py) unless it runs one already; its pid, or ``None`` when
    no zygote answers (the caller starts it)."""
    zp = _zygote_path(os.path.dirname(path))
    try:
        conn = _connect(zp)
        with conn:
            request = ("fork", path, job_id, idle_timeout_s, worker_context(), kind, bind)
            conn.send(request)
            # the host writes where this worker writes (a zygote's own stdout may be the
            # pipe of an executor that is gone)
            send_handle(conn, 1, 0)
            send_handle(conn, 2, 0)
            reply = conn.recv()
        return int(reply[1])
    except (OSError, EOFError, ValueError, IndexError):
        return None


def stop_zygote(directory: str | None = None) -> bool:
    """End this application's zygote on this machine and every host it started, as the
    owner's end does (for a process that is its own owner: tests, tools). Whether one
    answered."""
    directory = directory or existing_host_dir()
    if directory is None:
        return False  # no host ever ran for this owner here
    zp = _zygote_path(directory)
    try:
        with Client(zp, family="AF_UNIX") as conn:
            conn.send(("exit",))
            conn.recv()
        return True
    except (OSError, EOFError):
        return False


def _connect(zp: str) -> Connection:
    try:
        return Client(zp, family="AF_UNIX")
    except OSError:
        pass
    with dir_lock(os.path.dirname(zp)):  # one worker starts the zygote, the others wait
        try:
            return Client(zp, family="AF_UNIX")
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(zp)
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "streamstate.runtime.host_process",
                    "zygote",
                    zp,
                    this_owner().encode(),
                ],
                # the zygote never writes; holding this worker's stdout would keep whatever
                # reads it (a pipe, a terminal) open for as long as the zygote lives
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                env=child_env(),
            )
            deadline = time.monotonic() + 30
            while True:
                try:
                    return Client(zp, family="AF_UNIX")
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
