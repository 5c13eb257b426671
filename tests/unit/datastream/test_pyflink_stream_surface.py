"""DataStream / environment methods added for PyFlink parity, user metrics
(streamstate.metrics) and the window serializers, with their semantics."""

from __future__ import annotations

import io

import pytest

from streamstate.common import Types
from streamstate.datastream import (
    CountWindow,
    GlobalWindow,
    KeyedProcessFunction,
    MapFunction,
    Partitioner,
    SlotSharingGroup,
    TimeWindow,
)
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.datastream.window import (
    CountWindowSerializer,
    GlobalWindowSerializer,
    TimeWindowSerializer,
)
from streamstate.errors import ConfigurationError, UnsupportedFeatureError
from streamstate.metrics import Counter, MetricGroup
from tests.support.envs import make_env


class _Mod(Partitioner):
    def partition(self, key, num_partitions):
        return key % num_partitions


class _TagSubtask(MapFunction):
    def open(self, runtime_context):
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return (self.index, value)


def test_partition_custom_sends_each_record_to_the_partitioners_subtask():
    env = make_env(parallelism=3)
    out = (
        env.from_collection(list(range(12)))
        .partition_custom(_Mod(), lambda v: v)
        .map(_TagSubtask())
        .execute_and_collect()
    )
    with out as results:
        pairs = list(results)
    assert sorted(v for _, v in pairs) == list(range(12))
    assert all(index == v % 3 for index, v in pairs)

    env = make_env(parallelism=2)
    ds = env.from_collection([1]).partition_custom(lambda k, n: n, lambda v: v).map(lambda v: v)
    with pytest.raises(Exception, match="must return an int in"):
        ds.execute_and_collect(limit=1)


def test_project_keeps_fields_in_order_and_declares_the_tuple_type():
    env = make_env(parallelism=1)
    ds = env.from_collection(
        [(1, "a", 2.0), (2, "b", 3.0)], Types.TUPLE([Types.INT(), Types.STRING(), Types.FLOAT()])
    )
    projected = ds.project(2, 0)
    assert projected.get_type() == Types.TUPLE([Types.FLOAT(), Types.INT()])
    assert projected.execute_and_collect(limit=2) == [(2.0, 1), (3.0, 2)]
    with pytest.raises(ConfigurationError, match="Only Tuple DataStreams"):
        make_env().from_collection(["x"], Types.STRING()).project(0)
    keyed = make_env(parallelism=1).from_collection([(1, "a")]).key_by(lambda v: v[0])
    assert keyed.project(1).execute_and_collect(limit=1) == [("a",)]


def test_operator_hints_are_kept_and_keyed_streams_refuse_them():
    env = make_env(parallelism=2)
    ssg = SlotSharingGroup.builder("g").build()
    ds = (
        env.from_collection([1, 2, 3])
        .map(lambda v: v + 1)
        .slot_sharing_group(ssg)
        .set_description("adds one")
        .disable_chaining()
        .start_new_chain()
        .set_buffer_timeout(5)
    )
    assert ds._t.hints == {
        "slot_sharing_group": "g",
        "description": "adds one",
        "chaining": "head",
        "buffer_timeout": 5,
    }
    assert ds.get_execution_config() is env.get_config()
    assert ds.get_type() == Types.PICKLED_BYTE_ARRAY()
    single = ds.force_non_parallel()
    assert single._t.parallelism == 1 and single._t.max_parallelism == 1
    assert sorted(ds.rescale().map(lambda v: v).execute_and_collect()) == [2, 3, 4]
    keyed = env.from_collection([1]).key_by(lambda v: v)
    for call in (
        lambda: keyed.slot_sharing_group("g"),
        keyed.disable_chaining,
        keyed.start_new_chain,
        keyed.force_non_parallel,
        lambda: keyed.set_max_parallelism(8),
        lambda: keyed.set_uid_hash("x"),
        keyed.get_name,
        keyed.cache,
        keyed.rescale,
        lambda: keyed.partition_custom(_Mod(), lambda v: v),
    ):
        with pytest.raises(ConfigurationError, match="KeyedStream"):
            call()
    with pytest.raises(UnsupportedFeatureError, match="removed"):
        ds.iterate()


