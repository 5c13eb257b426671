"""The State Processor API's runtime without Spark: planning a read (every error the
metadata reveals), reading and bootstrapping key-group ranges in-process, writing a
savepoint's directory and ``_metadata``, and the type mapping to Spark SQL."""

from __future__ import annotations

import datetime as dt
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from streamstate.common import Instant, Row, Types
from streamstate.datastream.connectors import CollectSink
from streamstate.errors import ConfigurationError, CorruptCheckpointError, StateMigrationError
from streamstate.runtime.checkpoint.metadata import OperatorSubtaskStates, SubtaskState
from streamstate.runtime.keygroups import compute_key_group_for_serialized_key
from streamstate.runtime.serializers.key import default_key_serializer
from streamstate.runtime.serializers.registry import serializer_for
from streamstate.runtime.state_processor.bootstrap import KeyedBootstrapSpec, bootstrap_keyed_range
from streamstate.runtime.state_processor.plan import (
    BackendSpec,
    backend_spec,
    load_savepoint,
    plan_keyed_read,
    split_ranges,
)
from streamstate.runtime.state_processor.reading import read_keyed_range
from streamstate.runtime.state_processor.writing import (
    check_max_parallelism,
    create_target,
    savepoint_metadata,
)
from streamstate.runtime.state_reader import read_keyed_state
from streamstate.spark.schema import from_spark, record_converter, spark_type, to_spark
from streamstate.state_processor import KeyedStateReaderFunction, SavepointWriter
from tests.integration import state_processor_jobs as J
from tests.support.savepoints import trigger_savepoint


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    return trigger_savepoint(J.sum_job(), tmp_path_factory.mktemp("sp"), at=4)


def read_all(spec: Any, function: Any) -> list[Any]:
    return [r for i in range(len(spec.ranges)) for r in read_keyed_range(spec, i, function)]


def test_ranges_cover_every_key_group_once() -> None:
    for max_p, n in [(128, 1), (128, 3), (7, 7), (4, 10)]:
        groups = [kg for r in split_ranges(max_p, n) for kg in r]
        assert groups == list(range(max_p))


def test_reading_key_group_ranges_equals_the_jobs_view(savepoint: str) -> None:
    md = load_savepoint(savepoint)
    spec = plan_keyed_read(md, "sum", BackendSpec(), None, 5)
    assert len(spec.ranges) == 5  # more tasks than the savepoint's 2 subtasks
    rows = read_all(spec, J.SumReader())
    assert {r["key"]: r["total"] for r in rows} == read_keyed_state(savepoint, "sum", J.TOTAL)
    assert all(r["timers"] for r in rows)


def test_a_read_fails_early_with_what_the_metadata_says(savepoint: str) -> None:
    md = load_savepoint(savepoint)
    with pytest.raises(ConfigurationError, match=r"no state for operator uid 'nope'.*'sum'"):
        plan_keyed_read(md, "nope", BackendSpec(), None, 2)
    with pytest.raises(StateMigrationError, match="key"):
        plan_keyed_read(md, "sum", BackendSpec(), serializer_for(Types.STRING()), 2)
    with pytest.raises(ConfigurationError, match="unknown state backend 'memory'.*hashmap"):
        backend_spec("memory")
    with pytest.raises(CorruptCheckpointError, match="_metadata"):
        load_savepoint(str(Path(savepoint).parent))


class MisspelledReader(KeyedStateReaderFunction):
    def open(self, ctx: Any) -> None:
        from streamstate.datastream.state import ValueStateDescriptor

        self.s = ctx.get_state(ValueStateDescriptor("totl"))

    def read_key(self, key: Any, ctx: Any, out: Any) -> None:
        out.collect(key)


def test_a_task_names_unknown_states_and_damaged_files(savepoint: str, tmp_path: Path) -> None:
    spec = plan_keyed_read(load_savepoint(savepoint), "sum", BackendSpec(), None, 1)
    with pytest.raises(ConfigurationError, match=r"no keyed state named 'totl'.*'total' \(value\)"):
        read_all(spec, MisspelledReader())
    copy = tmp_path / "copy"
    shutil.copytree(savepoint, copy)
    victim = copy / "sum-0-keyed"
    victim.write_bytes(victim.read_bytes()[:-5])
    spec = plan_keyed_read(load_savepoint(str(copy)), "sum", BackendSpec(), None, 1)
    with pytest.raises(CorruptCheckpointError, match="sum-0-keyed"):
        read_all(spec, J.SumReader())


