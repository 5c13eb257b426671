"""Runs a job on one Spark barrier stage of co-scheduled tasks (``execution.runner: barrier``).

The whole job is ONE Spark job: ``parallelize(range(n), n).barrier().mapPartitions(task)``
with ``n`` the plan's largest parallelism, submitted from a thread of the driver when the
first epoch starts. Task ``i`` runs subtask ``i`` of every stage for the job's life
(``runtime/cosched/``); the driver's :class:`TaskCoordinator` hands each epoch's specs to
the tasks and gathers their acks, so an epoch costs no Spark job, no task launch and no
Spark shuffle. The epochs themselves (the worker step, checkpoints, acks, the driver's
loop) are those of every runner.

A failed task fails the launch: the runner cancels the Spark job, and the epoch's error
goes to the restart strategy, whose restart (a new attempt) launches all tasks again from
the last completed checkpoint: Flink's full-restart failover. A rescale relaunches at the
new parallelism. While the job runs its ``n`` tasks hold ``n`` task slots of the
application: Spark refuses a barrier stage that needs more slots than the cluster has,
and refuses barrier stages under dynamic allocation. Limitations: docs/limitations.md.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import re
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

from streamstate.common.configuration import parse_duration_ms
from streamstate.errors import ConfigurationError, StreamStateError, TaskSlotsError
from streamstate.runtime.cosched.coordinator import RemoteTaskError, TaskCoordinator
from streamstate.runtime.cosched.links import StageShape
from streamstate.runtime.epoch_runner import EpochRunner
from streamstate.runtime.graph import ExecutionPlan
from streamstate.runtime.protocol import EpochSpec, SubtaskAck
from streamstate.spark.barrier_sides import SparkSide, session_conf, side_for
from streamstate.spark.runner import _AT_EXIT, _STOPPERS, join_host_stoppers, translate_spark_error

__all__ = ["BarrierEpochRunner", "task_slots"]

log = logging.getLogger("streamstate")

#: how long the tasks of a launch may take to start and connect, by default (s)
DEFAULT_START_TIMEOUT_S = 120.0
#: how long stopping waits for the tasks to clean up and the Spark job to end (s)
_STOP_TIMEOUT_S = 30.0


@dataclass
class _Launch:
    """One Spark job of co-scheduled tasks: its coordinator and the thread waiting on it."""

    coordinator: TaskCoordinator
    #: the job's attempt it runs (None: submitted by ``prepare``, the first attempt's)
    attempt: int | None
    shape: tuple[tuple[int, int], ...]
    #: its Spark job group (what cancels it, and only it)
    group: str
    thread: threading.Thread | None = None
    #: every task connected and got the launch
    ready: bool = False
    #: the Spark job's exception, once it ended with one
    error: list[BaseException] = field(default_factory=list)

    def failed(self) -> BaseException | None:
        if self.error:
            return self.error[0]
        if self.thread is not None and not self.thread.is_alive():
            return StreamStateError("the co-scheduled tasks' Spark job ended unexpectedly")
        return None

    def finish(self, timeout: float) -> None:
        """Ask the tasks to end (each drops what its process kept of the job), then wait
        for the Spark job to end: off the driver loop, like the RDD runner's host stopper."""
        self.coordinator.stop(timeout)
        self.coordinator.close()
        if self.thread is not None:
            self.thread.join(timeout)


def _submit(side: SparkSide, launch: _Launch, tasks: int, secret: str) -> None:
    """The launch's Spark job (on its own thread: it runs as long as the job does)."""
    try:
        side.run_tasks(launch.group, tasks, launch.coordinator.address, secret)
    except BaseException as e:  # noqa: BLE001 - the driver loop raises it from its wait
        launch.error.append(e)


