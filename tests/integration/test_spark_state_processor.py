"""The State Processor API on Spark: savepoints and checkpoints of every backend and format
read as DataFrames and compared with the job's own view; a job's state bootstrapped from
a DataFrame and the job started from it; operator and window state; an existing
savepoint changed and restored.

Savepoints to read are taken of in-process jobs (fast); every read, every write and the
bootstrapped job run on the session's ``local[2]`` Spark.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from streamstate.common import Duration, SavepointFormatType, Types
from streamstate.datastream import EmbeddedRocksDBStateBackend, HashMapStateBackend
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import MapStateDescriptor
from streamstate.datastream.window import SlidingEventTimeWindows, TumblingEventTimeWindows
from streamstate.errors import ConfigurationError, StateMigrationError
from streamstate.runtime.checkpoint.storage import load_restore_point
from streamstate.runtime.state_reader import list_checkpoints, read_keyed_state
from streamstate.state_processor import (
    OperatorTransformation,
    SavepointReader,
    SavepointWriter,
)
from tests.integration import state_processor_jobs as J
from tests.support import envs
from tests.support.backends import fast_local_dir
from tests.support.savepoints import stop_with_savepoint, trigger_savepoint

pytestmark = pytest.mark.spark

CHECKPOINTED = {
    "execution.checkpointing.interval": "1",
    "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Savepoints and retained checkpoints of the running-sum job, per backend and format."""
    tmp = tmp_path_factory.mktemp("sources")
    out = {}
    for backend, fmt in [
        ("hashmap", SavepointFormatType.CANONICAL),
        ("rocksdb", SavepointFormatType.CANONICAL),
        ("rocksdb", SavepointFormatType.NATIVE),
    ]:
        env = J.sum_job(backend=backend)
        out[f"{backend}-{fmt.value.lower()}"] = trigger_savepoint(
            env, tmp / "sp", at=4, format_type=fmt
        )
    for backend, incremental in [("hashmap", "false"), ("rocksdb", "true")]:
        chk = tmp / f"chk-{backend}"
        env = J.sum_job(
            backend=backend,
            **CHECKPOINTED,
            **{"execution.checkpointing.dir": str(chk), "state.backend.incremental": incremental},
        )
        env.execute("checkpointed")
        out[f"{backend}-checkpoint"] = [c for c in list_checkpoints(str(chk)) if c.valid][-1].path
    return out


def job_view(path: str) -> dict[str, tuple[int, int, list[int]]]:
    """The job's own view of its state (state_reader, on the driver)."""
    totals = read_keyed_state(path, "sum", J.TOTAL)
    seen = read_keyed_state(path, "sum", J.SEEN)
    timers = read_keyed_state(path, "sum", MapStateDescriptor("_timer_state/event_user-timers"))
    return {k: (totals[k], len(seen[k]), sorted(ts for _, ts in timers.get(k, {}))) for k in totals}


@pytest.mark.parametrize(
    ("source", "reader_backend"),
    [
        ("hashmap-canonical", "hashmap"),
        ("rocksdb-canonical", "rocksdb"),  # canonical snapshots restored into RocksDB
        ("rocksdb-native", "hashmap"),  # native files always open with RocksDB
        ("hashmap-checkpoint", "hashmap"),
        ("rocksdb-checkpoint", "hashmap"),  # incremental: shared SST files
    ],
)
def test_read_keyed_state_equals_the_jobs_own_view(spark, sources, source, reader_backend):
    path = sources[source]
    backend: Any = HashMapStateBackend()
    if reader_backend == "rocksdb":
        backend = EmbeddedRocksDBStateBackend()
        backend.set_db_storage_paths(fast_local_dir())
    df = SavepointReader.read(spark, path, backend).read_keyed_state(
        "sum", J.SumReader(), output_type=J.SUM_ROW
    )
    assert df.columns == ["key", "total", "seen", "timers"]
    assert df.rdd.getNumPartitions() >= 2  # one task per key-group range, not the driver
    rows = df.collect()
    got = {r.key: (r.total, r.seen, r.timers) for r in rows}
    assert len(got) == len(rows) == 23
    assert got == job_view(path)


