"""Runs an epoch as one Spark job on the DataFrame API alone: works on Spark Connect.

A Spark Connect session (``SparkSession.builder.remote("sc://...")``) has no SparkContext
and no RDD API, so this runner builds each epoch as a DataFrame plan:

* a **source stage** is ``spark.range(p, numPartitions=p).mapInArrow(subtask)``: partition
  ``i`` holds the single row ``i``, and the subtask function runs subtask ``i``;
* a **downstream stage** is the union of its upstream stages' rows for it
  (``filter(dest == stage)``), ``repartition(p, "route")``, ``mapInArrow(subtask)``. Every
  row carries a *route*, an int whose Spark hash lands on its target subtask's partition
  (``routing.py``), so the exchange delivers each record to exactly its subtask; the
  subtask checks that every row it read was meant for it. An exchange with an explicit
  partition count is never coalesced by adaptive execution, and an empty partition still
  runs its ``mapInArrow`` task, so every subtask runs every epoch;
* the rows are Arrow record batches of ``(dest, target, route, payload)``
  (``runtime/arrow_batches.py``); leaf stages emit their acks (and the acks forwarded to
  them) as rows to the driver, and one ``toArrow()`` of the leaves' union runs the epoch.

A stage read by more than one downstream stage is persisted for the epoch (its stateful
tasks run once). Stage specs up to 64 KiB travel inside the plan; larger ones as a file
artifact of the session (``addArtifacts(file=True)``, read with ``SparkFiles``), uploaded
once per job. Subtask hosts work as on the classic runner (a host per subtask on the
executor's machine, found by the Python worker that runs ``mapInArrow``). Not available
here: preferred locations (the DataFrame API has no hook for them; a subtask that lands on
another executor is rebuilt from its lineage). The subtask index is the Spark partition id
(``TaskContext.partitionId()``), which the source stage cross-checks against its row.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import tempfile
import threading
from dataclasses import replace
from functools import partial, reduce
from typing import Any

from streamstate.runtime.arrow_batches import ROUTED_DDL, decode_routed, encode_routed
from streamstate.runtime.executor import EpochRunner
from streamstate.runtime.gc_pause import gc_paused
from streamstate.runtime.graph import ExecutionPlan
from streamstate.runtime.protocol import DRIVER, EpochSpec, SubtaskAck
from streamstate.runtime.queryable.query_host import stop_query_host
from streamstate.runtime.subtask_host import run_hosted, stop_hosts
from streamstate.runtime.task import run_stage_partition
from streamstate.spark.placement import executor_location
from streamstate.spark.routing import route_of
from streamstate.spark.runner import (
    _AT_EXIT,
    _STOPPERS,
    _hosted,
    _hostless,
    join_host_stoppers,
    translate_spark_error,
)

__all__ = ["DataFrameEpochRunner", "is_connect_session"]

log = logging.getLogger("streamstate")

_INLINE_SPEC_BYTES = 64 * 1024


def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no RDDs)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class _FileSpec:
    """A stage spec shipped as a session file artifact; ``value`` reads it in the worker
    (what ``task._spec`` and the subtask host read from a non-bytes spec)."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def value(self) -> bytes:
        from pyspark import SparkFiles

        with open(SparkFiles.get(self.name), "rb") as f:
            return f.read()


def _router(meta: dict[int, tuple[int, int]]) -> Any:
    def route(dest: int, target: int) -> int:
        return 0 if dest == DRIVER else route_of(meta[dest][0], target)

    return route


