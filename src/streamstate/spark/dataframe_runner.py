"""Runs an epoch as one Spark job on the DataFrame API alone: works on Spark Connect.

A Spark Connect session (``SparkSession.builder.remote("sc://...")``) has no SparkContext
and no RDD API, so this runner builds each epoch as a DataFrame plan:

* a **source stage** is ``spark.range(p, numPartitions=p).mapInArrow(subtask)``: partition
  ``i`` holds the single row ``i``, and the subtask function runs subtask ``i``;
* a **downstream stage** is the union of its upstream stages' rows for it
  (``filter(dest == stage)``), ``repartition(p, "route")``, ``mapInArrow(subtask)``. Every
  row carries a *route*, an int whose Spark hash lands on its target subtask's partition
  (``routing.py``), so the exchange delivers each record to exactly its subtask. A task
  learns its subtask from its rows' target, not from the Spark partition id, which counts
  across a union's inputs when Spark runs two stages' tasks in one Spark stage; rows of two
  targets in one task fail the epoch. The subtasks of a stage's first upstream stage send
  it one *tick* row per subtask (``arrow_batches.tick_targets``) after their records, so
  that a row comes even when no record does: the exchange has no input of its own for them
  (a local relation of ticks would add tasks to every map stage). An exchange with an explicit partition count is never coalesced by
  adaptive execution;
* the rows are Arrow record batches of ``(dest, target, route, payload)``
  (``runtime/arrow_batches.py``); leaf stages emit their acks (and the acks forwarded to
  them) as rows to the driver, and one ``collect()`` of the leaves' union runs the epoch.

A stage read by more than one downstream stage is persisted for the epoch (its stateful
tasks run once). Stage specs up to 64 KiB travel inside the plan; larger ones as a file
artifact of the session (``addArtifacts(file=True)``, read with ``SparkFiles``), uploaded
once per job. Subtask hosts work as on the classic runner (a host per subtask on the
executor's machine, found by the Python worker that runs ``mapInArrow``). Not available
here: preferred locations (the DataFrame API has no hook for them; a subtask that lands on
another executor is rebuilt from its lineage).
"""

from __future__ import annotations

import atexit
import base64
import logging
import os
import pickle
import struct
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache, partial, reduce
from typing import Any

from streamstate.runtime.arrow_batches import (
    ROUTED_FIELDS,
    decode_routed,
    encode_routed,
    tick_targets,
)
from streamstate.runtime.epoch_runner import EpochRunner
from streamstate.runtime.gc_pause import freeze_survivors, gc_paused
from streamstate.runtime.graph import ExecutionPlan
from streamstate.runtime.protocol import DRIVER, EpochSpec, SubtaskAck
from streamstate.runtime.queryable.query_host import stop_query_host
from streamstate.runtime.runtime_dir import release, scratch_dir
from streamstate.runtime.subtask_host import run_hosted, stop_hosts
from streamstate.runtime.task import run_stage_partition
from streamstate.spark.console_progress import suspend_console_progress
from streamstate.spark.placement import executor_location
from streamstate.spark.python_deps import ConnectFiles, ship_python_dependencies
from streamstate.spark.routing import route_of
from streamstate.spark.runner import (
    _AT_EXIT,
    _STOPPERS,
    _hosted,
    _hostless,
    join_host_stoppers,
    translate_spark_error,
)
from streamstate.spark.session import bind_job_session, is_connect_session

__all__ = ["DataFrameEpochRunner"]

log = logging.getLogger("streamstate")

_INLINE_SPEC_BYTES = 64 * 1024
_ADAPTIVE = "spark.sql.adaptive.enabled"


#: a packed spec file starts with the spec's size (what zstd decompression needs)
_PACKED_SIZE = struct.Struct("<Q")