def test_bootstrap_from_a_dataframe_then_the_job_starts_from_it(spark, tmp_path):
    accounts = [(f"acct-{i}", 100 * i) for i in range(40)] + [
        (f"acct-{i}", 7) for i in range(0, 40, 5)
    ]
    df = spark.createDataFrame(accounts, "id string, balance long").repartition(3)
    balances = (
        OperatorTransformation.bootstrap_with(df)
        .key_by(lambda row: row.id)
        .transform(J.BalanceBootstrapper())
    )
    path = (
        SavepointWriter.new_savepoint(spark, HashMapStateBackend(), 128)
        .with_operator("balances", balances)
        .write(str(tmp_path / "bootstrapped"))
    )
    md, _ = load_restore_point(path)  # a complete, signed savepoint: every file verifies
    assert md.is_savepoint and set(md.operator_states) == {"balances"}
    start = Counter()
    for acct, b in accounts:
        start[acct] += b
    # the job, on Spark, on another backend and parallelism, restored from the savepoint
    txns = [(f"acct-{(i * 3) % 40}", i) for i in range(120)]
    env = envs.make_env(
        3,
        spark=spark,
        max_records=40,
        restarts=0,
        conf={"state.backend.type": "rocksdb", "state.backend.rocksdb.localdir": fast_local_dir()},
    )
    env.set_restore_path(path)
    stream = env.from_collection(txns).key_by(lambda t: t[0]).process(J.ApplyTransactions())
    out = list(stream.uid("balances").execute_and_collect())
    balance = dict(start)
    expected = []
    for acct, amount in txns:
        balance[acct] += amount
        expected.append(f"{acct},{balance[acct]}")
    expected += [f"audit,{a},{b},{J.AUDIT_AT}" for a, b in balance.items()]
    assert sorted(out) == sorted(expected)


def test_operator_state_bootstrapped_and_read(spark, tmp_path):
    offsets = spark.createDataFrame([(i,) for i in range(30)], "offset long").repartition(3)
    rules = spark.createDataFrame([("cpu", 0.9), ("mem", 0.75)], "name string, threshold double")
    path = (
        SavepointWriter.new_savepoint(spark)
        .with_operator(
            "source",
            OperatorTransformation.bootstrap_with(offsets).transform(J.OffsetsBootstrapper()),
        )
        .with_operator(
            "union",
            OperatorTransformation.bootstrap_with(offsets).transform(J.OffsetsBootstrapper(True)),
        )
        .with_operator(
            "rules", OperatorTransformation.bootstrap_with(rules).transform(J.RulesBootstrapper())
        )
        .write(str(tmp_path / "ops"))
    )
    reader = SavepointReader.read(spark, path)
    md = reader.metadata
    assert md.operator_states["source"].parallelism == 3
    listed = reader.read_list_state("source", "offsets", Types.LONG())
    assert listed.columns == ["value"] and sorted(r.value for r in listed.collect()) == list(
        range(30)
    )
    union = reader.read_union_state("union", "offsets", Types.LONG()).collect()
    assert sorted(r.value for r in union) == list(range(30))
    b = reader.read_broadcast_state("rules", "rules", Types.STRING(), Types.DOUBLE())
    assert sorted(tuple(r) for r in b.distinct().collect()) == [("cpu", 0.9), ("mem", 0.75)]
    with pytest.raises(ConfigurationError, match="union state.*read_union_state"):
        reader.read_list_state("union", "offsets", Types.LONG())
    with pytest.raises(ConfigurationError, match="no operator state named 'nope'.*'offsets'"):
        reader.read_list_state("source", "nope", Types.LONG())
    with pytest.raises(ConfigurationError, match="has no keyed state"):
        reader.read_keyed_state("source", J.SumReader(), output_type=J.SUM_ROW)


def expected_windows(events: list[Any], size: int, slide: int, reduce: bool) -> list[Any]:
    windows: dict[tuple[str, int], list[int]] = {}
    for key, ts, v in events:
        last = ts - ts % slide
        for start in range(last, ts - size, -slide):
            windows.setdefault((key, start), []).append(v)
    return sorted(
        (k, s, s + size, [sum(vs)] if reduce else sorted(vs), [s + size - 1])
        for (k, s), vs in windows.items()
    )