def _run_subtask(
    blob: Any,
    meta: dict[int, tuple[int, int]],
    spec: EpochSpec,
    hosted: float | None,
    source: bool,
    large_binary: bool,
    batches: Any,
) -> Any:
    """The ``mapInArrow`` function of a stage: runs the subtask of this Spark partition."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None  # always set in a Spark task
    index = context.partitionId()
    if source:
        ids = [i for b in batches for i in b.column(0).to_pylist()]
        if ids != [index]:
            raise RuntimeError(
                f"source partition {index} holds rows {ids}, not its own index: "
                f"spark.range(p, numPartitions=p) did not split as expected"
            )
        items: Any = ()
    else:
        items = decode_routed(batches, index)
    executor = executor_location()
    if hosted is not None:
        outputs = run_hosted(blob, meta, spec, index, items, hosted, executor)
    else:
        with gc_paused():  # the whole epoch here, not as Spark pulls it (runtime/gc_pause.py)
            outputs = list(run_stage_partition(blob, meta, spec, index, items, executor))
    yield from encode_routed(outputs, _router(meta), large_binary)


def _stop_hosts_batches(job_id: str, batches: Any) -> Any:
    import pyarrow as pa

    for _ in batches:
        pass
    stop_query_host(job_id)  # the machine's query host goes with the subtask hosts
    stopped = stop_hosts(job_id)
    yield pa.RecordBatch.from_arrays([pa.array([len(stopped)], pa.int64())], names=["stopped"])


class DataFrameEpochRunner(EpochRunner):
    """The epoch runner of a Spark Connect session (or any SparkSession): DataFrames only."""

    def __init__(self, spark: Any = None, configuration: Any = None) -> None:
        self.spark = spark
        self.configuration = configuration
        self.blobs: dict[int, Any] = {}
        self._job_id: str | None = None
        self._hosted = _hosted(configuration)
        self._large_binary = False
        self._artifacts: str | None = None

    def describe(self) -> str:
        if self.spark is None:
            return "Spark (DataFrame runner)"
        kind = "Spark Connect" if is_connect_session(self.spark) else "Spark"
        return f"{kind} ({self.spark.conf.get('spark.master', '?')}, DataFrame runner)"

    def start(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None:
        if self.spark is None:
            from streamstate.spark.session import get_or_create_spark

            self.spark = get_or_create_spark(self.configuration)
        self._job_id = job_id
        large = self.spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
        self._large_binary = str(large).strip().lower() == "true"
        for sid, blob in specs.items():
            if len(blob) <= _INLINE_SPEC_BYTES:
                self.blobs[sid] = (job_id, sid, blob)  # inside the plan's function
                continue
            self.blobs[sid] = (job_id, sid, self._upload(job_id, sid, blob))

    def _upload(self, job_id: str, sid: int, blob: bytes) -> _FileSpec:
        """Ship a large spec once per job as a file artifact of the session."""
        if self._artifacts is None:
            self._artifacts = tempfile.mkdtemp(prefix="streamstate-specs-")
        name = f"streamstate-{job_id}-{sid}.spec"
        path = os.path.join(self._artifacts, name)
        with open(path, "wb") as f:
            f.write(blob)
        if hasattr(self.spark, "addArtifacts"):
            self.spark.addArtifacts(path, file=True)
        else:  # a classic session: the SparkContext ships files the same way
            self.spark.sparkContext.addFile(path)
        return _FileSpec(name)

    def run_epoch(self, plan: ExecutionPlan, epoch_specs: dict[int, EpochSpec]) -> list[SubtaskAck]:
        from pyspark import StorageLevel

        spark = self.spark
        meta = {s.id: (s.parallelism, s.max_parallelism) for s in plan.stages}
        frames: dict[int, Any] = {}
        persisted = []
        for st in plan.stages:
            spec = epoch_specs[st.id]
            if st.is_source:
                base = spark.range(st.parallelism, numPartitions=st.parallelism)
                hosted = None if _hostless(st) else self._hosted
            else:
                # SQL text, not pyspark.sql.functions: those build classic or Connect columns
                # by the process's mode, not by the session's
                ups = [frames[u].filter(f"dest = {st.id}") for u in st.upstream]
                base = reduce(lambda a, b: a.unionAll(b), ups).repartition(
                    st.parallelism, "route"
                )
                hosted = self._hosted
            fn = partial(
                _run_subtask,
                self.blobs[st.id],
                meta,
                spec,
                hosted,
                st.is_source,
                self._large_binary,
            )
            out = base.mapInArrow(fn, ROUTED_DDL)
            if len(st.downstream) > 1:
                out = out.persist(StorageLevel.MEMORY_AND_DISK)
                persisted.append(out)
            frames[st.id] = out
        leaves = [frames[s.id].select("payload") for s in plan.leaves]
        final = reduce(lambda a, b: a.unionAll(b), leaves)
        try:
            table = final.toArrow()
        except Exception as e:  # noqa: BLE001
            raise translate_spark_error(e) from None
        finally:
            for frame in persisted:
                frame.unpersist()
        # each row is a pickled (ACK, pickled SubtaskAck) payload (task._emit)
        acks = [pickle.loads(pickle.loads(b)[1]) for b in table.column("payload").to_pylist()]
        hostless = {s.id for s in plan.stages if _hostless(s)}
        if hostless:  # nothing to find in place: not counted as hits or misses
            acks = [replace(a, cache_hit=None) if a.stage in hostless else a for a in acks]
        return acks

    def stop(self) -> None:
        if self._hosted is not None and self._job_id is not None and self.spark is not None:
            # best effort, off the job's critical path (as the classic runner's stop)
            t = threading.Thread(
                target=_stop_hosts_job,
                args=(self.spark, self._job_id),
                name=f"streamstate-stop-hosts-{self._job_id}",
                daemon=True,
            )
            if not _AT_EXIT:
                _AT_EXIT.append(atexit.register(join_host_stoppers, 10.0))
            t.start()
            _STOPPERS.append(t)
        self._job_id = None


def _stop_hosts_job(spark: Any, job_id: str) -> None:
    try:
        n = 2
        with_conf = spark.conf.get("spark.default.parallelism", None)
        if with_conf:
            n = max(n, int(with_conf))
        spark.range(n, numPartitions=n).mapInArrow(
            partial(_stop_hosts_batches, job_id), "stopped long"
        ).collect()
    except Exception as e:  # noqa: BLE001 - the job is over; hosts also time out
        log.debug("stopping the subtask hosts failed: %s", e)
