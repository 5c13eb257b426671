"""The PyFlink-parity operators on a real local[2] SparkSession: partition_custom, async
I/O, user metrics and typed from_collection in one job."""

from __future__ import annotations

import asyncio

import pytest

from streamstate.common import Time, Types
from streamstate.datastream import (
    AsyncDataStream,
    AsyncFunction,
    KeyedProcessFunction,
    MapFunction,
    Partitioner,
)
from streamstate.datastream.connectors import CollectSink
from tests.integration.jobs import make_env

pytestmark = pytest.mark.spark


class _ByValue(Partitioner):
    def partition(self, key, num_partitions):
        return key % num_partitions


class _Tag(MapFunction):
    def open(self, runtime_context):
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return (self.index, value)


class _Lookup(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(0.001)
        index, v = value
        return [(index, v, v * 10)]


class _Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_metrics_group().counter("seen")

    def process_element(self, value, ctx):
        self.seen.inc()
        yield value


def test_partition_custom_async_io_and_metrics_on_spark(spark):
    env = make_env(spark, epoch_records=5)
    sink = CollectSink()
    ds = (
        env.from_collection(list(range(20)), Types.LONG())
        .partition_custom(_ByValue(), lambda v: v)
        .map(_Tag())
    )
    looked_up = AsyncDataStream.ordered_wait(ds, _Lookup(), Time.seconds(10), capacity=4)
    looked_up.key_by(lambda t: t[1] % 2).process(_Count()).name("count").sink_to(sink)
    acc = env.execute("parity-on-spark").get_all_accumulator_results()
    out = sorted(sink.get_results(), key=lambda t: t[1])
    assert [t[1] for t in out] == list(range(20))
    assert all(index == v % 2 and ten == v * 10 for index, v, ten in out)
    assert acc["metrics.count.seen"] == 20