def test_read_tumbling_and_sliding_windows(spark, tmp_path):
    sp = stop_with_savepoint(J.window_job(), tmp_path / "sp", at=3)
    md, _ = load_restore_point(sp)
    events = J.WINDOW_EVENTS[: 40 * int(md.properties["epoch"])]  # what the savepoint covers
    reader = SavepointReader.read(spark, sp)
    tumbling = reader.window(TumblingEventTimeWindows.of(Duration.of_millis(J.TUMBLE_MS))).reduce(
        "tumbling", J.Sum(), J.WindowContents(), output_type=J.WINDOW_ROW
    )
    assert sorted(tuple(r) for r in tumbling.collect()) == expected_windows(
        events, J.TUMBLE_MS, J.TUMBLE_MS, reduce=True
    )
    sliding = reader.window(
        SlidingEventTimeWindows.of(
            Duration.of_millis(J.SLIDE_SIZE_MS), Duration.of_millis(J.SLIDE_MS)
        )
    ).process("sliding", J.WindowContents(), output_type=J.WINDOW_ROW)
    assert sorted(tuple(r) for r in sliding.collect()) == expected_windows(
        events, J.SLIDE_SIZE_MS, J.SLIDE_MS, reduce=False
    )
    with pytest.raises(ConfigurationError, match="built with reduce"):
        reader.window(TumblingEventTimeWindows.of(Duration.of_millis(1000))).process(
            "tumbling", J.WindowContents(), output_type=J.WINDOW_ROW
        )


def test_change_an_existing_savepoint_and_restore_it(spark, tmp_path, sources):
    old = sources["hashmap-canonical"]
    accounts = spark.createDataFrame([("a", 1)], "id string, balance long")
    new = (
        SavepointWriter.from_existing_savepoint(spark, old)
        .change_operator_identifier("sum", "sum-v2")
        .with_operator(
            "balances",
            OperatorTransformation.bootstrap_with(accounts)
            .key_by(lambda r: r.id)
            .transform(J.BalanceBootstrapper()),
        )
        .write(str(tmp_path / "changed"))
    )
    assert job_view_of(new, "sum-v2") == job_view_of(old, "sum")
    assert not any(str(Path(old)) in p.read_text() for p in [Path(new) / "_metadata"])
    # the job under its new uid continues where the old savepoint was taken
    env = J.sum_job(uid="sum-v2")
    env.set_restore_path(new)
    with pytest.raises(StateMigrationError, match="'balances'"):
        env.execute("unclaimed")
    sink = CollectSink()
    unclaimed = {"execution.state-recovery.ignore-unclaimed-state": "true"}
    env = J.sum_job(uid="sum-v2", sink=sink, **unclaimed)
    env.set_restore_path(new)
    env.execute("restored")
    covered = 40 * int(load_restore_point(old)[0].properties["epoch"])
    assert Counter(sink.get_results()) == Counter(J.sum_outputs(J.DATA)[covered:])
    smaller = SavepointWriter.from_existing_savepoint(spark, new).remove_operator("balances")
    again = smaller.write(str(tmp_path / "smaller"))
    assert set(load_restore_point(again)[0].operator_states) == {"sum-v2"}


def job_view_of(path: str, uid: str) -> dict[str, int]:
    return read_keyed_state(path, uid, J.TOTAL)


def test_read_keyed_state_infers_the_schema_without_an_output_type(spark, sources):
    """As Spark's createDataFrame of rows without a schema: columns from the records'
    fields, their types inferred from the first rows (a declared type gives control)."""
    path = sources["hashmap-canonical"]
    reader = SavepointReader.read(spark, path)
    inferred = reader.read_keyed_state("sum", J.SumReader())
    assert inferred.columns == ["key", "total", "seen", "timers"]
    types = {f.name: f.dataType.simpleString() for f in inferred.schema.fields}
    assert types == {"key": "string", "total": "bigint", "seen": "bigint", "timers": "array<bigint>"}
    got = {r.key: (r.total, r.seen, r.timers) for r in inferred.collect()}
    assert got == job_view(path)
    # a non-record value is one column named `value`, as with a declared scalar type
    totals = reader.read_keyed_state("sum", J.TotalReader())
    assert totals.columns == ["value"]
    assert sorted(r.value for r in totals.collect()) == sorted(t for t, _, _ in got.values())
    with pytest.raises(ConfigurationError, match="no records.*output_type"):
        reader.read_keyed_state("sum", J.NothingReader()).collect()