def test_bootstrapped_ranges_restore_into_a_job(tmp_path: Path) -> None:
    """Bootstrap without Spark: the written directory is a savepoint a job restores."""
    target = create_target(str(tmp_path / "sp"))
    key_ser = default_key_serializer()
    spec = KeyedBootstrapSpec("sum", 128, split_ranges(128, 3), key_ser, BackendSpec(), target)
    rows = [Row(key=f"k{i}", balance=1000 * i) for i in range(23)]
    by_range: list[list[Any]] = [[] for _ in spec.ranges]
    for row in rows:
        kg = compute_key_group_for_serialized_key(key_ser.serialize(row.key), 128)
        by_range[next(i for i, r in enumerate(spec.ranges) if kg in r)].append((kg, row.key, row))

    class Totals(J.BalanceBootstrapper):
        def open(self, ctx: Any) -> None:
            self.balance = ctx.get_state(J.TOTAL)

    handles = [bootstrap_keyed_range(spec, i, Totals(), by_range[i]) for i in range(3)]
    subtasks = tuple(SubtaskState(keyed=(h,)) for h in handles)
    md = savepoint_metadata(None, {"sum": OperatorSubtaskStates(3, 128, subtasks)}, {}, set())
    target.store_metadata(md)
    assert '"path": "sum-0-keyed"' in (tmp_path / "sp" / "_metadata").read_text()  # relative
    sink = CollectSink()
    env = J.sum_job(sink=sink)
    env.set_restore_path(str(tmp_path / "sp"))
    env.execute("from-bootstrap")
    start = {r.key: r.balance for r in rows}
    expected = [(k, start[k] + t) for k, t in J.sum_outputs(J.DATA)]
    assert sorted(sink.get_results()) == sorted(expected)


def test_writer_checks_its_inputs(tmp_path: Path, savepoint: str) -> None:
    for bad in (0, 1 << 16, "128", True):
        with pytest.raises(ConfigurationError, match="max parallelism"):
            check_max_parallelism(bad)
    with pytest.raises(ConfigurationError, match="it is a savepoint"):
        create_target(savepoint)
    with pytest.raises(ConfigurationError, match="no operator"):
        SavepointWriter.new_savepoint(None).write(str(tmp_path / "empty"))
    assert not (tmp_path / "empty").exists()
    existing = SavepointWriter.from_existing_savepoint(None, savepoint)
    with pytest.raises(ConfigurationError, match=r"no operator 'nope'.*'sum'"):
        existing.remove_operator("nope")
    with pytest.raises(ConfigurationError, match="has no operator 'nope'"):
        existing.change_operator_identifier("nope", "x")
    existing.change_operator_identifier("sum", "x")
    with pytest.raises(ConfigurationError, match="'sum' is already renamed to 'x'"):
        existing.change_operator_identifier("sum", "y")
    existing.remove_operator("x")
    with pytest.raises(ConfigurationError, match="no operator"):
        existing.write(str(tmp_path / "none"))


def test_types_map_to_spark_sql_and_back() -> None:
    from pyspark.sql import types as T

    row = Types.ROW_NAMED(
        ["s", "n", "d", "when", "at", "tags", "m", "blob", "big"],
        [
            Types.STRING(),
            Types.LONG(),
            Types.SQL_DATE(),
            Types.SQL_TIMESTAMP(),
            Types.INSTANT(),
            Types.LIST(Types.INT()),
            Types.MAP(Types.STRING(), Types.DOUBLE()),
            Types.PICKLED_BYTE_ARRAY(),
            Types.BIG_INT(),
        ],
    )
    st = spark_type(row)
    assert [f.name for f in st.fields] == ["s", "n", "d", "when", "at", "tags", "m", "blob", "big"]
    assert isinstance(st["at"].dataType, T.TimestampType)
    assert isinstance(st["when"].dataType, T.TimestampNTZType)
    assert st["big"].dataType == T.DecimalType(38, 0)
    when = dt.datetime(2026, 1, 2, 3, 4, 5)
    value = Row(
        s="x",
        n=1,
        d=dt.date(2026, 1, 2),
        when=when,
        at=Instant.of_epoch_milli(0),
        tags=[1],
        m={"a": 0.5},
        blob={"any": "object"},
        big=10**30,
    )
    converted = record_converter(row)(value)
    assert converted[4] == dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert converted[8] == Decimal(10**30)
    assert record_converter(row)(tuple(value)) == converted  # positional records too
    assert record_converter(Types.LONG())(7) == (7,)  # non-record types: one column
    assert spark_type(Types.TUPLE([Types.INT(), Types.STRING()])).names == ["f0", "f1"]
    assert to_spark(Types.SQL_TIME())(dt.time(1, 2, 3)) == "01:02:03"
    nested = T.Row(id="a", inner=T.Row(x=1), xs=[T.Row(y=2)])
    back = from_spark(nested)
    assert back == Row(id="a", inner=Row(x=1), xs=[Row(y=2)]) and back.inner.x == 1
