"""Preferred locations: run a subtask on the executor that ran it in the previous epoch.

Spark's state store pins a state partition to the executor that has it loaded by giving
``StateStoreRDD``'s partitions preferred locations. PySpark has no hook for preferred
locations, so the runner builds them from classes Spark already has, through the JVM
gateway (no JVM code of its own):

* an **anchor** RDD, ``SparkContext.makeRDD(Seq((i, Seq(location_i))))``: a
  ``ParallelCollectionRDD`` with one partition per subtask whose partition ``i``
  prefers ``location_i`` (``executor_<host>_<executor id>``, Spark's
  ``ExecutorCacheTaskLocation``: process-local on that executor, node-local on its host);
* a **source stage** reads the anchor (``SerDeUtil.javaToPython``, a narrow step: the
  DAG scheduler walks narrow dependencies to the anchor's locations);
* a **keyed (downstream) stage** zips its shuffled input with the anchor partition by
  partition: ``shuffled.glom().zip(anchor)`` (``ZippedPartitionsRDD2``, whose
  locations are the anchor's: the shuffled side has none before its map stage ran),
  made readable by Python with ``SerDeUtil.pairRDDToPython``. ``glom`` gives each side
  exactly one element per partition, as ``zip`` requires; the Python side unpacks the
  shuffled chunks (:func:`located_items`).

``spark.locality.wait`` (default 3 s) then decides how long a task waits for its
executor before it runs elsewhere; a subtask that runs elsewhere is rebuilt there from
its lineage, as before (correctness never depends on placement).

The executor a task runs in is read by the Python worker from its executor's command
line (``--executor-id``, ``--hostname`` of ``CoarseGrainedExecutorBackend`` and its YARN
and Kubernetes variants, found among the worker's ancestor processes in ``/proc``), with
``SPARK_EXECUTOR_ID`` as a fallback; in local mode there is none (one executor: nothing
to place), and the runner keeps Spark's plain plan.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["executor_location", "located_input", "located_items", "located_source"]

_UNKNOWN = object()
_LOCATION: list[Any] = [_UNKNOWN]


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _arguments(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0")]
    except OSError:
        return []


def _flag(args: list[str], name: str) -> str | None:
    try:
        return args[args.index(name) + 1] or None
    except (ValueError, IndexError):
        return None


def executor_location() -> str | None:
    """This Python worker's executor as a Spark task location (``executor_<host>_<id>``),
    or ``None`` when it is not known (local mode, no ``/proc``). Cached per process."""
    if _LOCATION[0] is not _UNKNOWN:
        return _LOCATION[0]  # type: ignore[no-any-return]  # the cached str or None
    found: str | None = None
    pid: int | None = os.getpid()
    for _ in range(8):  # worker -> pyspark.daemon -> executor JVM (-> launcher)
        if pid is None or pid <= 1:
            break
        args = _arguments(pid)
        ident = _flag(args, "--executor-id")
        if ident is not None:
            host = _flag(args, "--hostname") or socket.gethostname()
            found = f"executor_{host}_{ident}"
            break
        pid = _parent(pid)
    if found is None and os.environ.get("SPARK_EXECUTOR_ID"):
        found = f"executor_{socket.gethostname()}_{os.environ['SPARK_EXECUTOR_ID']}"
    _LOCATION[0] = found
    return found


def _anchor(sc: Any, locations: list[str | None]) -> Any:
    """The JavaRDD of ``makeRDD``: partition ``i`` holds ``i`` and prefers ``locations[i]``."""
    jvm = sc._jvm
    to_seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq
    items = jvm.java.util.ArrayList()
    for i, loc in enumerate(locations):
        prefs = jvm.java.util.ArrayList()
        if loc:
            prefs.add(loc)
        items.add(jvm.scala.Tuple2(i, to_seq(prefs)))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Object().getClass())
    return sc._jsc.sc().makeRDD(to_seq(items), tag).toJavaRDD()


def located_source(sc: Any, locations: list[str | None]) -> Any:
    """A Python RDD of ``len(locations)`` partitions (partition ``i`` holds ``i``) whose
    tasks prefer ``locations``: the base of a source stage."""
    from pyspark.rdd import RDD

    return RDD(
        sc._jvm.org.apache.spark.api.python.SerDeUtil.javaToPython(_anchor(sc, locations)), sc
    )


def located_input(sc: Any, shuffled: Any, locations: list[str | None]) -> Any:
    """``shuffled`` (a Python RDD out of ``partitionBy``, one partition per subtask) with
    the tasks of partition ``i`` preferring ``locations[i]``; read it with
    :func:`located_items`."""
    from pyspark.rdd import RDD

    zipped = shuffled._jrdd.glom().zip(_anchor(sc, locations))
    # one (chunks, i) pair per partition, pickled by Spark's Pyrolite
    jrdd = sc._jvm.org.apache.spark.api.python.SerDeUtil.pairRDDToPython(zipped.rdd(), 1)
    return RDD(jrdd.toJavaRDD(), sc)


def located_items(loads: Any, it: Iterable[Any]) -> Iterator[Any]:
    """The shuffled records of one partition of :func:`located_input`; ``loads`` reads a
    shuffle batch (the context's unbatched serializer's, a pickled list)."""
    for chunks, _ in it:
        for chunk in chunks:
            yield from loads(bytes(chunk))
