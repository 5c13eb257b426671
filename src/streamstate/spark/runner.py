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

import atexit
import builtins
import logging
import pickle
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from streamstate.common.configuration import parse_duration_ms
from streamstate.errors import TaskFailure, WorkerEnvironmentError
from streamstate.runtime.epoch_runner import EpochRunner
from streamstate.runtime.gc_pause import freeze_survivors, gc_paused
from streamstate.runtime.graph import ExecutionPlan
from streamstate.runtime.job_end import end_job
from streamstate.runtime.protocol import EpochSpec, SubtaskAck
from streamstate.runtime.queryable.query_host import stop_query_host
from streamstate.runtime.subtask_host import DEFAULT_IDLE_TIMEOUT_S, run_hosted, stop_hosts
from streamstate.runtime.task import run_stage_partition
from streamstate.runtime.tracebacks import in_main_file, user_frames
from streamstate.spark.console_progress import suspend_console_progress
from streamstate.spark.placement import (
    executor_location,
    located_input,
    located_items,
    located_source,
)
from streamstate.spark.python_deps import ship_python_dependencies
from streamstate.spark.session import bind_job_session

__all__ = [
    "SparkEpochRunner",
    "join_host_stoppers",
    "prepare_job_session",
    "release_job_session",
    "translate_spark_error",
]

log = logging.getLogger("streamstate")

#: stage specs up to this size go inline with the tasks; larger ones (a collection's
#: records, big functions) as a broadcast, fetched once per executor
_INLINE_SPEC_BYTES = 64 * 1024


def _identity(k: int) -> int:
    return k


def _source_partition(
    blob: Any, meta: Any, spec: EpochSpec, hosted: float | None, index: int, _it: Any
) -> Any:
    for _ in _it:
        pass  # a PySpark worker that leaves input unread is not reused: it exits after the task
    freeze_survivors()  # the daemon's gc.collect() after the task skips them (gc_pause.py)
    executor = executor_location()
    if hosted is not None:
        return iter(run_hosted(blob, meta, spec, index, (), hosted, executor))
    with gc_paused():  # the whole epoch here, not as PySpark pulls it (runtime/gc_pause.py)
        return iter(list(run_stage_partition(blob, meta, spec, index, (), executor)))


def _stage_partition(
    blob: Any,
    meta: Any,
    spec: EpochSpec,
    hosted: float | None,
    loads: Any,
    index: int,
    it: Any,
) -> Any:
    if loads is not None:
        it = located_items(loads, it)  # the input of a located stage (placement.py)
    freeze_survivors()  # the daemon's gc.collect() after the task skips them (gc_pause.py)
    executor = executor_location()
    if hosted is not None:
        return iter(run_hosted(blob, meta, spec, index, it, hosted, executor))
    with gc_paused():
        return iter(list(run_stage_partition(blob, meta, spec, index, it, executor)))


def _stop_hosts(job_id: str, _index: int, _it: Any) -> Any:
    for _ in _it:
        pass  # unread input would make the PySpark worker exit: the next job would start anew
    stop_query_host(job_id)  # the machine's query host goes with the subtask hosts
    end_job(job_id)  # what this worker kept of the job (subtask hosts off)
    return iter(stop_hosts(job_id))


def _hosted(configuration: Any) -> float | None:
    """The subtask hosts' idle timeout (s), or ``None`` when subtasks run in the workers."""
    get = configuration.get_string if configuration is not None else (lambda k, d: d)
    if str(get("execution.runner.spark.subtask-hosts", "true")).strip().lower() == "false":
        return None
    raw = get("execution.runner.spark.subtask-hosts.idle-timeout", None)
    return DEFAULT_IDLE_TIMEOUT_S if raw is None else parse_duration_ms(raw) / 1000.0


def _hostless(st: Any) -> bool:
    """A source stage that holds nothing a host would keep: a stateless reader with no
    operator chained to it (no user function, no state). It runs in the task's Python
    worker: a host would only add a process hop (its start, the spec and the records
    crossing a socket) to every epoch. Its subtask-epochs are not counted as cache hits
    or misses: they have no state or function to find or rebuild."""
    return bool(
        st.is_source
        and st.source.stateless_reader  # connectors.base.Source declares it (default False)
        and all(n.factory is None for n in st.nodes.values())
    )


