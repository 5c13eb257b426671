"""Spark applications of the host-lifetime suite (``test_host_lifetimes.py``), each its own
driver process with its own SparkSession (``local[2]``, subtask hosts on), as a user runs
them. Each prints one JSON line ``RESULT {...}`` at its end.

    python host_apps.py files OUT CHK LOCAL    RocksDB (incremental, local recovery) +
                                               operator state + FileSink; reports the mode
                                               of every file and directory the job wrote,
                                               seen at every epoch and at the end
    python host_apps.py source                 a SourceFunction without operator state,
                                               40 records, spark.python.worker.reuse=false
    python host_apps.py helper                 a function of a module that only the
                                               workers' PYTHONPATH provides; reports what
                                               the host saw (environment, cwd, umask)
    python host_apps.py pids MARKERS DELAY     a slow job (DELAY s per record) whose subtask
                                               hosts and query host record their pid and
                                               their zygote's in MARKERS (the test SIGKILLs
                                               this driver, or lets it finish)
    python host_apps.py unsafe CHK             a hosted job; reports the error it ends with
                                               (the test made the runtime dir unsafe)
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from streamstate.common import Configuration, Encoder, Types  # noqa: E402
from streamstate.datastream import (  # noqa: E402
    CheckpointedFunction,
    EmbeddedRocksDBStateBackend,
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors import CollectSink, FileSink, RollingPolicy  # noqa: E402
from streamstate.datastream.functions import SourceFunction  # noqa: E402
from streamstate.datastream.state import (  # noqa: E402
    ListStateDescriptor,
    ValueStateDescriptor,
)
from streamstate.runtime.job_status import JobObserver  # noqa: E402
from streamstate.testing import TickingClock  # noqa: E402
from tests.faults.crash_job import RunningSum, as_line  # noqa: E402


def session(reuse: bool = True) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("host-lifetimes")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", str(reuse).lower())
    )
    for key, value in json.loads(os.environ.get("HOST_APP_SPARK_CONF", "{}")).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def environment(
    spark: Any, parallelism: int = 2, conf: dict[str, str] | None = None
) -> StreamExecutionEnvironment:
    c = Configuration()
    for k, v in (conf or {}).items():
        c.set_string(k, v)
    env = StreamExecutionEnvironment.get_execution_environment(c, spark=spark)
    env.set_parallelism(parallelism)
    return env


def report(**values: Any) -> None:
    print("RESULT " + json.dumps(values), flush=True)


# -- files: every file the job writes ------------------------------------------------------


class Seen(MapFunction, CheckpointedFunction):
    """Counts its records in operator state (a state file per subtask and checkpoint)."""

    def __init__(self) -> None:
        self.count = 0
        self.state: Any = None

    def map(self, value: Any) -> Any:
        self.count += 1
        return value

    def snapshot_state(self, context: Any) -> None:
        self.state.update([self.count])

    def initialize_state(self, context: Any) -> None:
        self.state = context.get_operator_state_store().get_list_state(
            ListStateDescriptor("seen", Types.LONG())
        )
        self.count = sum(self.state.get() or [])


class Modes(JobObserver):
    """The mode of every entry under ``roots``, read at every epoch (RocksDB's working files
    and local copies exist while the job runs) and once more at the end."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = roots
        self.modes: dict[str, str] = {}

    def on_epoch(self, job_id: str, stats: Any) -> None:
        self.walk()

    def walk(self) -> None:
        for root in self.roots:
            for dirpath, dirs, files in os.walk(root):
                for path in [dirpath] + [os.path.join(dirpath, n) for n in dirs + files]:
                    try:
                        mode = stat.S_IMODE(os.lstat(path).st_mode)
                    except FileNotFoundError:
                        continue  # removed meanwhile (a subsumed checkpoint, a temp file)
                    self.modes[os.path.relpath(path, os.path.dirname(root))] = f"{mode:04o}"