def test_environment_defaults_and_accepted_switches(tmp_path):
    env = make_env()
    env.set_default_savepoint_directory(str(tmp_path))
    assert env.get_default_savepoint_directory() == str(tmp_path)
    assert env.get_configuration().get_string("execution.checkpointing.savepoint-dir") == str(
        tmp_path
    )
    env.get_config().set_parallelism(-1)  # back to the default
    env.set_default_local_parallelism(3)
    assert env.get_parallelism() == 3 and env.get_default_local_parallelism() == 3
    assert env.is_chaining_enabled()
    env.disable_operator_chaining().set_buffer_timeout(20)
    assert not env.is_chaining_enabled() and env.get_buffer_timeout() == 20
    assert env.get_checkpointing_consistency_mode() == env.get_checkpointing_mode()
    env.register_slot_sharing_group(SlotSharingGroup.builder("g").build())
    assert list(env.get_slot_sharing_groups()) == ["g"]
    env.from_collection([1]).print()
    env.close()
    with pytest.raises(ConfigurationError, match="no sinks"):
        env.execute()


class _Counting(KeyedProcessFunction):
    def open(self, runtime_context):
        group = runtime_context.get_metrics_group().add_group("words")
        self.seen = group.counter("seen")
        self.lengths = group.distribution("length")
        self.events = group.meter("events")
        group.gauge("one", lambda: 1)

    def process_element(self, value, ctx):
        self.seen.inc()
        self.lengths.update(len(value))
        self.events.mark_event(2)
        yield value


def test_user_metrics_are_summed_over_subtasks_and_epochs():
    env = make_env(parallelism=2, max_records=2)
    sink = CollectSink()
    words = ["a", "bb", "ccc", "dd", "e"]
    env.from_collection(words).key_by(lambda w: w).process(_Counting()).name("count").sink_to(sink)
    acc = env.execute().get_all_accumulator_results()
    assert acc["metrics.count.words.seen"] == 5
    assert acc["metrics.count.words.events"] == 10
    dist = acc["metrics.count.words.length"]
    assert dist["count"] == 5 and dist["sum"] == 9 and dist["min"] == 1 and dist["max"] == 3
    assert acc["metrics.count.words.one"] in (1, 2)  # one per subtask that saw a record


def test_metric_group_reuses_metrics_by_name_and_refuses_kind_changes():
    from streamstate.api.metrics import MetricRegistry

    group = MetricGroup(MetricRegistry(), ("op",))
    c = group.counter("n")
    assert isinstance(c, Counter) and group.counter("n") is c
    c.inc(3)
    c.dec()
    assert c.get_count() == 2
    assert group.add_group("k", "v").get_metric_identifier("x") == "op.k.v.x"
    with pytest.raises(ConfigurationError, match="already a Counter"):
        group.meter("n")


@pytest.mark.parametrize(
    "serializer, window, size",
    [
        (TimeWindowSerializer(), TimeWindow(-5, 1_700_000_000_000), 16),
        (CountWindowSerializer(), CountWindow(42), 8),
        (GlobalWindowSerializer(), GlobalWindow.get(), 1),
    ],
)
def test_window_serializers_use_flinks_layout(serializer, window, size):
    data = serializer.serialize(window)
    assert len(data) == size
    assert serializer.deserialize(data) == window
    stream = io.BytesIO()
    serializer.serialize(window, stream)
    stream.seek(0)
    assert serializer.deserialize(stream) == window
    with pytest.raises(ValueError):
        serializer.deserialize(data[:-1] if size > 1 else b"")


def test_time_window_bytes_are_two_big_endian_longs():
    assert TimeWindowSerializer().serialize(TimeWindow(1, 2)) == (1).to_bytes(8, "big") + (
        2
    ).to_bytes(8, "big")


def test_partition_custom_keeps_event_timestamps_for_windows():
    from streamstate.common import Time, WatermarkStrategy
    from streamstate.datastream import TumblingEventTimeWindows

    env = make_env(parallelism=2, max_records=4)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        lambda v, t: v * 1000
    )
    sums = (
        env.from_collection(list(range(10)))
        .assign_timestamps_and_watermarks(strategy)
        .partition_custom(_Mod(), lambda v: v)
        .map(lambda v: ("all", v))
        .key_by(lambda p: p[0])
        .window(TumblingEventTimeWindows.of(Time.seconds(5)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .execute_and_collect()
    )
    with sums as results:
        assert sorted(results) == [("all", 0 + 1 + 2 + 3 + 4), ("all", 5 + 6 + 7 + 8 + 9)]