def _pack_spec(blob: bytes) -> bytes:
    """``blob`` as a large spec's file holds it: zstd-compressed (pyarrow's codec), after
    its size. As Spark compresses a broadcast (the classic runner's way to ship it): a
    collection's pickled records shrink several times over (12 MB of K1's to 0.14 MB),
    and the upload (a gRPC message per 32 KiB on Spark Connect) is the job's largest
    start-up cost; zstd takes ~8 ms to pack and ~6 ms to unpack those 12 MB."""
    import pyarrow as pa

    return _PACKED_SIZE.pack(len(blob)) + pa.compress(blob, codec="zstd", asbytes=True)


def _unpack_spec(data: bytes) -> bytes:
    import pyarrow as pa

    (size,) = _PACKED_SIZE.unpack_from(data)
    packed = pa.py_buffer(data).slice(_PACKED_SIZE.size)
    spec: bytes = pa.decompress(packed, decompressed_size=size, codec="zstd", asbytes=True)
    return spec


class _FileSpec:
    """A stage spec shipped as a session file artifact (:func:`_pack_spec`); ``value``
    reads it in the worker (what ``WorkerHost.stage_spec`` and the subtask host read from
    a non-bytes spec: once per process and job)."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def value(self) -> bytes:
        from pyspark import SparkFiles

        with open(SparkFiles.get(self.name), "rb") as f:
            return _unpack_spec(f.read())


def _router(meta: dict[int, tuple[int, int]]) -> Any:
    def route(dest: int, target: int) -> int:
        return 0 if dest == DRIVER else route_of(meta[dest][0], target)

    return route


def _run_subtask(
    blob: Any,
    meta: dict[int, tuple[int, int]],
    spec_at: tuple[str, int],
    hosted: float | None,
    source: bool,
    large_binary: bool,
    ticks: tuple[int, tuple[tuple[int, int], ...]],
    batches: Any,
) -> Any:
    """The ``mapInArrow`` function of a stage: runs the subtask its rows name (a source's
    one ``range`` row is its index; a downstream stage's rows carry their target, and its
    tick row makes sure one comes even when no record does). ``spec_at``: the session
    setting that holds the epoch's specs and this stage's id (:func:`_task_epoch_spec`);
    ``ticks``: this stage's parallelism and the ``(stage, parallelism)`` it sends ticks to."""
    freeze_survivors()  # the daemon's gc.collect() after the task skips them (gc_pause.py)
    spec = _task_epoch_spec(*spec_at)
    items: list[tuple[int, Any]] = []
    if source:
        ids = [i for b in batches for i in b.column(0).to_pylist()]
        if len(ids) != 1:
            raise RuntimeError(
                f"a source task holds rows {ids}, not one subtask index: "
                f"spark.range(p, numPartitions=p) did not split as expected"
            )
        index = ids[0]
    else:
        found, items = decode_routed(batches, spec_at[1])
        if found is None:
            raise RuntimeError("a stage's task got no rows, not even its tick row")
        index = found
    executor = executor_location()
    if hosted is not None:
        outputs = run_hosted(blob, meta, spec, index, items, hosted, executor)
    else:
        with gc_paused():  # the whole epoch here, not as Spark pulls it (runtime/gc_pause.py)
            outputs = list(run_stage_partition(blob, meta, spec, index, items, executor))
    senders, receivers = ticks
    yield from encode_routed(
        outputs, _router(meta), large_binary, tick_targets(index, senders, receivers)
    )


def _spec_setting(job_id: str) -> str:
    """The session setting that carries a job's epoch specs to its tasks."""
    return f"spark.streamstate.epoch-specs.{job_id}"


def _encode_specs(epoch_specs: dict[int, EpochSpec]) -> str:
    return base64.b64encode(pickle.dumps(epoch_specs, protocol=5)).decode("ascii")


@lru_cache(maxsize=4)
def _decode_specs(value: str) -> dict[int, EpochSpec]:
    specs: dict[int, EpochSpec] = pickle.loads(base64.b64decode(value))
    return specs


