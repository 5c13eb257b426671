"""The driver's end of a launch of co-scheduled tasks: Flink's JobManager for one job.

The runner (``spark/barrier_runner.py``) submits one Spark job of ``tasks`` co-scheduled
tasks and, meanwhile, :meth:`TaskCoordinator.await_tasks` accepts each task's connection
(authenticated with the launch's secret), checks its wire version and learns where its
peers reach it; :meth:`launch` sends every task the addresses, the stage specs and the
plan's shape. Then each epoch is one message to every task and one answer from each
(:meth:`run_epoch`), and :meth:`stop` ends them. A task that fails answers with its
traceback (:class:`RemoteTaskError`); one whose connection closes without an answer
crashed (:class:`~streamstate.errors.TaskFailure` ``WorkerCrashed``). Either way the launch
is over: the runner ends it, and the next epoch (a restart from the last checkpoint)
launches anew.
"""

from __future__ import annotations

import pickle
import queue
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from streamstate.errors import ConfigurationError, TaskChannelError, TaskFailure
from streamstate.runtime.cosched import links
from streamstate.runtime.cosched.links import StageShape
from streamstate.runtime.protocol import EpochSpec

__all__ = ["RemoteTaskError", "TaskCoordinator"]

#: how often a wait looks at whether the Spark job is still running (s)
_POLL_S = 0.2
#: how long a task's failure caused by another's waits for that other's (s)
_CAUSE_WAIT_S = 10.0


class RemoteTaskError(Exception):
    """A task raised: ``traceback`` is its Python traceback (the runner turns it into the
    worker's exception, as it does a Spark task's)."""

    def __init__(self, task: int, remote_traceback: str) -> None:
        super().__init__(remote_traceback)
        self.task = task
        self.remote_traceback = remote_traceback


