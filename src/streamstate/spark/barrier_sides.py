"""How the barrier runner reaches Spark: a classic session or a Spark Connect session.

The runner (``barrier_runner.py``) needs the same five things of either: the session made
ready for the job, the master (for its task slots), a configuration value, where its
coordinator listens so that the executors reach it, and one Spark job of ``n``
co-scheduled tasks that it can cancel. A classic session submits
``parallelize(range(n), n).barrier().mapPartitionsWithIndex(task)`` under a job group; a
Spark Connect session (no SparkContext, no RDDs) ``range(n, numPartitions=n)
.mapInArrow(task, barrier=True)`` under a tag, its tasks being the server's Python
workers. The task function is the same: it runs ``runtime/cosched/task_loop.run_task``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Protocol

from streamstate.runtime.cosched.task_loop import run_task
from streamstate.spark.placement import executor_location
from streamstate.spark.python_deps import ConnectFiles, ship_python_dependencies
from streamstate.spark.runner import prepare_job_session, release_job_session
from streamstate.spark.session import bind_job_session, is_connect_session

__all__ = ["SparkSide", "session_conf", "side_for"]


class SparkSide(Protocol):
    """What the barrier runner asks of a session."""

    spark: Any

    def open(self, configuration: Any) -> None:
        """Make the session ready for the job (dependencies shipped, bound to the job)."""

    def close(self) -> None:
        """The job is over: give the session back as it was."""

    def master(self) -> str: ...

    def coordinator_hosts(self) -> tuple[str, str]:
        """``(bind, advertised)``: where the coordinator listens, and the address the
        executors reach it at."""

    def run_tasks(self, group: str, tasks: int, coordinator: str, secret: str) -> None:
        """Run the launch's Spark job of ``tasks`` co-scheduled tasks (blocks until it
        ends; raises what it failed with)."""

    def cancel(self, group: str) -> None: ...


def session_conf(spark: Any, key: str, default: str | None) -> str | None:
    """A configuration value of either kind of session. A classic session's runtime
    configuration holds its SparkContext's at the session's start; read there, a value
    is one call to the JVM (``SparkContext.getConf()`` copies every entry over py4j:
    measured 30 ms a call in a benchmark's session, on the job's critical path)."""
    value = spark.conf.get(key, default)
    return None if value is None else str(value)


def _task(coordinator: str, secret: str, index: int, it: Any) -> Any:
    """A classic Spark task of co-scheduled task ``index`` (runs on an executor)."""
    for _ in it:
        pass  # its input is its index only
    run_task(index, coordinator, secret, executor_location())
    return iter(())


def _arrow_task(coordinator: str, secret: str, batches: Iterator[Any]) -> Iterator[Any]:
    """A Spark Connect task (``mapInArrow``): its one input row is its index."""
    indices = [i for batch in batches for i in batch.column(0).to_pylist()]
    (index,) = indices
    run_task(int(index), coordinator, secret, executor_location())
    return iter(())


class ClassicSide:
    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._resume: Callable[[], None] | None = None

    def open(self, configuration: Any) -> None:
        self.spark, self._resume = prepare_job_session(self.spark, configuration)

    def close(self) -> None:
        release_job_session(self._resume)
        self._resume = None

    def master(self) -> str:
        return str(self.spark.sparkContext.master)

    def coordinator_hosts(self) -> tuple[str, str]:
        advertised = session_conf(self.spark, "spark.driver.host", "127.0.0.1") or "127.0.0.1"
        bind = session_conf(self.spark, "spark.driver.bindAddress", None)
        return bind or advertised, advertised

    def run_tasks(self, group: str, tasks: int, coordinator: str, secret: str) -> None:
        sc = self.spark.sparkContext
        # job groups are per thread (PySpark pins Python threads to JVM threads)
        sc.setJobGroup(group, "streamstate: co-scheduled tasks", interruptOnCancel=True)
        task = partial(_task, coordinator, secret)
        sc.parallelize(range(tasks), tasks).barrier().mapPartitionsWithIndex(task).collect()

    def cancel(self, group: str) -> None:
        self.spark.sparkContext.cancelJobGroup(group)


class ConnectSide:
    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def open(self, configuration: Any) -> None:
        ship_python_dependencies(ConnectFiles(self.spark), configuration)
        bind_job_session(self.spark)

    def close(self) -> None:
        bind_job_session(None)

    def master(self) -> str:
        return str(self.spark.conf.get("spark.master", ""))

    def coordinator_hosts(self) -> tuple[str, str]:
        """This machine's address on the route to the Connect server: its executors run
        where it runs (or reach this machine the way it is reached)."""
        server = str(self.spark.client.host).strip("[]")
        family = socket.AF_INET6 if ":" in server else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((server, 9))  # a datagram socket sends nothing: the route only
            local = str(probe.getsockname()[0])
        return local, local

    def run_tasks(self, group: str, tasks: int, coordinator: str, secret: str) -> None:
        # tags are per thread: this thread's jobs only
        self.spark.addTag(group)
        try:
            self.spark.range(tasks, numPartitions=tasks).mapInArrow(
                partial(_arrow_task, coordinator, secret), "index long", barrier=True
            ).collect()
        finally:
            self.spark.removeTag(group)

    def cancel(self, group: str) -> None:
        self.spark.interruptTag(group)


def side_for(spark: Any) -> SparkSide:
    """The side of ``spark`` (a classic session, or None for one made for the job, or a
    Spark Connect session)."""
    if spark is not None and is_connect_session(spark):
        return ConnectSide(spark)
    return ClassicSide(spark)