def task_slots(master: str, cpus: int | None = None) -> int | None:
    """The task slots of a local master (``local``, ``local[N]``, ``local[*]``,
    ``local[N,F]``, ``local-cluster[W,C,M]``), or None when the cluster manager knows."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if m is not None:
        n = m.group(1)
        if n is None:
            return 1
        return (cpus or os.cpu_count() or 1) if n == "*" else int(n)
    m = re.fullmatch(r"local-cluster\[(\d+),\s*(\d+),\s*\d+\]", master.strip())
    return int(m.group(1)) * int(m.group(2)) if m is not None else None


def _start_timeout(configuration: Any) -> float:
    raw = (
        configuration.get_string("execution.runner.barrier.start-timeout", None)
        if configuration is not None
        else None
    )
    return DEFAULT_START_TIMEOUT_S if raw is None else parse_duration_ms(raw) / 1000.0


def _translate(e: BaseException) -> BaseException:
    """A task's or the Spark job's failure as the error the worker raised."""
    if isinstance(e, RemoteTaskError):
        return translate_spark_error(RuntimeError(e.remote_traceback))
    if isinstance(e, StreamStateError):
        return e
    text = str(e)
    if "more slots than" in text or "BARRIER_SLOTS" in text.upper():
        return ConfigurationError(
            "execution.runner: barrier needs a task slot for every co-scheduled task at once "
            "(the plan's largest parallelism), and the Spark application has fewer: lower "
            "the parallelism, or give the application more executors or cores "
            f"(Spark: {text.strip().splitlines()[0] if text.strip() else type(e).__name__})"
        )
    if "dynamic resource allocation" in text:
        return _dynamic_allocation_error()
    return translate_spark_error(e)


def _dynamic_allocation_error() -> ConfigurationError:
    return ConfigurationError(
        "execution.runner: barrier runs on a barrier stage, which Spark refuses under dynamic "
        "allocation: set spark.dynamicAllocation.enabled=false for this application, or use "
        "execution.runner: rdd"
    )


class BarrierEpochRunner(EpochRunner):
    def __init__(self, spark: Any = None, configuration: Any = None) -> None:
        self.spark = spark
        self.configuration = configuration
        self._job_id: str | None = None
        self._specs: dict[int, bytes] = {}
        self._launch: _Launch | None = None
        self._start_timeout = _start_timeout(configuration)
        #: the session's side, once it was made ready for the job
        self._side: SparkSide | None = None
        #: the Spark jobs the driver runs while the job runs (prepare), in words
        self._driver_spark_jobs: tuple[str, ...] = ()
        #: launches so far (names their Spark job groups apart)
        self._launches = 0

    def describe(self) -> str:
        where = self._side.master() if self._side is not None else "Spark"
        return f"Spark barrier stage ({where})"

    def _open_session(self) -> None:
        if self._side is not None:
            return
        self._side = side_for(self.spark)
        self._side.open(self.configuration)
        self.spark = self._side.spark
        dynamic = session_conf(self.spark, "spark.dynamicAllocation.enabled", "false")
        if (dynamic or "").lower() == "true":
            raise _dynamic_allocation_error()

    def prepare(
        self, job_id: str, plan: ExecutionPlan, driver_spark_jobs: tuple[str, ...] = ()
    ) -> None:
        """Submit the Spark job of the tasks now: they start and connect while the driver
        restores the job and pickles its specs (the launch waits for them at the first
        epoch)."""
        self._open_session()
        self._job_id = job_id
        self._driver_spark_jobs = driver_spark_jobs
        self._launch = self._submit_launch(plan, None)

    def start(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None:
        self._open_session()
        self._job_id = job_id
        self._specs = dict(specs)

    def restage(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None:
        """The plan was rescaled: the next epoch launches the tasks at its parallelism."""
        self._end_launch()
        self._job_id = job_id
        self._specs = dict(specs)

    def run_epoch(self, plan: ExecutionPlan, epoch_specs: dict[int, EpochSpec]) -> list[SubtaskAck]:
        attempt = next(iter(epoch_specs.values())).attempt
        shape = tuple((s.id, s.parallelism) for s in plan.stages)
        launch = self._launch
        try:
            if launch is not None and launch.attempt is None and launch.shape == shape:
                launch.attempt = attempt  # prepare's launch: the job's first attempt
            if launch is None or launch.attempt != attempt or launch.shape != shape:
                self._end_launch()
                launch = self._launch = self._submit_launch(plan, attempt)
            if not launch.ready:
                self._await_launch(launch, plan)
            blobs = launch.coordinator.run_epoch(epoch_specs, launch.failed)
        except KeyboardInterrupt:
            self._end_launch()
            raise
        except Exception as e:  # noqa: BLE001 - every failure ends the launch, as the worker's error
            self._end_launch()
            raise _translate(e) from None
        return [pickle.loads(b) for b in blobs]

    def _submit_launch(self, plan: ExecutionPlan, attempt: int | None) -> _Launch:
        """Check that the plan's tasks can run at once here, then submit their Spark job."""
        side = self._side
        assert side is not None, "a launch before the session was opened"
        master = side.master()
        bind, advertised = side.coordinator_hosts()
        tasks = max(s.parallelism for s in plan.stages)
        slots = task_slots(master)
        if self._driver_spark_jobs and slots is not None and tasks >= slots:
            # such a Spark job of the driver's would wait for a slot the co-scheduled
            # tasks hold for the job's life
            raise TaskSlotsError(
                f"{'; '.join(self._driver_spark_jobs)} on the driver, and with "
                f"execution.runner: barrier the job's {tasks} co-scheduled tasks hold all "
                f"{slots} task slots of {master}: lower the parallelism below {slots}, "
                f"or use execution.runner: rdd"
            )
        if slots is not None and tasks > slots:
            # Spark would retry its own slot check for minutes before failing the job
            raise TaskSlotsError(
                f"execution.runner: barrier needs a task slot for each of the job's {tasks} "
                f"co-scheduled tasks at once (its largest parallelism), and {master} has "
                f"{slots}: lower the parallelism to {slots}, or run on more cores"
            )
        secret = secrets.token_hex(32)  # this launch's: tasks of an older one cannot join
        self._launches += 1
        launch = _Launch(
            TaskCoordinator(bind, advertised, tasks, secret),
            attempt,
            tuple((s.id, s.parallelism) for s in plan.stages),
            f"streamstate-{self._job_id}-{self._launches}",
        )
        launch.thread = threading.Thread(
            target=_submit,
            args=(side, launch, tasks, secret),
            name=f"streamstate-barrier-{self._job_id}",
            daemon=True,
        )
        launch.thread.start()
        return launch

    def _await_launch(self, launch: _Launch, plan: ExecutionPlan) -> None:
        """Wait for every task of ``launch``, then send them the launch (the specs)."""
        launch.coordinator.await_tasks(launch.failed, self._start_timeout)
        blobs = {sid: (self._job_id, sid, blob) for sid, blob in self._specs.items()}
        meta = {s.id: (s.parallelism, s.max_parallelism) for s in plan.stages}
        shapes = [
            StageShape(s.id, s.parallelism, tuple(s.upstream), tuple(s.downstream))
            for s in plan.stages
        ]
        launch.coordinator.launch(blobs, meta, shapes)
        launch.ready = True
        log.info(
            "job %s: %d co-scheduled tasks running (attempt %s)",
            self._job_id,
            launch.coordinator.tasks,
            launch.attempt,
        )

    def _end_launch(self) -> None:
        """End the launch: a running one that did not fail ends in the background (its
        tasks clean up, its Spark job ends: ``join_host_stoppers`` waits for it); otherwise
        its Spark job is cancelled now (a restart needs its slots)."""
        launch, self._launch = self._launch, None
        if launch is None:
            return
        if launch.ready and launch.failed() is None:
            ender = threading.Thread(
                target=launch.finish,
                args=(_STOP_TIMEOUT_S,),
                name=f"streamstate-barrier-end-{self._job_id}",
                daemon=True,
            )
            if not _AT_EXIT:
                _AT_EXIT.append(atexit.register(join_host_stoppers, _STOP_TIMEOUT_S))
            ender.start()
            _STOPPERS.append(ender)
            return
        try:
            if self._side is not None:
                self._side.cancel(launch.group)
        except Exception as e:  # noqa: BLE001 - the context may be stopping already
            log.debug("cancelling the co-scheduled tasks failed: %s", e)
        launch.coordinator.abort()
        launch.coordinator.close()
        if launch.thread is not None:
            launch.thread.join(_STOP_TIMEOUT_S)

    def interrupt(self) -> None:
        """Cancel the running epoch (a second Ctrl-C): the driver loop's wait raises."""
        launch = self._launch
        if launch is not None:
            launch.coordinator.abort()

    def stop(self) -> None:
        self._end_launch()
        self._job_id = None
        self._specs = {}
        if self._side is not None:
            self._side.close()
        self._side = None
