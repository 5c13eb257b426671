"""RuntimeContext as PyFlink's (task name, indexes, attempt number, metric group, job
parameters); the function classes and plain callables alike; every Types.* value
conversion of from_collection(data, type_info)."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from streamstate.common import Instant, Row, Types
from streamstate.datastream import (
    FilterFunction,
    FlatMapFunction,
    KeySelector,
    MapFunction,
    ReduceFunction,
)
from streamstate.errors import OutputTypeError
from streamstate.testing import FailOnce
from tests.support.envs import make_env


class _Describe(MapFunction):
    def open(self, runtime_context):
        self.ctx = runtime_context

    def map(self, value):
        c = self.ctx
        return (
            c.get_task_name(),
            c.get_task_name_with_subtasks(),
            c.get_index_of_this_subtask(),
            c.get_number_of_parallel_subtasks(),
            c.get_max_number_of_parallel_subtasks(),
            c.get_attempt_number(),
            c.get_job_parameter("region", "none"),
            c.get_metrics_group().get_metric_identifier("n"),
        )


def test_runtime_context_describes_the_subtask(tmp_path):
    env = make_env(parallelism=2, restarts=1, max_records=2)
    env.set_max_parallelism(16)
    env.get_config().set_global_job_parameters({"region": "eu"})
    out = (
        env.from_collection(list(range(6)))
        .rebalance()
        .map(FailOnce(str(tmp_path), epoch=1, subtask=1))
        .map(_Describe())
        .name("describe")
        .execute_and_collect()
    )
    with out as results:
        rows = list(results)
    assert len(rows) == 6
    for name, with_subtasks, index, p, mp, attempt, region, metric in rows:
        assert name == "describe" and p == 2 and mp == 16 and region == "eu"
        assert with_subtasks == f"describe ({index + 1}/2)"
        assert metric == "describe.n"
        assert attempt == 1  # the failure in epoch 1 restarted the job once (first: 0)
    assert {r[2] for r in rows} == {0, 1}


class _Double(MapFunction):
    def map(self, value):
        return value * 2


class _Split(FlatMapFunction):
    def flat_map(self, value):
        yield value
        yield value + 100


class _Even(FilterFunction):
    def filter(self, value):
        return value % 2 == 0


class _Parity(KeySelector):
    def get_key(self, value):
        return value % 3


class _Sum(ReduceFunction):
    def reduce(self, value1, value2):
        return value1 + value2


def _pipeline(m, f, fl, k, r):
    env = make_env(parallelism=2)
    ds = env.from_collection(list(range(10))).map(m).flat_map(f).filter(fl)
    return sorted(ds.key_by(k).reduce(r).execute_and_collect())


def test_function_classes_and_plain_callables_give_the_same_results():
    with_classes = _pipeline(_Double(), _Split(), _Even(), _Parity(), _Sum())
    with_callables = _pipeline(
        lambda v: v * 2,
        lambda v: [v, v + 100],
        lambda v: v % 2 == 0,
        lambda v: v % 3,
        lambda a, b: a + b,
    )
    assert with_classes == with_callables and len(with_classes) == 20


TYPED = [
    (Types.BOOLEAN(), [True, False], [True, False]),
    (Types.BYTE(), [-128, 127], [-128, 127]),
    (Types.SHORT(), [-(2**15)], [-(2**15)]),
    (Types.INT(), [2**31 - 1], [2**31 - 1]),
    (Types.LONG(), [2**63 - 1], [2**63 - 1]),
    (Types.FLOAT(), [0.1], [0.10000000149011612]),
    (Types.DOUBLE(), [0.1], [0.1]),
    (Types.STRING(), ["héllo"], ["héllo"]),
    (Types.CHAR(), ["c"], ["c"]),
    (Types.BIG_INT(), [10**30], [10**30]),
    (Types.BIG_DEC(), [Decimal("1.50")], [Decimal("1.50")]),
    (Types.SQL_DATE(), [datetime.date(2024, 2, 29)], [datetime.date(2024, 2, 29)]),
    (Types.SQL_TIME(), [datetime.time(23, 59, 1)], [datetime.time(23, 59, 1)]),
    (
        Types.SQL_TIMESTAMP(),
        [datetime.datetime(2024, 1, 2, 3, 4, 5, 123456)],
        [datetime.datetime(2024, 1, 2, 3, 4, 5, 123456)],
    ),
    (Types.INSTANT(), [Instant.of_epoch_milli(1500)], [Instant.of_epoch_milli(1500)]),
    (Types.PRIMITIVE_ARRAY(Types.INT()), [[1, 2]], [[1, 2]]),
    (Types.PRIMITIVE_ARRAY(Types.BYTE()), [b"ab"], [b"ab"]),
    (Types.BASIC_ARRAY(Types.STRING()), [["a", None]], [["a", None]]),
    (Types.OBJECT_ARRAY(Types.STRING()), [["x"]], [["x"]]),
    (Types.LIST(Types.LONG()), [[1, 2]], [[1, 2]]),
    (Types.MAP(Types.STRING(), Types.INT()), [{"a": 1}], [{"a": 1}]),
    (Types.TUPLE([Types.INT(), Types.STRING()]), [(1, "a")], [(1, "a")]),
    (Types.ROW([Types.INT()]), [(1,)], [Row(f0=1)]),  # PyFlink names Types.ROW fields f0..
    (Types.ROW_NAMED(["a", "b"], [Types.INT(), Types.STRING()]), [(1, "x")], [Row(a=1, b="x")]),
    (Types.PICKLED_BYTE_ARRAY(), [{1, 2}], [{1, 2}]),
]


@pytest.mark.parametrize("type_info, values, expected", TYPED, ids=[str(t[0]) for t in TYPED])
def test_from_collection_converts_values_as_pyflink(type_info, values, expected):
    env = make_env(parallelism=1)
    ds = env.from_collection(values, type_info)
    assert ds.get_type() == type_info
    assert ds.execute_and_collect(limit=len(values)) == expected


@pytest.mark.parametrize(
    "type_info, value",
    [(Types.INT(), 2**31), (Types.BYTE(), 128), (Types.STRING(), 5), (Types.LONG(), 1.5)],
)
def test_from_collection_refuses_values_that_do_not_fit(type_info, value):
    with pytest.raises(OutputTypeError, match="element 0"):
        make_env().from_collection([value], type_info)
