"""Runs an epoch as one Spark job.

Stage ``s`` becomes one RDD per epoch: a source stage is ``parallelize(range(p), p)``
mapped by the subtask function; a downstream stage is the union of its upstream
stages' outputs for it, ``partitionBy`` the target subtask (the key group was
mapped to a subtask by the writer), mapped by the subtask function. Shuffled
elements are pickled chunks of records, not single records. Leaf stages yield
acks; ``collect()`` on their union runs the whole epoch. A stage read by more
than one downstream stage is persisted for the epoch so its (stateful) tasks
run once.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from streamstate.errors import StreamStateError, TaskFailure
from streamstate.runtime.executor import EpochRunner
from streamstate.runtime.graph import ExecutionPlan
from streamstate.runtime.protocol import EpochSpec, SubtaskAck
from streamstate.runtime.task import run_stage_partition

__all__ = ["SparkEpochRunner", "translate_spark_error"]


def _identity(k: int) -> int:
    return k


def _source_partition(blob: Any, meta: Any, spec: EpochSpec, index: int, _it: Any) -> Any:
    return run_stage_partition(blob, meta, spec, index, ())


def _stage_partition(blob: Any, meta: Any, spec: EpochSpec, index: int, it: Any) -> Any:
    return run_stage_partition(blob, meta, spec, index, it)


def _for_stage(sid: int, x: Any) -> bool:
    return bool(x[0] == sid)


def _strip_dest(x: Any) -> Any:
    return (x[1], x[2])


def _ack_of(x: Any) -> Any:
    return x[2][1]


class SparkEpochRunner(EpochRunner):
    def __init__(self, spark: Any = None, configuration: Any = None) -> None:
        self.spark = spark
        self.configuration = configuration
        self.blobs: dict[int, Any] = {}
        self._broadcasts: list[Any] = []

    def describe(self) -> str:
        return f"Spark ({self.spark.sparkContext.master})" if self.spark else "Spark"

    def start(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None:
        from streamstate.spark.session import get_or_create_spark

        if self.spark is None:
            self.spark = get_or_create_spark(self.configuration)
        sc = self.spark.sparkContext
        self._broadcasts = []
        for sid, blob in specs.items():
            bc = sc.broadcast(blob)  # the spec (functions, collection data) travels once per job
            self._broadcasts.append(bc)
            self.blobs[sid] = (job_id, sid, bc)

    def run_epoch(
        self, plan: ExecutionPlan, epoch_specs: dict[int, EpochSpec]
    ) -> list[SubtaskAck]:
        from pyspark import StorageLevel

        sc = self.spark.sparkContext
        meta = {s.id: (s.parallelism, s.max_parallelism) for s in plan.stages}
        rdds: dict[int, Any] = {}
        persisted = []
        for st in plan.stages:
            spec = epoch_specs[st.id]
            if st.is_source:
                base = sc.parallelize(range(st.parallelism), st.parallelism)
                out = base.mapPartitionsWithIndex(
                    partial(_source_partition, self.blobs[st.id], meta, spec)
                )
            else:
                ups = [
                    rdds[u].filter(partial(_for_stage, st.id)).map(_strip_dest) for u in st.upstream
                ]
                src = ups[0] if len(ups) == 1 else sc.union(ups)
                shuffled = src.partitionBy(st.parallelism, _identity)
                out = shuffled.mapPartitionsWithIndex(
                    partial(_stage_partition, self.blobs[st.id], meta, spec)
                )
            if len(st.downstream) > 1:
                out = out.persist(StorageLevel.MEMORY_AND_DISK)
                persisted.append(out)
            rdds[st.id] = out
        leaves = [rdds[s.id].map(_ack_of) for s in plan.leaves]
        final = leaves[0] if len(leaves) == 1 else sc.union(leaves)
        sc.setJobDescription(f"streamstate epoch {next(iter(epoch_specs.values())).epoch}")
        try:
            return list(final.collect())
        except Exception as e:  # noqa: BLE001
            err = translate_spark_error(e)
            raise err from (err.__cause__ if err.__cause__ is not None else e)
        finally:
            for r in persisted:
                r.unpersist()

    def stop(self) -> None:
        for bc in self._broadcasts:
            try:
                bc.destroy()
            except Exception:  # noqa: BLE001 - the context may already be gone
                pass
        self._broadcasts = []


_TB = "Traceback (most recent call last):"
_LAST = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Transition)[\w]*): ?(.*)$"
)


def translate_spark_error(e: BaseException) -> BaseException:
    """Turn a Spark job failure into the worker's Python error.

    The worker's traceback is kept in a :class:`TaskFailure`; if the worker raised
    one of streamstate's typed errors, that type is re-created (chained to the
    TaskFailure) so callers can catch it as if it had been raised locally.
    """
    text = str(e)
    i = text.rfind(_TB)
    if i < 0:
        if "exited unexpectedly" in text or "crashed" in text:
            return TaskFailure("WorkerCrashed", "a Python worker process died", text[-4000:])
        return TaskFailure(
            type(e).__name__, text.strip().splitlines()[0] if text.strip() else "", text[-4000:]
        )
    tb = text[i:]
    end = tb.find("\n\tat ")
    tb = tb if end < 0 else tb[:end]
    last_type, last_msg = "Exception", ""
    for line in tb.strip().splitlines():
        m = _LAST.match(line.strip())
        if m:
            last_type, last_msg = m.group(1), m.group(2)
    failure = TaskFailure(last_type, last_msg, tb.strip())
    name = last_type.rsplit(".", 1)[-1]
    if last_type.startswith("streamstate."):
        from streamstate import errors

        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, StreamStateError):
            err = cls.__new__(cls)
            Exception.__init__(err, last_msg)
            err.__cause__ = failure
            return err
    return failure
