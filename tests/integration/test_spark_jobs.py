"""End-to-end jobs on a real local[2] SparkSession."""

from __future__ import annotations

from collections import Counter

import pytest

from streamstate.common import Types
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import ExternalizedCheckpointCleanup, KeyedProcessFunction
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from streamstate.errors import JobExecutionError, KeySerializationError
from streamstate.runtime.state_reader import read_keyed_state
from tests.integration.jobs import count_job, final_counts, make_env, records
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()


def test_keyed_count_on_spark(spark, tmp_path):
    data = records(600, 37)
    env = make_env(spark)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(
        ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    )
    sink = count_job(env, data)
    result = env.execute("count")
    out = sink.get_results()
    assert len(out) == len(data)
    expected = Counter(k for k, _ in data)
    assert final_counts(out) == dict(expected)
    # per key, the counts are exactly 1..n (state is scoped to the key, updated once per record)
    for k, n in expected.items():
        assert sorted(c for kk, c in out if kk == k) == list(range(1, n + 1))
    acc = result.get_all_accumulator_results()
    assert acc["epochs"] >= 12 and acc["checkpoints"] >= 12
    # the final checkpoint holds the same state, readable with the state reader
    state = read_keyed_state(
        acc["latest-checkpoint"], "counter", ValueStateDescriptor("count", Types.LONG())
    )
    assert state == dict(expected)


class AllPrimitives(KeyedProcessFunction):
    def open(self, ctx):
        self.items = ctx.get_list_state(ListStateDescriptor("items", Types.INT()))
        self.seen = ctx.get_map_state(MapStateDescriptor("seen", Types.INT(), Types.LONG()))
        self.total = ctx.get_reducing_state(
            ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG())
        )

    def process_element(self, value, ctx):
        k, v = value
        self.items.add(v)
        self.seen[v] = (self.seen.get(v) or 0) + 1
        self.total.add(v)
        yield (
            k,
            sorted(self.items.get()),
            dict(self.seen.items()),
            self.total.get(),
            ctx.get_current_key(),
        )


def test_list_map_reducing_state_on_spark(spark):
    data = [("a", 1), ("b", 2), ("a", 3), ("a", 1), ("b", 5)] * 20
    env = make_env(spark, epoch_records=7)
    env.enable_checkpointing(1)
    out = list(
        env.from_collection(data)
        .key_by(lambda v: v[0])
        .process(AllPrimitives())
        .execute_and_collect()
    )
    last = {}
    for k, items, seen, total, cur in out:
        assert k == cur
        last[k] = (items, seen, total)
    assert last["a"] == (sorted([1, 3, 1] * 20), {1: 40, 3: 20}, 100)
    assert last["b"] == (sorted([2, 5] * 20), {2: 20, 5: 20}, 140)


def test_reduce_sum_union_rebalance_on_spark(spark):
    env = make_env(spark, epoch_records=10)
    a = env.from_collection([("x", i) for i in range(30)])
    b = env.from_sequence(0, 29).map(lambda i: ("y", i))
    ds = a.union(b).rebalance().map(lambda v: (v[0], v[1] * 2)).key_by(lambda v: v[0]).sum(1)
    out = list(ds.execute_and_collect())
    assert final_counts(out) == {"x": 2 * sum(range(30)), "y": 2 * sum(range(30))}
    assert len(out) == 60


def test_user_error_fails_the_job_with_its_traceback(spark):
    env = make_env(spark, epoch_records=10)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))

    def boom(v):
        if v[0] == "k4":
            raise ValueError("sensor k4 is on fire")
        return v

    sink = CollectSink()
    env.from_collection([(f"k{i}", i % 3) for i in range(20)]).map(boom).sink_to(sink)
    with pytest.raises(JobExecutionError) as ei:
        env.execute("boom")
    text = str(ei.value)
    assert "sensor k4 is on fire" in text and "ValueError" in text
    assert "boom" in text  # the user's frame is in the traceback
    assert "restart strategy" in text


def test_typed_error_crosses_the_jvm(spark):
    env = make_env(spark, epoch_records=10)
    env.set_restart_strategy(RestartStrategies.no_restart())
    sink = CollectSink()
    env.from_collection([("a", 1)]).key_by(lambda v: v[0], key_type=Types.INT()).process(
        AllPrimitives()
    ).sink_to(sink)
    with pytest.raises(JobExecutionError) as ei:
        env.execute("bad key")
    assert isinstance(ei.value.__cause__, KeySerializationError)
    assert "cannot be serialized" in str(ei.value.__cause__)
