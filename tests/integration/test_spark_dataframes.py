"""Spark DataFrames in and out: env.from_dataframe and ds.to_dataframe on real Spark."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from streamstate.common import Row, Types
from streamstate.datastream import CheckpointingMode
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.jobs import CountPerKey, make_env
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()


@pytest.fixture(scope="module")
def sales(spark):
    rows = [(i, f"k{(i * 7919) % 13}", float(i) / 4) for i in range(300)]
    return spark.createDataFrame(rows, "id long, key string, amount double").repartition(4, "id")


def test_rows_and_type_info_follow_the_dataframe_schema(spark, sales):
    env = make_env(spark)
    ds = env.from_dataframe(sales)
    assert ds._t.output_type == Types.ROW_NAMED(
        ["id", "key", "amount"], [Types.LONG(), Types.STRING(), Types.DOUBLE()]
    )
    out = list(ds.execute_and_collect("df-in"))
    assert all(isinstance(r, Row) for r in out)
    assert sorted((r.id, r.key, r.amount) for r in out) == sorted(tuple(r) for r in sales.collect())


def test_nested_and_decimal_types(spark):
    from streamstate.spark.dataframes import type_info_of

    df = spark.createDataFrame(
        [(1, Decimal("1.50"), dt.date(2024, 1, 2), [1, 2], {"a": 1}, (3, "x"))],
        "id int, price decimal(10,2), day date, xs array<int>, m map<string,int>, "
        "s struct<n:int,t:string>",
    )
    ti = type_info_of(df.schema)
    assert ti == Types.ROW_NAMED(
        ["id", "price", "day", "xs", "m", "s"],
        [
            Types.INT(),
            Types.BIG_DEC(),
            Types.SQL_DATE(),
            Types.LIST(Types.INT()),
            Types.MAP(Types.STRING(), Types.INT()),
            Types.ROW_NAMED(["n", "t"], [Types.INT(), Types.STRING()]),
        ],
    )
    (r,) = make_env(spark).from_dataframe(df).execute_and_collect("nested")
    assert r.price == Decimal("1.50") and r.day == dt.date(2024, 1, 2)
    assert r.xs == [1, 2] and r.m == {"a": 1} and r.s.t == "x" and r.s.n == 3


def _count_job(spark, sales, tmp_path, name, failure=None):
    env = make_env(spark, epoch_records=20)
    env.enable_checkpointing(2500, CheckpointingMode.EXACTLY_ONCE)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / name))
    ds = env.from_dataframe(sales).map(lambda r: (r.key, r.id))
    if failure is not None:
        ds = ds.map(failure).name("fail-once")
    return list(ds.key_by(lambda v: v[0]).process(CountPerKey()).execute_and_collect(name))


def test_replay_after_failure_reads_the_same_rows(spark, sales, tmp_path):
    with use_default_clock(TickingClock(start_ms=1000)):
        base = _count_job(spark, sales, tmp_path, "base")
    with use_default_clock(TickingClock(start_ms=1000)):
        fail = FailOnce(str(tmp_path), epoch=5, subtask=1, after_records=3)
        faulty = _count_job(spark, sales, tmp_path, "faulty", fail)
    assert (tmp_path / "fail-once.failed").exists()  # the failure happened
    assert sorted(faulty) == sorted(base)
    assert len(base) == 300


def test_to_dataframe_with_declared_and_inferred_schema(spark, sales):
    env = make_env(spark)
    df = env.from_dataframe(sales).filter(lambda r: r.id < 10).to_dataframe()
    assert df.columns == ["id", "key", "amount"]
    assert sorted(r.id for r in df.collect()) == list(range(10))

    env = make_env(spark)
    typed = (
        env.from_collection([("a", 1), ("b", 2)])
        .map(lambda v: (v[0], v[1] * 10), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .to_dataframe()
    )
    assert typed.schema.simpleString() == "struct<f0:string,f1:int>"
    assert sorted(tuple(r) for r in typed.collect()) == [("a", 10), ("b", 20)]

    env = make_env(spark)
    inferred = env.from_collection([Row(name="a", n=1)]).to_dataframe()
    assert inferred.columns == ["name", "n"] and inferred.collect()[0].n == 1


def test_to_dataframe_of_an_unbounded_stream_is_refused(spark):
    from streamstate.errors import ConfigurationError

    env = make_env(spark)
    ds = env.from_source(_Unbounded(), source_name="forever")
    with pytest.raises(ConfigurationError, match="bounded"):
        ds.to_dataframe()


class _Unbounded:
    @staticmethod
    def _runtime_source():
        from streamstate.connectors.sequence import SequenceSource

        src = SequenceSource(0, 10)
        src.bounded = False
        return src


def test_to_dataframe_after_a_failure_holds_each_record_once(spark, sales, tmp_path):
    env = make_env(spark, epoch_records=20)
    env.enable_checkpointing(2500, CheckpointingMode.EXACTLY_ONCE)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    fail = FailOnce(str(tmp_path), epoch=4, subtask=0, after_records=2)
    with use_default_clock(TickingClock(start_ms=1000)):
        df = env.from_dataframe(sales).map(fail).to_dataframe("to-df")
    assert fail.fired
    assert df.columns == ["id", "key", "amount"]  # inferred from the Rows
    assert sorted(r.id for r in df.collect()) == list(range(300))
