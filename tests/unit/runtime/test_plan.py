"""Plan building: operator chaining into stages, shuffles between them, uids."""

from __future__ import annotations

import pytest

from streamstate.datastream import DataStream, KeyedProcessFunction, StreamExecutionEnvironment
from streamstate.datastream.connectors import DiscardingSink
from streamstate.errors import ConfigurationError
from streamstate.runtime.graph import (
    ExecutionPlan,
    Partitioning,
    Transformation,
    TransformationKind,
    build_plan,
)
from tests.support import envs


class Passthrough(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value


make_env = envs.make_env


def plan_of(env: StreamExecutionEnvironment) -> ExecutionPlan:
    return build_plan(env._sinks, env.get_parallelism(), env._max_parallelism)


def names(stage) -> list[str]:
    return [n.name for n in stage.nodes.values()]


def edges(stage) -> list[tuple[int, Partitioning]]:
    return [(e.dest_stage, e.partitioning) for n in stage.nodes.values() for e in n.edges]


def test_map_chains_into_source_stage_when_parallelism_equal():
    env = make_env(2)
    env.from_sequence(1, 10).map(lambda v: v).name("m").filter(bool).name("f").add_sink(
        DiscardingSink()
    )
    plan = plan_of(env)
    assert len(plan.stages) == 1
    st = plan.stages[0]
    assert st.is_source and st.parallelism == 2
    assert names(st) == ["Sequence Source", "m", "f", "Discard"]
    assert st.input_partitioning is None and st.upstream == []
    # the chain is source -> m -> f -> sink, each node feeding the next one
    chain = list(st.nodes.values())
    for a, b in zip(chain, chain[1:], strict=False):
        assert a.children == [b.tid]
        assert a.edges == []


def test_key_by_starts_a_new_stage_with_hash_input():
    env = make_env(2)
    env.from_sequence(1, 10).map(lambda v: (v % 3, v)).key_by(lambda v: v[0]).process(
        Passthrough()
    ).add_sink(DiscardingSink())
    plan = plan_of(env)
    assert len(plan.stages) == 2
    src, keyed = plan.stages
    assert names(src) == ["Sequence Source", "Map"]
    assert edges(src) == [(1, Partitioning.HASH)]
    assert keyed.input_partitioning is Partitioning.HASH
    assert keyed.upstream == [0]
    assert keyed.key_serializer is not None
    assert names(keyed) == ["KeyedProcess", "Discard"]  # the sink chains to the keyed op
    head = keyed.nodes[keyed.heads[0]]
    assert head.keyed and keyed.keyed_uids == [head.uid]
    assert plan.leaves == [keyed] and plan.sources == [src]


def test_parallelism_change_rebalances():
    env = make_env(2)
    # from_collection is non-parallel (p=1); the map runs with the environment's p=2
    env.from_collection([1, 2, 3]).map(lambda v: v).add_sink(DiscardingSink())
    plan = plan_of(env)
    assert [s.parallelism for s in plan.stages] == [1, 2]
    assert edges(plan.stages[0]) == [(1, Partitioning.REBALANCE)]
    assert plan.stages[1].input_partitioning is Partitioning.REBALANCE
    assert names(plan.stages[1]) == ["Map", "Discard"]


def test_explicit_set_parallelism_breaks_the_chain():
    env = make_env(2)
    env.from_sequence(1, 10).map(lambda v: v).set_parallelism(3).add_sink(DiscardingSink())
    plan = plan_of(env)
    assert [s.parallelism for s in plan.stages] == [2, 3, 2]
    assert edges(plan.stages[0]) == [(1, Partitioning.REBALANCE)]
    assert edges(plan.stages[1]) == [(2, Partitioning.REBALANCE)]


def test_rebalance_with_equal_parallelism_is_a_shuffle():
    env = make_env(2)
    env.from_sequence(1, 10).rebalance().map(lambda v: v).add_sink(DiscardingSink())
    plan = plan_of(env)
    assert len(plan.stages) == 2
    assert edges(plan.stages[0]) == [(1, Partitioning.REBALANCE)]


def test_rebalance_after_key_by_is_rejected_as_in_flink():
    # Flink's KeyedStream.setConnectionType: "Cannot override partitioning for KeyedStream."
    env = make_env(2)
    with pytest.raises(ConfigurationError, match="Cannot override partitioning"):
        env.from_sequence(1, 10).key_by(lambda v: v % 2).rebalance()


def test_union_is_one_stage_with_two_upstream_stages():
    env = make_env(2)
    a = env.from_sequence(1, 5)
    b = env.from_sequence(6, 10)
    a.union(b).key_by(lambda v: v % 2).process(Passthrough()).add_sink(DiscardingSink())
    plan = plan_of(env)
    assert len(plan.stages) == 3
    union_stage = plan.stages[2]
    assert union_stage.upstream == [0, 1]
    assert union_stage.input_partitioning is Partitioning.HASH
    assert edges(plan.stages[0]) == [(2, Partitioning.HASH)]
    assert edges(plan.stages[1]) == [(2, Partitioning.HASH)]


def test_forward_union_of_two_sources_reads_both():
    env = make_env(2)
    a = env.from_sequence(1, 5)
    b = env.from_sequence(6, 10)
    a.union(b).map(lambda v: v).add_sink(DiscardingSink())
    plan = plan_of(env)
    assert len(plan.stages) == 3
    assert plan.stages[2].upstream == [0, 1]
    assert names(plan.stages[2]) == ["Map", "Discard"]


def test_union_with_mixed_partitionings_is_rejected():
    env = make_env(2)
    a = env.from_sequence(1, 5).key_by(lambda v: v)
    b = env.from_sequence(6, 10).rebalance()
    a.union(b).map(lambda v: v).add_sink(DiscardingSink())
    with pytest.raises(ConfigurationError, match="different partitionings"):
        plan_of(env)


def test_keyed_operator_without_key_by_is_rejected():
    env = make_env(2)
    src = env.from_sequence(1, 10)
    keyed = Transformation(
        TransformationKind.ONE_INPUT, "NotKeyed", [src._t], payload=lambda: None, keyed=True
    )
    sink = Transformation(TransformationKind.SINK, "Sink", [keyed], payload=lambda: None)
    with pytest.raises(ConfigurationError, match="key_by"):
        build_plan([sink], 2, None)


def test_keyed_operator_after_rebalanced_key_by_is_rejected():
    env = make_env(2)
    # the plan still rejects it when built below the API (which refuses it earlier)
    src = DataStream.rebalance(env.from_sequence(1, 10).key_by(lambda v: v))
    keyed = Transformation(
        TransformationKind.ONE_INPUT, "K", [src._t], payload=lambda: None, keyed=True
    )
    sink = Transformation(TransformationKind.SINK, "Sink", [keyed], payload=lambda: None)
    with pytest.raises(ConfigurationError, match="not keyed"):
        build_plan([sink], 2, None)


def test_no_sinks_is_rejected():
    env = make_env(2)
    env.from_sequence(1, 10).map(lambda v: v)
    with pytest.raises(ConfigurationError, match="no sinks"):
        env.get_execution_plan()
    with pytest.raises(ConfigurationError, match="no sinks"):
        env.execute()


def test_duplicate_uid_is_rejected():
    env = make_env(2)
    env.from_sequence(1, 10).map(lambda v: v).uid("same").map(lambda v: v).uid("same").add_sink(
        DiscardingSink()
    )
    with pytest.raises(ConfigurationError, match="'same'"):
        plan_of(env)


def test_operators_not_leading_to_a_sink_are_not_planned():
    env = make_env(2)
    src = env.from_sequence(1, 10)
    src.map(lambda v: v).name("dangling")
    src.filter(bool).add_sink(DiscardingSink())
    plan = plan_of(env)
    assert "dangling" not in [n for s in plan.stages for n in names(s)]


def _program() -> ExecutionPlan:
    env = make_env(2)
    ks = env.from_collection([(1, 2)]).map(lambda v: v).key_by(lambda v: v[0])
    ks.process(Passthrough()).filter(bool).add_sink(DiscardingSink())
    env.from_sequence(1, 3).uid("explicit").add_sink(DiscardingSink())
    return plan_of(env)


def _uids(plan: ExecutionPlan) -> list[str]:
    return [n.uid for s in plan.stages for n in s.nodes.values()]


def test_default_uids_are_stable_for_the_same_program():
    first, second = _program(), _program()
    assert _uids(first) == _uids(second)
    assert len(set(_uids(first))) == len(_uids(first))
    assert "explicit" in _uids(first)
    # the keyed operator's state is found again by the same uid
    assert [s.keyed_uids for s in first.stages] == [s.keyed_uids for s in second.stages]
    assert first.operator_parallelism() == second.operator_parallelism()


def test_parallelism_above_max_parallelism_is_rejected():
    env = make_env(4)
    env.set_max_parallelism(2)
    env.from_sequence(1, 10).add_sink(DiscardingSink())
    with pytest.raises(ConfigurationError):
        plan_of(env)


def test_describe_names_stages_and_shuffles():
    env = make_env(2)
    env.from_sequence(1, 10).key_by(lambda v: v).process(Passthrough()).print()
    text = env.get_execution_plan()
    assert "stage 0 (p=2): Sequence Source" in text
    assert "stage 1 (p=2) <- hash from [0]: KeyedProcess -> Print" in text