class TaskCoordinator:
    """Accepts ``tasks`` tasks on ``bind_host`` (they reach it at ``advertised_host``),
    then runs epochs on them."""

    def __init__(self, bind_host: str, advertised_host: str, tasks: int, secret: str) -> None:
        self.tasks = tasks
        self._secret = secret
        self._listener = links.listen(bind_host)
        self.address = links.address_of(self._listener, advertised_host)
        self._links: dict[int, Connection] = {}
        self._addresses: dict[int, str] = {}
        #: (task, its answer, or None when its connection closed)
        self._answers: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        self._aborted = threading.Event()

    def await_tasks(self, failed: Callable[[], BaseException | None], timeout: float) -> None:
        """Accept every task; ``failed()`` is the Spark job's error once it ended (the
        tasks cannot all start: too few slots, for example), which is raised as is."""
        deadline = time.monotonic() + timeout
        self._listener.settimeout(_POLL_S)
        while len(self._links) < self.tasks:
            error = failed()
            if error is not None:
                raise error
            if self._aborted.is_set():
                raise TaskChannelError("the launch of the co-scheduled tasks was cancelled")
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    f"only {len(self._links)} of the job's {self.tasks} co-scheduled tasks "
                    f"started within {timeout:.0f} s: a barrier stage needs {self.tasks} task "
                    f"slots at once (execution.runner: barrier; raise "
                    f"execution.runner.barrier.start-timeout, add executors or lower the "
                    f"parallelism)"
                )
            try:
                conn = links.accept(self._listener, self._secret)
            except TimeoutError:
                continue
            kind, version, index, address, _worker = links.recv(conn)
            if kind != "hello" or version != links.COSCHED_VERSION:
                conn.close()
                raise ConfigurationError(
                    f"a co-scheduled task speaks version {version!r} of the task protocol, "
                    f"the driver {links.COSCHED_VERSION}: the executors run another "
                    f"streamstate than the driver; install the same version on both"
                )
            self._links[index] = conn
            self._addresses[index] = address
        self._listener.close()

    def launch(
        self, blobs: dict[int, Any], meta: dict[int, tuple[int, int]], shapes: list[StageShape]
    ) -> None:
        """Send every task the launch, then listen for their answers."""
        addresses = [self._addresses[i] for i in range(self.tasks)]
        start = pickle.dumps(("start", addresses, blobs, meta, shapes), protocol=5)
        for index, conn in self._links.items():
            conn.send_bytes(start)
            links.start_reader(
                conn, self._answers, index, f"streamstate-coordinator-{index}", pickle.loads
            )

    def run_epoch(
        self, epoch_specs: dict[int, EpochSpec], failed: Callable[[], BaseException | None]
    ) -> list[bytes]:
        """Run one epoch on every task; the leaf stages' acks (pickled)."""
        message = pickle.dumps(("epoch", epoch_specs), protocol=5)
        for conn in self._links.values():
            conn.send_bytes(message)
        pending = set(self._links)
        acks: list[bytes] = []
        while pending:
            answer = self._next_answer(failed)
            index, reply = answer
            if reply is None:
                raise _crashed(index, _spark_error(failed))
            if reply[0] == "failed":
                if reply[2]:  # a peer's channel closed under it: the peer's failure says why
                    raise self._cause(failed) or RemoteTaskError(index, reply[1])
                raise RemoteTaskError(index, reply[1])
            if reply[0] != "done" or index not in pending:
                raise TaskChannelError(f"task {index} answered {reply[0]!r} out of turn")
            acks.extend(reply[1])
            pending.discard(index)
        return acks

    def _cause(self, failed: Callable[[], BaseException | None]) -> BaseException | None:
        """The failure that made another task's channel close, once it arrives (at most a
        few seconds): a task's own error, a crashed task, or the Spark job's error."""
        deadline = time.monotonic() + _CAUSE_WAIT_S
        while time.monotonic() < deadline:
            try:
                index, reply = self._answers.get(timeout=_POLL_S)
            except queue.Empty:
                error = failed()
                if error is not None:
                    return error
                continue
            if reply is None:
                return _crashed(index, _spark_error(failed))
            if reply[0] == "failed" and not reply[2]:
                return RemoteTaskError(index, reply[1])
        return None

    def _next_answer(self, failed: Callable[[], BaseException | None]) -> tuple[int, Any]:
        while True:
            if self._aborted.is_set():
                raise TaskChannelError("the epoch was cancelled")
            try:
                return self._answers.get(timeout=_POLL_S)
            except queue.Empty:
                error = failed()
                if error is not None:
                    raise error from None

    def stop(self, timeout: float) -> None:
        """Ask every task to end (each drops what its process kept of the job) and wait
        for their answers, at most ``timeout`` s."""
        for conn in self._links.values():
            try:
                links.send(conn, ("stop",))
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        pending = set(self._links)
        while pending and time.monotonic() < deadline:
            try:
                index, _reply = self._answers.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            pending.discard(index)

    def abort(self) -> None:
        """Cut a running wait short (from another thread)."""
        self._aborted.set()

    def close(self) -> None:
        self._listener.close()
        for conn in self._links.values():
            try:
                conn.close()
            except OSError:
                pass


def _spark_error(failed: Callable[[], BaseException | None]) -> BaseException | None:
    """The Spark job's error, given a moment to arrive: a task's connection closes
    before Spark reports why its task ended."""
    deadline = time.monotonic() + 5.0
    while (error := failed()) is None and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    return error


def _crashed(index: int, spark_error: BaseException | None) -> BaseException:
    if spark_error is not None:
        return spark_error
    return TaskFailure(
        "WorkerCrashed",
        f"the Python worker running co-scheduled task {index} (subtask {index} of every "
        f"stage) closed its connection without an answer: it died (killed by a signal, "
        f"os._exit, out of memory, or a crash in native code). Check the executor's log "
        f"and memory (spark.executor.memory, spark.python.worker.memory)",
        "",
    )