def _task_epoch_spec(setting: str, stage: int) -> EpochSpec:
    """The epoch spec of ``stage``, read in a task: Spark propagates the session's
    ``spark.*`` settings to every task of a SQL execution as local properties
    (``SQLExecution.withSQLConfPropagated``), on a cluster as locally."""
    from pyspark import TaskContext

    context = TaskContext.get()
    value = None if context is None else context.getLocalProperty(setting)
    if value is None:
        raise RuntimeError(
            f"the task found no epoch specs in its local property {setting!r}: the "
            f"session's settings did not reach the task (a SQL execution propagates them)"
        )
    return _decode_specs(value)[stage]


def _routed_struct() -> Any:
    """``ROUTED_DDL`` as a StructType: ``mapInArrow`` given a DDL string asks the server to
    parse it, once per call (a round trip per stage and epoch on Spark Connect)."""
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    kinds = {"int": IntegerType(), "binary": BinaryType()}
    return StructType([StructField(name, kinds[kind]) for name, kind in ROUTED_FIELDS])


#: the pyspark major versions whose Connect DataFrame keeps its known schema in
#: ``_cached_schema`` (read by ``columns``/``schema``, carried over by ``filter``,
#: ``repartition``, set by ``mapInArrow`` given a StructType); checked on 4.0-4.3
_CACHED_SCHEMA_MAJORS = frozenset({"4"})


def _known_schema(frame: Any, schema: Any) -> Any:
    """``frame`` with its schema known to the client, so that ``mapInArrow`` (which reads its
    input's columns) does not ask a Spark Connect server to analyse the plan so far: once
    per stage and epoch otherwise, for a ``range`` or a ``union`` with a local relation.

    The one use of a private pyspark attribute in streamstate: the Connect client has no
    public way to declare a DataFrame's schema (it keeps what it learnt in
    ``_cached_schema``; ``mapInArrow`` with a StructType sets it, ``range`` and
    ``createDataFrame`` do not). Only on the pyspark versions it was checked on, only on a
    Connect DataFrame that has the attribute unset; anything else is left as it is (the
    client then asks the server: slower, the same result). A classic DataFrame asks its
    JVM, which is cheap."""
    import pyspark

    if (
        is_connect_session(frame.sparkSession)
        and pyspark.__version__.split(".", 1)[0] in _CACHED_SCHEMA_MAJORS
        and getattr(frame, "_cached_schema", False) is None
    ):
        frame._cached_schema = schema
    return frame


def _rows_for(frame: Any, upstream: Any, stage: int) -> Any:
    """The rows of ``upstream``'s output ``frame`` that go to ``stage``. A stage that feeds
    only ``stage`` sends it every row (its data, watermarks, ticks and the acks it forwards:
    ``worker/ack.emit``), so its frame goes as it is: a filter would be one more
    code-generated stage to plan every epoch (and its closure cleaned), for nothing; the
    receiving task checks every row's ``dest`` all the same (``decode_routed``)."""
    if list(upstream.downstream) == [stage]:
        return frame
    # SQL text, not pyspark.sql.functions: those build classic or Connect columns by the
    # process's mode, not by the session's
    return frame.filter(f"dest = {stage}")


def _ticked(stage: Any, stages: dict[int, Any]) -> tuple[tuple[int, int], ...]:
    """The ``(stage id, parallelism)`` of the stages ``stage`` sends ticks to: those whose
    first upstream stage it is."""
    return tuple(
        (d, stages[d].parallelism) for d in stage.downstream if stages[d].upstream[0] == stage.id
    )


def _stop_hosts_batches(job_id: str, batches: Any) -> Any:
    import pyarrow as pa

    for _ in batches:
        pass
    stop_query_host(job_id)  # the machine's query host goes with the subtask hosts
    stopped = stop_hosts(job_id)
    yield pa.RecordBatch.from_arrays([pa.array([len(stopped)], pa.int64())], names=["stopped"])


