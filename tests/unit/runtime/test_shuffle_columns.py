"""Hash shuffles: receivers extract keys themselves ("K" chunks) and get KeyedColumns.

Whatever the chunk format, a receiver must see the same ``(key group, key, value)``
triples, in the same order, as the sender's key selector and murmur3 produce."""

from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from streamstate.datastream import KeyedCoProcessFunction, KeyedProcessFunction
from streamstate.datastream.connectors import DiscardingSink
from streamstate.runtime.graph import (
    Edge,
    ExecutionPlan,
    KeyingSpec,
    Partitioning,
    Stage,
    build_plan,
)
from streamstate.runtime.keygroups import compute_key_group_for_serialized_key
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.shuffle import DATA, EdgeWriter, KeyedColumns, decode_input
from tests.support import envs


class Passthrough(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value


class CoPassthrough(KeyedCoProcessFunction):
    def process_element1(self, value, ctx):
        yield value

    def process_element2(self, value, ctx):
        yield value


def plan_of(env) -> ExecutionPlan:
    return build_plan(env._sinks, env.get_parallelism(), env._max_parallelism)


def hash_edges(plan: ExecutionPlan) -> list[Edge]:
    return [
        e
        for s in plan.stages
        for n in s.nodes.values()
        for e in n.edges
        if e.partitioning is Partitioning.HASH
    ]


def test_a_key_by_edge_lets_the_receiver_extract_keys():
    env = envs.make_env(2)
    env.from_collection([("a", 1)]).key_by(lambda v: v[0]).process(Passthrough()).add_sink(
        DiscardingSink()
    )
    plan = plan_of(env)
    (edge,) = hash_edges(plan)
    assert edge.receiver_keys
    keyed = plan.stages[edge.dest_stage]
    assert keyed.input_keyings[0] is edge.keying and keyed.input_keyings[1] is None


def test_connected_keyed_streams_each_side_has_its_own_key_selector():
    env = envs.make_env(2)
    a = env.from_collection([("a", 1)]).key_by(lambda v: v[0])
    b = env.from_collection([(1, "a")]).key_by(lambda v: v[1])
    a.connect(b).process(CoPassthrough()).add_sink(DiscardingSink())
    plan = plan_of(env)
    edges = hash_edges(plan)
    assert len(edges) == 2 and all(e.receiver_keys for e in edges)
    dest = plan.stages[edges[0].dest_stage]
    assert {id(k) for k in dest.input_keyings} == {id(e.keying) for e in edges}


def _receiver(mp: int = 128, keyings=(None, None)) -> Stage:
    st = Stage(1, 2, mp)
    st.input_keyings = list(keyings)
    return st


def _write(values, receiver_keys: bool, mp: int = 128, timestamps=None, key_of=None):
    """Every target's payloads for ``values`` sent over one hash edge by subtask 0."""
    keying = KeyingSpec(key_of or (lambda v: v[0]), PickleSerializer())
    dest = _receiver(mp, (keying, None))
    edge = Edge(1, Partitioning.HASH, keying, 0, None, receiver_keys)
    w = EdgeWriter(edge, dest, 0, "src", {})
    half = len(values) // 2  # two batches: the writer appends across adds
    w.add(values[:half], None if timestamps is None else timestamps[:half])
    w.add(values[half:], None if timestamps is None else timestamps[half:])
    per_target: dict[int, list] = {0: [], 1: []}
    for seq, (target, blob) in enumerate(w.chunks()):
        per_target[target].append((target, (DATA, 0, 0, seq, blob, 0)))
    return per_target, dest


keys_st = st.one_of(
    st.text(max_size=4), st.integers(-5, 10**12), st.tuples(st.integers(), st.text(max_size=2))
)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.tuples(keys_st, st.integers()), max_size=60),
    timed=st.booleans(),
    mp=st.sampled_from([16, 128, 300, 4096]),
)
def test_K_and_C_chunks_decode_to_the_same_triples_in_the_same_order(values, timed, mp):
    ts = list(range(len(values))) if timed else None
    ser = PickleSerializer().serialize
    for target in (0, 1):
        got = []
        for receiver_keys in (True, False):
            per_target, dest = _write(values, receiver_keys, mp, ts)
            inputs, _acks, tss, _wm = decode_input(per_target[target], dest)
            triples = list(inputs[0])
            assert len(inputs[0]) == len(triples)
            expected = [
                (kg, v[0], v)
                for v in values
                if (kg := compute_key_group_for_serialized_key(ser(v[0]), mp)) * 2 // mp == target
            ]
            assert triples == expected
            if timed and expected:
                mine = [
                    t
                    for t, v in zip(ts, values, strict=True)
                    if compute_key_group_for_serialized_key(ser(v[0]), mp) * 2 // mp == target
                ]
                assert tss[0] == mine
            got.append(triples)
        assert got[0] == got[1]


def test_a_K_chunk_ships_no_key_column_and_decodes_to_keyed_columns():
    values = [(f"k{i % 7}", i) for i in range(200)]
    per_target, dest = _write(values, True)
    for target, payloads in per_target.items():
        for _t, payload in payloads:
            chunk = pickle.loads(payload[4])
            assert chunk[0] == "K" and len(chunk) == 3  # key groups, values: no keys
        inputs, *_ = decode_input(payloads, dest)
        cols = inputs[0]
        assert isinstance(cols, KeyedColumns)
        assert cols[0] == next(iter(cols))
        assert cols[1:3] == list(cols)[1:3]
        assert all(k == v[0] for _kg, k, v in cols)
        assert target in (0, 1)
    assert sum(len(decode_input(p, dest)[0][0]) for p in per_target.values()) == 200


def test_timestamps_travel_next_to_K_chunks():
    values = [(f"k{i % 5}", i) for i in range(50)]
    ts = [1000 + i for i in range(50)]
    per_target, dest = _write(values, True, timestamps=ts)
    seen = []
    for payloads in per_target.values():
        inputs, _acks, tss, _wm = decode_input(payloads, dest)
        assert tss[0] is not None and len(tss[0]) == len(inputs[0])
        seen += [(v, t) for (_kg, _k, v), t in zip(inputs[0], tss[0], strict=True)]
    assert sorted(seen) == sorted(zip(values, ts, strict=True))


def test_a_side_that_mixes_record_and_column_chunks_decodes_to_a_list_in_order():
    values = [(f"k{i}", i) for i in range(20)]
    per_target, dest = _write(values, True)
    rows = [("x", 1), ("y", 2)]
    r_chunk = (0, (DATA, 0, 1, 0, pickle.dumps(("R", rows)), 0))  # from src subtask 1
    inputs, *_ = decode_input([*per_target[0], r_chunk], dest)
    assert isinstance(inputs[0], list)
    hashed = [t for t in inputs[0] if len(t) == 3]
    assert inputs[0][-2:] == rows and hashed == list(decode_input(per_target[0], dest)[0][0])