def _placement(configuration: Any) -> bool:
    """Whether tasks prefer the executor that ran their subtask last (placement.py)."""
    if configuration is None:
        return True
    raw = configuration.get_string("execution.runner.spark.preferred-locations", "true")
    return str(raw).strip().lower() != "false"


def _for_stage(sid: int, x: Any) -> bool:
    return bool(x[0] == sid)


def _strip_dest(x: Any) -> Any:
    return (x[1], x[2])


def _ack_of(x: Any) -> Any:
    return x[2][1]


def prepare_job_session(spark: Any, configuration: Any) -> tuple[Any, Callable[[], None] | None]:
    """The classic session a job runs on (``spark``, else one made from
    ``configuration``), made ready for it: its workers' Python checked, the job's Python
    dependencies shipped, task-failure logs quietened (unless
    ``execution.task-failure-logs``), the console progress bar suspended, the session bound
    to the job. Returns the session and what gives the progress bar back
    (:func:`release_job_session`)."""
    from streamstate.spark.session import (
        check_session_python,
        get_or_create_spark,
        silence_task_failure_logs,
    )

    if spark is None:
        spark = get_or_create_spark(configuration)
    check_session_python(spark)  # a user's own session: its workers' Python
    ship_python_dependencies(spark.sparkContext, configuration)
    keep = configuration is not None and str(
        configuration.get_string("execution.task-failure-logs", "false")
    ).strip().lower() in ("true", "1", "yes")
    if not keep:
        silence_task_failure_logs(spark)
    resume = suspend_console_progress(spark, configuration)
    bind_job_session(spark)
    return spark, resume


def release_job_session(resume_console_progress: Callable[[], None] | None) -> None:
    """The job is over: the session is no longer bound to it and gets its progress bar back."""
    bind_job_session(None)
    if resume_console_progress is not None:
        resume_console_progress()