class DataFrameEpochRunner(EpochRunner):
    """The epoch runner of a Spark Connect session (or any SparkSession): DataFrames only."""

    def __init__(
        self, spark: Any = None, configuration: Any = None, owns_session: bool = False
    ) -> None:
        self.spark = spark
        #: ``spark`` was made for this job (``runners.make_spark_runner``): stopped at the
        #: job's end, after its hosts were asked to stop. A session given by the user (or
        #: made by ``get_or_create_spark``) is not this job's to stop
        self._owns_session = owns_session
        self.configuration = configuration
        self.blobs: dict[int, Any] = {}
        self._job_id: str | None = None
        self._hosted = _hosted(configuration)
        self._large_binary = False
        self._artifacts: str | None = None
        #: rescales so far (names the large specs' artifacts apart)
        self._spec_generation = 0
        #: gives a classic session its Spark console progress bar back when the job ends
        self._resume_console_progress: Callable[[], None] | None = None
        self._routed = _routed_struct()
        #: Spark Connect: the epoch's DataFrame plan (the leaves' union, the stages to
        #: persist) and the ExecutionPlan it was built for. The same DataFrame every epoch
        #: sends the same plan, byte for byte (the specs travel in a session setting), so
        #: the server's plan cache (``spark.connect.session.planCache.*``) skips its
        #: analysis. A classic DataFrame would reuse its executed plan, shuffle output
        #: included: it is built anew every epoch
        self._frames: tuple[ExecutionPlan, Any, list[Any]] | None = None

    def describe(self) -> str:
        if self.spark is None:
            return "Spark (DataFrame runner)"
        kind = "Spark Connect" if is_connect_session(self.spark) else "Spark"
        return f"{kind} ({self.spark.conf.get('spark.master', '?')}, DataFrame runner)"

    def start(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None:
        if self.spark is None:
            from streamstate.spark.session import get_or_create_spark

            self.spark = get_or_create_spark(self.configuration)
        bind_job_session(self.spark)
        connect = is_connect_session(self.spark)
        conf = self.configuration.to_dict() if self.configuration is not None else {}
        if self._owns_session and _ADAPTIVE not in conf:
            # nothing in an epoch's plan for adaptive execution to adapt (its exchange has
            # an explicit partition count), and it costs a Spark job more per epoch (the
            # map stage's own job, then a re-planned result job). A session the user gave
            # keeps the user's setting
            self.spark.conf.set(_ADAPTIVE, "false")
        if not connect:  # a Connect server's bar is on the server's terminal
            self._resume_console_progress = suspend_console_progress(self.spark, self.configuration)
        files = ConnectFiles(self.spark) if connect else self.spark.sparkContext
        ship_python_dependencies(files, self.configuration)
        self._job_id = job_id
        large = self.spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
        self._large_binary = str(large).strip().lower() == "true"
        self._ship_specs(job_id, specs)

    def restage(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None:
        """The plan was rescaled (runtime/rescale.py): its new stage specs (a large one
        under a new artifact name: a session's artifacts cannot be replaced) and tick rows
        at the new parallelism."""
        self._frames = None
        self._spec_generation += 1
        self._ship_specs(job_id, specs)

    def _ship_specs(self, job_id: str, specs: dict[int, bytes]) -> None:
        for sid, blob in specs.items():
            if len(blob) <= _INLINE_SPEC_BYTES:
                self.blobs[sid] = (job_id, sid, blob)  # inside the plan's function
                continue
            self.blobs[sid] = (job_id, sid, self._upload(job_id, sid, blob))

    def _upload(self, job_id: str, sid: int, blob: bytes) -> _FileSpec:
        """Ship a large spec once per job (and rescale) as a file artifact of the session."""
        if self._artifacts is None:
            # a claimed scratch dir: removed when this process exits (or, killed, by the
            # next sweep); on Spark Connect already when the job stops
            self._artifacts = scratch_dir("specs")
        name = f"streamstate-{job_id}-{sid}-{self._spec_generation}.spec"
        path = os.path.join(self._artifacts, name)
        with open(path, "wb") as f:
            f.write(_pack_spec(blob))
        if is_connect_session(self.spark):
            self.spark.addArtifacts(path, file=True)  # uploaded now: the server keeps it
        else:  # a classic session: the SparkContext ships files the same way, and its
            # executors fetch them from the driver whenever one starts (kept till exit)
            self.spark.sparkContext.addFile(path)
        return _FileSpec(name)

    def run_epoch(self, plan: ExecutionPlan, epoch_specs: dict[int, EpochSpec]) -> list[SubtaskAck]:
        from pyspark import StorageLevel

        assert self._job_id is not None, "run_epoch before start"
        setting = _spec_setting(self._job_id)
        self.spark.conf.set(setting, _encode_specs(epoch_specs))
        if self._frames is not None and self._frames[0] is plan:
            _, final, persisted = self._frames
            for frame in persisted:
                frame.persist(StorageLevel.MEMORY_AND_DISK)
        else:
            final, persisted = self._epoch_frames(plan, setting)
            if is_connect_session(self.spark):
                self._frames = (plan, final, persisted)
        try:
            # collect, not toArrow: toArrow asks the server for the plan's schema first
            # (an analysis of the whole epoch's plan); collect takes it from the result
            rows = final.collect()
        except Exception as e:  # noqa: BLE001
            raise translate_spark_error(e) from None
        finally:
            for frame in persisted:
                frame.unpersist()
        # each row is a pickled (ACK, pickled SubtaskAck) payload (worker/ack.emit)
        acks = [pickle.loads(pickle.loads(row.payload)[1]) for row in rows]
        hostless = {s.id for s in plan.stages if _hostless(s)}
        if hostless:  # nothing to find in place: not counted as hits or misses
            acks = [replace(a, cache_hit=None) if a.stage in hostless else a for a in acks]
        return acks

    def _epoch_frames(self, plan: ExecutionPlan, setting: str) -> tuple[Any, list[Any]]:
        """The DataFrame of an epoch of ``plan`` (the union of its leaves' acks) and the
        stages it persists (read by more than one stage: their stateful tasks run once)."""
        from pyspark import StorageLevel
        from pyspark.sql.types import LongType, StructField, StructType

        spark = self.spark
        routed = self._routed
        meta = {s.id: (s.parallelism, s.max_parallelism) for s in plan.stages}
        stages = {s.id: s for s in plan.stages}
        frames: dict[int, Any] = {}
        persisted = []
        for st in plan.stages:
            if st.is_source:
                base = _known_schema(
                    spark.range(st.parallelism, numPartitions=st.parallelism),
                    StructType([StructField("id", LongType(), False)]),
                )
                hosted = None if _hostless(st) else self._hosted
            else:
                ups = [_rows_for(frames[u], stages[u], st.id) for u in st.upstream]
                union = _known_schema(reduce(lambda a, b: a.unionAll(b), ups), routed)
                base = union.repartition(st.parallelism, "route")
                hosted = self._hosted
            fn = partial(
                _run_subtask,
                self.blobs[st.id],
                meta,
                (setting, st.id),
                hosted,
                st.is_source,
                self._large_binary,
                (st.parallelism, _ticked(st, stages)),
            )
            out = base.mapInArrow(fn, routed)
            if len(st.downstream) > 1:
                out = out.persist(StorageLevel.MEMORY_AND_DISK)
                persisted.append(out)
            frames[st.id] = out
        # the leaves' rows as they are (all acks, all of one schema): a projection to the
        # payload would be one more code-generated stage to plan every epoch
        leaves = [frames[s.id] for s in plan.leaves]
        return reduce(lambda a, b: a.unionAll(b), leaves), persisted

    def stop(self) -> None:
        own = self.spark if self._owns_session else None
        if own is None and self._job_id is not None and self.spark is not None:
            # a session the job does not own outlives it: its settings go to every task of
            # every later SQL execution (the job's own session is released at its end)
            try:
                self.spark.conf.unset(_spec_setting(self._job_id))
            except Exception as e:  # noqa: BLE001 - best effort; the setting is inert
                log.debug("removing the job's epoch specs setting failed: %s", e)
        self._owns_session = False  # stopped once (stop() may be called again after a failure)
        if self._hosted is not None and self._job_id is not None and self.spark is not None:
            # best effort, off the job's critical path (as the classic runner's stop); the
            # job's own session is stopped by that thread, once its last Spark job ran
            t = threading.Thread(
                target=_stop_hosts_job,
                args=(self.spark, self._job_id, own),
                name=f"streamstate-stop-hosts-{self._job_id}",
                daemon=True,
            )
            if not _AT_EXIT:
                _AT_EXIT.append(atexit.register(join_host_stoppers, 10.0))
            if own is not None:  # should the thread not finish, closed at exit
                _OWNED_SESSIONS.add(own)
            t.start()
            _STOPPERS.append(t)
        elif own is not None:
            _stop_session(own)
        self._job_id = None
        self._frames = None
        if (
            self._artifacts is not None
            and self.spark is not None
            and is_connect_session(self.spark)
        ):
            release(self._artifacts)  # the server holds the uploaded specs
            self._artifacts = None
        bind_job_session(None)
        if self._resume_console_progress is not None:
            self._resume_console_progress()
            self._resume_console_progress = None


def _stop_session(session: Any) -> None:
    """Stop a job's own Connect session: the server releases it (its artifacts, its
    Python worker daemon) and the client closes its channel, so that pyspark's exit hook
    has nothing left to clean up."""
    try:
        session.stop()
    except Exception as e:  # noqa: BLE001 - best effort; the server's session times out
        log.debug("stopping the job's Spark Connect session failed: %s", e)


class _OwnedSessions:
    """The sessions jobs made for themselves whose stopping thread has not stopped them
    yet; ONE exit hook closes those left open (their clients, without an RPC: the server
    may be gone), once the hosts' stopper threads finished (bounded). An entry leaves the
    registry when its session is stopped, so a process running many jobs holds neither a
    hook nor a session per job."""

    def __init__(self) -> None:
        self._open: dict[int, Any] = {}  # id(session) -> session
        self._lock = threading.Lock()

    def add(self, session: Any) -> None:
        with self._lock:
            self._open[id(session)] = session
        # moved to the top each time: exit hooks run last-registered first, and this one
        # must run before the exit hook of every owned session's client (pyspark's,
        # registered when the client was made), which retries its cleanup RPC for
        # minutes once the server is gone
        atexit.unregister(self.close_open)
        atexit.register(self.close_open)

    def stop(self, session: Any) -> None:
        """Stop ``session`` and forget it."""
        _stop_session(session)
        with self._lock:
            self._open.pop(id(session), None)

    def open_sessions(self) -> list[Any]:
        with self._lock:
            return list(self._open.values())

    def close_open(self) -> None:
        """At exit: let the hosts' stopper threads finish (bounded), then close the client
        of every owned session still open."""
        join_host_stoppers(10.0)
        with self._lock:
            sessions = list(self._open.values())
            self._open.clear()
        for session in sessions:
            if session.is_stopped:
                continue
            try:
                session.client.close()
            except Exception as e:  # noqa: BLE001 - the process is exiting
                log.debug("closing the job's Spark Connect client failed: %s", e)


_OWNED_SESSIONS = _OwnedSessions()


def _stop_hosts_job(spark: Any, job_id: str, own: Any = None) -> None:
    """Stop the job's subtask hosts (a small Spark job), then its own session ``own``."""
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
    if own is not None:
        _OWNED_SESSIONS.stop(own)