def files(out: str, chk: str, local: str) -> None:
    spark = session()
    env = environment(spark, conf={"execution.epoch.max-records": "40"})
    env.set_clock(TickingClock())
    env.enable_checkpointing(2500)  # every 2-3 epochs: epoch versions between them
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage_dir(chk)
    config.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    backend = EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True)
    backend.set_db_storage_paths(local)
    env.set_state_backend(backend)
    modes = Modes([out, chk, local])
    env.add_job_observer(modes)
    sink = (
        FileSink.for_row_format(out, Encoder.simple_string_encoder())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    records = [(f"k{i % 7}", i) for i in range(240)]
    (
        env.from_collection(records)
        .map(Seen())
        .uid("seen")
        .key_by(lambda v: v[0])
        .process(RunningSum())
        .uid("sum")
        .map(as_line)
        .sink_to(sink)
        .uid("files")
    )
    result = env.execute("umask-files")
    modes.walk()
    report(modes=modes.modes, epochs=result.get_accumulator_result("epochs"))


# -- source: a stateless SourceFunction with worker reuse off --------------------------------


class Forty(SourceFunction):
    """No operator state: 40 records, then run() returns, after the epoch was cut (its
    500 ms wait): the next epoch's task thread in the host is a new one (worker reuse off)
    and may get the ident of the finished source thread."""

    def run(self, ctx: Any) -> None:
        for i in range(40):
            ctx.collect(i)
        time.sleep(1.0)

    def cancel(self) -> None:
        pass


def source() -> None:
    spark = session(reuse=False)
    env = environment(spark, parallelism=1)
    sink = CollectSink()
    env.add_source(Forty()).uid("forty").map(lambda v: v * 2).sink_to(sink)
    result = env.execute("stateless-source")
    report(records=sorted(sink.get_results()), epochs=result.get_accumulator_result("epochs"))


# -- helper: a module only the workers' PYTHONPATH provides ----------------------------------


def helper() -> None:
    import host_helper  # type: ignore[import-not-found]  # on PYTHONPATH (the test writes it)

    spark = session()
    env = environment(spark)
    sink = CollectSink()
    env.from_collection(list(range(8))).key_by(lambda v: v % 2).map(host_helper.seen).sink_to(sink)
    env.execute("pythonpath-helper")
    report(seen=sorted(sink.get_results()))


# -- pids: the hosts, query host and zygote of a driver that dies ----------------------------


def _mark(markers: str, name: str, pid: int, host_dir: str | None = None) -> None:
    """Leave ``<markers>/<name>``: process ``pid``, its parent (the zygote) and, from a
    host, its application's directory (not asked on the driver: it would create one)."""
    from streamstate.runtime.host_owner import start_time

    parent = _parent_of(pid)
    mark = {"pid": pid, "start": start_time(pid), "parent": parent}
    mark.update(parent_start=start_time(parent), host_dir=host_dir)
    tmp = os.path.join(markers, f".{name}.tmp")
    with open(tmp, "w") as f:
        json.dump(mark, f)
    os.replace(tmp, os.path.join(markers, name))


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


class RecordsItsProcess(KeyedProcessFunction):
    """Leaves ``<markers>/host-<pid>`` (its host's pid and parent: the zygote) when opened,
    counts each key's records in a queryable state (so the machine's query host starts at
    the first ack), and runs slowly so that the job is still running when the test kills
    the driver."""

    def __init__(self, markers: str, delay_s: float) -> None:
        self.markers, self.delay_s = markers, delay_s
        self.count: Any = None

    def open(self, runtime_context: Any) -> None:
        from streamstate.runtime.subtask_host import host_dir

        _mark(self.markers, f"host-{os.getpid()}", os.getpid(), host_dir())
        descriptor = ValueStateDescriptor("count", Types.LONG())
        descriptor.set_queryable("counts")
        self.count = runtime_context.get_state(descriptor)

    def process_element(self, value: Any, ctx: Any) -> Any:
        time.sleep(self.delay_s)
        self.count.update((self.count.value() or 0) + 1)
        yield value


class RecordsQueryHost(JobObserver):
    """On the driver: leaves ``<markers>/query-<pid>`` once this machine's query host of
    the job runs (it serves the ``counts`` state from the executor)."""

    def __init__(self, markers: str) -> None:
        self.markers = markers

    def on_epoch(self, job_id: str, stats: Any) -> None:
        from streamstate.runtime.queryable.query_host import query_host_pid

        pid = query_host_pid(job_id)
        if pid is not None and not os.path.exists(os.path.join(self.markers, f"query-{pid}")):
            _mark(self.markers, f"query-{pid}", pid)


def pids(markers: str, delay_s: str) -> None:
    spark = session()
    env = environment(spark, conf={"execution.epoch.max-records": "10"})
    env.add_job_observer(RecordsQueryHost(markers))
    sink = CollectSink()
    (
        env.from_collection([(f"k{i % 5}", i) for i in range(100)])
        .key_by(lambda v: v[0], key_type=Types.STRING())
        .process(RecordsItsProcess(markers, float(delay_s)))
        .uid("records")
        .sink_to(sink)
    )
    env.execute("host-pids")
    report(records=len(sink.get_results()))


# -- unsafe: a runtime directory someone else could have been in first ----------------------


def unsafe(chk: str) -> None:
    spark = session()
    env = environment(spark)
    env.get_checkpoint_config().set_checkpoint_storage_dir(chk)
    sink = CollectSink()
    env.from_collection(list(range(20))).key_by(lambda v: v % 2).map(lambda v: v).sink_to(sink)
    try:
        env.execute("unsafe-runtime-dir")
    except Exception as e:  # noqa: BLE001 - what the user sees is the result
        report(error=[c.__name__ for c in type(e).__mro__], message=str(e))
        return
    report(error=None, records=len(sink.get_results()))


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    apps = {"files": files, "source": source, "helper": helper, "pids": pids, "unsafe": unsafe}
    apps[mode](*args)