class SparkEpochRunner(EpochRunner):
    def __init__(self, spark: Any = None, configuration: Any = None) -> None:
        self.spark = spark
        self.configuration = configuration
        self.blobs: dict[int, Any] = {}
        self._broadcasts: list[Any] = []
        self._job_id: str | None = None
        self._hosted = _hosted(configuration)
        self._placement = _placement(configuration)
        #: (stage, subtask) -> the executor (task location) that ran it last
        self.locations: dict[tuple[int, int], str] = {}
        #: an epoch's Spark job is running (what interrupt() may cancel)
        self._epoch_running = False
        #: gives the session its Spark console progress bar back when the job ends
        self._resume_console_progress: Callable[[], None] | None = None

    def describe(self) -> str:
        return f"Spark ({self.spark.sparkContext.master})" if self.spark else "Spark"

    def start(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None:
        self.spark, self._resume_console_progress = prepare_job_session(
            self.spark, self.configuration
        )
        self._job_id = job_id
        self._broadcasts = []
        self._ship_specs(job_id, specs)

    def request_executors(self, subtasks: int, before: int) -> str:
        """The autoscaler's ask (runtime/autoscaling.ExecutorRequests): executors for
        ``subtasks`` tasks at once (the plan had ``before``). A plan that shrinks to
        fewer executors than the application holds releases the surplus with
        ``SparkContext.killExecutors`` (their subtasks are rebuilt elsewhere from the
        rescale's checkpoint); otherwise the total is asked for with
        ``SparkContext.requestTotalExecutors``. What happened, in words."""
        sc = self.spark.sparkContext
        conf = sc.getConf()
        if sc.master.startswith("local"):
            return (
                f"no executors asked: {sc.master} runs every task in the driver's JVM "
                f"({sc.defaultParallelism} task slots)"
            )
        if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
            return "executors left to Spark's dynamic allocation (it follows pending tasks)"
        cores = int(conf.get("spark.executor.cores", "1") or 1)
        task_cpus = int(conf.get("spark.task.cpus", "1") or 1)
        wanted = max(1, -(-subtasks * task_cpus // max(1, cores)))
        try:
            jvm, jsc = sc._jvm, sc._jsc.sc()
            held = jsc.getExecutorIds()
            ids = sorted((str(held.apply(i)) for i in range(held.size())), key=_executor_order)
            if subtasks < before and len(ids) > wanted:
                # the newest go: the oldest hold the subtasks placed first
                surplus = ids[wanted:]
                as_list = jvm.java.util.ArrayList()
                for executor_id in surplus:
                    as_list.add(executor_id)
                killed = bool(
                    jsc.killExecutors(jvm.org.apache.spark.api.python.PythonUtils.toSeq(as_list))
                )
                return (
                    f"released {len(surplus)} of {len(ids)} executors (ids "
                    f"{', '.join(surplus)}; {wanted} wanted for {subtasks} subtasks, {cores} "
                    f"cores each): {'acknowledged' if killed else 'refused'}"
                )
            hosts = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
            granted = bool(jsc.requestTotalExecutors(wanted, 0, hosts))
        except Exception as e:  # noqa: BLE001 - a cluster manager without the calls
            return f"matching {wanted} executors failed: {type(e).__name__}: {e}"
        return (
            f"asked the cluster manager for {wanted} executors ({subtasks} subtasks, "
            f"{cores} cores each; {len(ids)} held): {'acknowledged' if granted else 'refused'}"
        )

    def restage(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None:
        """The plan was rescaled: ship its new stage specs (the old broadcasts go)."""
        _destroy(self._broadcasts)
        self._broadcasts = []
        self._ship_specs(job_id, specs)

    def _ship_specs(self, job_id: str, specs: dict[int, bytes]) -> None:
        sc = self.spark.sparkContext
        for sid, blob in specs.items():
            if len(blob) <= _INLINE_SPEC_BYTES:
                # travels inside the stage's task closure: a broadcast costs the driver a
                # file and JVM round trips (~25 ms) and each task a fetch
                self.blobs[sid] = (job_id, sid, blob)
                continue
            bc = sc.broadcast(blob)  # the spec (functions, collection data) travels once per job
            self._broadcasts.append(bc)
            self.blobs[sid] = (job_id, sid, bc)

    def run_epoch(self, plan: ExecutionPlan, epoch_specs: dict[int, EpochSpec]) -> list[SubtaskAck]:
        from pyspark import StorageLevel

        sc = self.spark.sparkContext
        meta = {s.id: (s.parallelism, s.max_parallelism) for s in plan.stages}
        rdds: dict[int, Any] = {}
        persisted = []
        for st in plan.stages:
            spec = epoch_specs[st.id]
            locs = [self.locations.get((st.id, i)) for i in range(st.parallelism)]
            located = self._placement and any(locs)
            if st.is_source:
                base = (
                    located_source(sc, locs)
                    if located
                    else sc.parallelize(range(st.parallelism), st.parallelism)
                )
                hosted = None if _hostless(st) else self._hosted
                out = base.mapPartitionsWithIndex(
                    partial(_source_partition, self.blobs[st.id], meta, spec, hosted)
                )
            else:
                ups = [
                    rdds[u].filter(partial(_for_stage, st.id)).map(_strip_dest) for u in st.upstream
                ]
                src = ups[0] if len(ups) == 1 else sc.union(ups)
                shuffled = src.partitionBy(st.parallelism, _identity)
                loads = None
                if located:
                    shuffled = located_input(sc, shuffled, locs)
                    loads = sc._unbatched_serializer.loads
                out = shuffled.mapPartitionsWithIndex(
                    partial(_stage_partition, self.blobs[st.id], meta, spec, self._hosted, loads)
                )
            if len(st.downstream) > 1:
                out = out.persist(StorageLevel.MEMORY_AND_DISK)
                persisted.append(out)
            rdds[st.id] = out
        leaves = [rdds[s.id].map(_ack_of) for s in plan.leaves]
        final = leaves[0] if len(leaves) == 1 else sc.union(leaves)
        # the job group lets interrupt() cancel exactly this job's Spark jobs
        sc.setJobGroup(
            f"streamstate-{self._job_id}",
            f"streamstate epoch {next(iter(epoch_specs.values())).epoch}",
        )
        self._epoch_running = True
        try:
            acks = [pickle.loads(b) for b in final.collect()]  # acks are pickled (worker/ack.emit)
        except Exception as e:  # noqa: BLE001
            raise translate_spark_error(e) from None
        finally:
            self._epoch_running = False
            for r in persisted:
                r.unpersist()
        hostless = {s.id for s in plan.stages if _hostless(s)}
        if hostless:  # nothing to find in place: not counted as hits or misses (_hostless)
            acks = [replace(a, cache_hit=None) if a.stage in hostless else a for a in acks]
        for a in acks:
            if a.executor is not None:
                self.locations[(a.stage, a.subtask)] = a.executor
        return acks

    def interrupt(self) -> None:
        """Cancel this job's running Spark jobs (called off the driver loop's thread: the
        loop is blocked in ``collect()``, which then raises)."""
        if self.spark is not None and self._job_id is not None and self._epoch_running:
            try:
                self.spark.sparkContext.cancelJobGroup(f"streamstate-{self._job_id}")
            except Exception as e:  # noqa: BLE001 - the context may be stopping already
                log.debug("cancelling the job's Spark jobs failed: %s", e)

    def stop(self) -> None:
        if self._hosted is not None and self._job_id is not None and self.spark is not None:
            # best effort, off the job's critical path: a small Spark job in which every
            # executor that runs one of its tasks stops this job's hosts on its machine
            # (hosts elsewhere, or if the driver exits first, go after their idle timeout)
            t = threading.Thread(
                target=_stop_hosts_job,
                args=(self.spark.sparkContext, self._job_id, self._broadcasts),
                name=f"streamstate-stop-hosts-{self._job_id}",
                daemon=True,
            )
            if not _AT_EXIT:
                _AT_EXIT.append(atexit.register(join_host_stoppers, 10.0))  # before PySpark's
            t.start()
            _STOPPERS.append(t)
        else:
            _destroy(self._broadcasts)
        self._job_id = None
        self._broadcasts = []
        release_job_session(self._resume_console_progress)
        self._resume_console_progress = None


#: background threads stopping finished jobs' hosts (``join_host_stoppers`` waits for them)
_STOPPERS: list[threading.Thread] = []
_AT_EXIT: list[Any] = []


def join_host_stoppers(timeout_s: float = 30.0) -> None:
    """Wait until the hosts of every finished job of this process were asked to stop."""
    while _STOPPERS:
        _STOPPERS.pop().join(timeout_s)


def _stop_hosts_job(sc: Any, job_id: str, broadcasts: list[Any]) -> None:
    try:
        n = max(2, sc.defaultParallelism)
        sc.setJobDescription("streamstate: stop subtask hosts")
        sc.parallelize(range(n), n).mapPartitionsWithIndex(partial(_stop_hosts, job_id)).collect()
    except Exception as e:  # noqa: BLE001 - the job is over; hosts also time out
        log.debug("stopping the subtask hosts failed: %s", e)
    _destroy(broadcasts)


def _destroy(broadcasts: list[Any]) -> None:
    for bc in broadcasts:
        try:
            bc.destroy()
        except Exception:  # noqa: BLE001 - the context may already be gone
            pass


_TB = "Traceback (most recent call last):"
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?:: (.*))?$")
#: streamstate itself missing, not a module of the user's whose name starts with it
_NO_STREAMSTATE = re.compile(r"No module named 'streamstate(?:'|\.)")
_LOST_TASK = re.compile(r"Lost task (\d+)\.\d+ in stage ([\d.]+)")
#: the error class state a Spark Connect error appends to the worker's message
_SQLSTATE = re.compile(r"\n\s*SQLSTATE: [0-9A-Z]{5}\s*(?=\n|$)")


def _exception_line(tb: str) -> tuple[str, str]:
    """The final exception's qualified type name and message in a Python traceback."""
    lines = tb.strip().splitlines()
    last_frame = max((k for k, ln in enumerate(lines) if ln.startswith('  File "')), default=-1)
    k = last_frame + 1
    while k < len(lines) and (lines[k].startswith(" ") or not lines[k].strip()):
        k += 1
    if k >= len(lines):
        return "Exception", ""
    m = _EXC_LINE.match(lines[k].strip())
    if m is None:
        return "Exception", "\n".join(lines[k:])
    rest = "\n".join([m.group(2) or "", *lines[k + 1 :]]).strip()
    return m.group(1), rest


def _user_class(qualified: str) -> type[BaseException] | None:
    """The exception class of this name in the driver (builtins, streamstate.errors, or a
    module the driver already imported), never importing anything. A bare name that is no
    builtin is the job script's: Python's tracebacks leave ``__main__.`` out, and the
    worker's copy of a class defined in the script is that class, shipped by value."""
    module, _, name = qualified.rpartition(".")
    owners: list[Any] = (
        [builtins, sys.modules.get("__main__")] if not module else [sys.modules.get(module)]
    )
    for owner in owners:
        cls = getattr(owner, name, None) if owner is not None else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return cls
    return None


def _host_crash(qualified: str, message: str, tb: str) -> BaseException | None:
    if qualified.rsplit(".", 1)[-1] != "SubtaskHostCrashed":
        return None
    return TaskFailure("WorkerCrashed", message, tb)


def translate_spark_error(e: BaseException) -> BaseException:
    """Turn a Spark job failure into the error the worker raised, as that type.

    The worker's exception is re-created as its own class when the driver knows the class
    (builtins, streamstate's errors, the job's modules), with the worker's traceback as a
    note; otherwise it is a :class:`TaskFailure` carrying the traceback. A Python worker
    that died without raising (killed, ``os._exit``, out of memory, a crash in native
    code) is a TaskFailure ``WorkerCrashed`` naming the subtask (the Spark partition).
    """
    text = str(e)
    i = text.rfind(_TB)
    if i < 0:
        if "exited unexpectedly" in text or "crashed" in text:
            m = _LOST_TASK.search(text)
            where = (
                f"subtask {m.group(1)} (Spark task {m.group(1)} of stage {m.group(2)})"
                if m
                else "a subtask"
            )
            return TaskFailure(
                "WorkerCrashed",
                f"the Python worker running {where} died without raising an exception "
                f"(killed by a signal, os._exit, out of memory, or a crash in native code; "
                f"Spark does not report its exit code). Check the executor's log and memory "
                f"(spark.executor.memory, spark.python.worker.memory)",
                "",
            )
        first = text.strip().splitlines()[0] if text.strip() else ""
        return TaskFailure(type(e).__name__, first, text[-4000:])
    tb = text[i:]
    end = tb.find("\n\tat ")
    tb = _SQLSTATE.sub("", tb if end < 0 else tb[:end]).strip()
    end = tb.find("\n\nJVM stacktrace:")  # Spark Connect: the server's JVM frames follow
    tb = tb if end < 0 else tb[:end].strip()
    qualified, message = _exception_line(tb)
    if qualified == "ModuleNotFoundError" and _NO_STREAMSTATE.search(message):
        return WorkerEnvironmentError(
            f"the Spark executors' Python workers cannot import streamstate ({message}): "
            f"install it in the interpreter they run (spark.pyspark.python / PYSPARK_PYTHON, "
            f"a virtualenv shipped with spark.archives, or spark.submit.pyFiles); restarting "
            f"the job cannot cure this"
        )
    crash = _host_crash(qualified, message, tb)
    if crash is not None:
        return crash
    cls = _user_class(qualified)
    if cls is not None:
        try:
            err = cls.__new__(cls)
            Exception.__init__(err, message)
            str(err)  # classes whose __str__ needs their constructor's fields fall back below
        except Exception:  # noqa: BLE001 - the class cannot be rebuilt from a message
            cls = None
    if cls is None:
        return TaskFailure(qualified, message, tb)
    shown = in_main_file(user_frames(tb), getattr(sys.modules.get("__main__"), "__file__", None))
    err.add_note(f"worker traceback:\n{shown}")  # the whole one: remote_traceback
    # what FailureInfo and the job's exception history read
    err.error_type = qualified  # type: ignore[attr-defined]  # an annotation on the rebuilt error
    err.remote_traceback = tb  # type: ignore[attr-defined]  # an annotation on the rebuilt error
    return err


def _executor_order(executor_id: str) -> tuple[int, str]:
    """Executor ids in the order they were started (numeric ids by number)."""
    return (int(executor_id), "") if executor_id.isdigit() else (1 << 62, executor_id)
