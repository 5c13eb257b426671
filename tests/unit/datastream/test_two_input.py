"""connect(): plans with two-input operators and BROADCAST edges, co-operators end to end
on the in-process runner."""

from __future__ import annotations

import pytest

from streamstate.datastream import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
)
from streamstate.datastream.connectors import DiscardingSink
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.errors import ConfigurationError
from streamstate.runtime.graph import Partitioning
from tests.unit.runtime.test_executor_local import make_env, run_collect
from tests.unit.runtime.test_plan import plan_of


class Tag(CoMapFunction):
    def map1(self, value):
        return ("a", value)

    def map2(self, value):
        return ("b", value)


class Split(CoFlatMapFunction):
    def flat_map1(self, value):
        yield from value.split()

    def flat_map2(self, value):
        return [value, value]


class Sum2(KeyedCoProcessFunction):
    """Input 1 adds, input 2 multiplies: the result depends on both inputs sharing state."""

    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total"))

    def process_element1(self, value, ctx):
        self.total.update((self.total.value() or 0) + value[1])
        yield "add", ctx.get_current_key(), self.total.value()

    def process_element2(self, value, ctx):
        self.total.update((self.total.value() or 0) * value[1])
        yield "mul", ctx.get_current_key(), self.total.value()


def edge_list(stage):
    return sorted(
        (e.dest_stage, e.partitioning, e.input) for n in stage.nodes.values() for e in n.edges
    )


def test_connect_plan_has_a_two_input_stage_with_inputs_numbered():
    env = make_env(2)
    a = env.from_sequence(1, 4)
    b = env.from_sequence(5, 8)
    a.connect(b).map(Tag()).add_sink(DiscardingSink())
    plan = plan_of(env)
    assert len(plan.stages) == 3
    co = plan.stages[2]
    assert [n.name for n in co.nodes.values()] == ["Co-Map", "Discard"]
    assert edge_list(plan.stages[0]) == [(2, Partitioning.FORWARD, 0)]
    assert edge_list(plan.stages[1]) == [(2, Partitioning.FORWARD, 1)]
    assert co.input_partitioning2 is Partitioning.REBALANCE
    assert "two inputs" in plan.describe()


def test_keyed_connect_plan_and_broadcast_edges():
    env = make_env(3)
    a = env.from_sequence(1, 4).key_by(lambda v: v % 2)
    b = env.from_sequence(5, 8).key_by(lambda v: v % 2)
    a.connect(b).process(Sum2()).add_sink(DiscardingSink())
    env.from_sequence(1, 3).broadcast().map(lambda v: v).add_sink(DiscardingSink())
    plan = plan_of(env)
    co = next(s for s in plan.stages if s.input_partitioning2 is not None)
    assert co.input_partitioning is Partitioning.HASH
    assert co.input_partitioning2 is Partitioning.HASH
    assert any(n.keyed for n in co.nodes.values())
    assert any(
        e.partitioning is Partitioning.BROADCAST
        for s in plan.stages
        for n in s.nodes.values()
        for e in n.edges
    )


def test_keyed_and_non_keyed_connect_is_rejected():
    env = make_env(2)
    a = env.from_sequence(1, 4).key_by(lambda v: v)
    b = env.from_sequence(5, 8)
    with pytest.raises(ConfigurationError, match="key_by both"):
        a.connect(b).map(Tag())
    with pytest.raises(ConfigurationError, match="needs keyed inputs"):
        env.from_sequence(1, 2).connect(b).process(Sum2())


def test_co_map_and_co_flat_map_see_both_inputs():
    env = make_env(2, max_records=2)
    a = env.from_collection([1, 2, 3, 4, 5])
    b = env.from_collection([10, 20])
    out, _ = run_collect(a.connect(b).map(Tag()))
    assert sorted(out) == [("a", 1), ("a", 2), ("a", 3), ("a", 4), ("a", 5), ("b", 10), ("b", 20)]
    env = make_env(2, max_records=2)
    a = env.from_collection(["x y", "z"])
    b = env.from_collection(["w"])
    out, _ = run_collect(a.connect(b).flat_map(Split()))
    assert sorted(out) == ["w", "w", "x", "y", "z"]


def test_co_process_function_with_plain_context():
    class P(CoProcessFunction):
        def process_element1(self, value, ctx):
            yield value, ctx.timestamp()

        def process_element2(self, value, ctx):
            yield -value, ctx.timestamp()

    env = make_env(1)
    out, _ = run_collect(env.from_collection([1]).connect(env.from_collection([2])).process(P()))
    assert sorted(out) == [(-2, None), (1, None)]


def test_keyed_co_process_shares_keyed_state_across_inputs():
    # one epoch each: within an epoch the first input is processed before the second
    env = make_env(2, max_records=10)
    a = env.from_collection([("x", 1), ("y", 2), ("x", 3)]).key_by(lambda v: v[0])
    b = env.from_collection([("x", 10), ("y", 100)]).key_by(lambda v: v[0])
    out, _ = run_collect(a.connect(b).process(Sum2()))
    assert sorted(out) == sorted(
        [("add", "x", 1), ("add", "x", 4), ("add", "y", 2), ("mul", "x", 40), ("mul", "y", 200)]
    )


def test_connected_streams_key_by_then_map():
    class Count(CoMapFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n"))

        def map1(self, value):
            self.n.update((self.n.value() or 0) + 1)
            return value, self.n.value()

        def map2(self, value):
            self.n.update((self.n.value() or 0) + 1)
            return value, self.n.value()

    env = make_env(2, max_records=10)
    a = env.from_collection(["k", "j"])
    b = env.from_collection(["k"])
    out, _ = run_collect(a.connect(b).key_by(lambda v: v, lambda v: v).map(Count()))
    assert sorted(out) == [("j", 1), ("k", 1), ("k", 2)]


def test_broadcast_partitioning_sends_every_record_to_every_subtask():
    env = make_env(3, max_records=1)
    out, _ = run_collect(env.from_collection([1, 2]).broadcast().map(lambda v: v * 2))
    assert sorted(out) == [2, 2, 2, 4, 4, 4]
