"""The Python worker daemon of the warm local server (``spark.python.daemon.module``).

PySpark's daemon (``pyspark.daemon``) forks one process per Python worker and imports
the worker module *after* the fork, so every new worker pays for ``pyspark.worker`` and
then for streamstate's runtime (~1 s together on a loaded 2-core machine). This daemon
imports both *before* it starts forking: each worker is born with them loaded. Modules
that start threads on import (pyarrow, pandas) stay out: forking a process with threads
is what PySpark's daemon avoids, and so does this one (the worker imports them as usual).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRELOADED", "warm_up_job"]

#: imported by the daemon before it forks workers (none of them starts a thread)
PRELOADED = (
    "pyspark.worker",
    "cloudpickle",
    "streamstate.runtime.task",
    "streamstate.runtime.subtask_host",
    "streamstate.runtime.arrow_batches",
    "streamstate.spark.dataframe_runner",
)


def _preload() -> None:
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)


def _warm_batches(batches: Any) -> Any:
    import pyarrow as pa

    import streamstate.runtime.task  # noqa: F401 - what a job's first task imports

    n = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_arrays([pa.array([n], pa.int64())], names=["n"])


def warm_up_job(session: Any, partitions: int = 2) -> int:
    """A small ``mapInArrow`` job: starts the server's daemon and Python workers."""
    rows = (
        session.range(partitions, numPartitions=partitions)
        .mapInArrow(_warm_batches, "n long")
        .collect()
    )
    return sum(int(r.n) for r in rows)


if __name__ == "__main__":
    _preload()
    from pyspark.daemon import manager

    manager()
