"""Hash shuffles: receivers extract keys themselves ("K" chunks) and get KeyedColumns.

Whatever the chunk format, a receiver must see the same ``(key group, key, value)``
triples, in the same order, as the sender's key selector and murmur3 produce."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamstate.datastream import KeyedCoProcessFunction, KeyedProcessFunction
from streamstate.datastream.connectors import DiscardingSink
from streamstate.errors import KeySerializationError
from streamstate.runtime import shuffle
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


def _receiver(mp: int = 128, keyings=(None, None), parallelism: int = 2) -> Stage:
    st = Stage(1, parallelism, mp)
    st.input_keyings = list(keyings)
    return st


def _write(
    values,
    receiver_keys: bool,
    mp: int = 128,
    timestamps=None,
    key_of=None,
    parallelism: int = 2,
    cache: dict | None = None,
):
    """Every target's payloads for ``values`` sent over one hash edge by subtask 0."""
    keying = KeyingSpec(key_of or (lambda v: v[0]), PickleSerializer())
    dest = _receiver(mp, (keying, None), parallelism)
    edge = Edge(1, Partitioning.HASH, keying, 0, None, receiver_keys)
    w = EdgeWriter(edge, dest, 0, "src", {} if cache is None else cache)
    half = len(values) // 2  # two batches: the writer appends across adds
    w.add(values[:half], None if timestamps is None else timestamps[:half])
    w.add(values[half:], None if timestamps is None else timestamps[half:])
    per_target: dict[int, list] = {t: [] for t in range(parallelism)}
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


#: keys that compare equal across types but serialize differently, and unhashable ones
mixed_keys_st = st.one_of(
    st.sampled_from(["1", 1, True, 1.0, 0, False, "", (1,)]), st.text(max_size=2)
)


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(st.tuples(mixed_keys_st, st.integers()), max_size=80),
    parallelism=st.sampled_from([1, 2, 3, 8, 9, 40]),
    mp=st.sampled_from([40, 128, 300]),
    limit=st.sampled_from([0, 2, 200_000]),
    timed=st.booleans(),
)
def test_a_batch_routed_at_once_matches_the_per_record_rule(values, parallelism, mp, limit, timed):
    """Whatever the parallelism, key types (equal across types, unhashable: named) and
    cache state (empty, full, warm), every target gets exactly the triples, in batch
    order, that murmur3 of each serialized key gives one record at a time."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shuffle, "_KEY_CACHE_LIMIT", limit)
        _check_routes(values, parallelism, mp, limit, timed)


def _check_routes(values, parallelism, mp, limit, timed):
    ser = PickleSerializer().serialize
    ts = list(range(len(values))) if timed else None
    cache: dict = {}
    for _round in range(2):  # the second time, the cache knows the keys (up to its limit)
        per_target, dest = _write(values, False, mp, ts, None, parallelism, cache)
        for target in range(parallelism):
            inputs, _acks, tss, _wm = decode_input(per_target[target], dest)
            mine = [
                (kg, v[0], v, t)
                for v, t in zip(values, ts or [None] * len(values), strict=True)
                if (kg := compute_key_group_for_serialized_key(ser(v[0]), mp)) * parallelism // mp
                == target
            ]
            got = list(inputs[0])
            assert [(kg, type(k), k, v) for kg, k, v in got] == [
                (kg, type(k), k, v) for kg, k, v, _t in mine
            ]
            if timed and mine:
                assert tss[0] == [t for *_x, t in mine]
    assert len(cache) <= limit


def test_an_unhashable_key_is_named_whatever_the_batch_route():
    with pytest.raises(KeySerializationError, match="not hashable"):
        _write([("a", 1), (["list"], 2), ("b", 3)], True)


def test_keys_equal_across_types_keep_their_own_key_groups_across_batches():
    """1, True and 1.0 compare equal but serialize differently: a batch of each, after a
    batch of the others, gets its own key groups, not the ones cached for an equal key."""
    ser = PickleSerializer().serialize
    keying = KeyingSpec(lambda v: v[0], PickleSerializer())
    dest = _receiver(4096, (keying, None))
    w = EdgeWriter(Edge(1, Partitioning.HASH, keying, 0, None, False), dest, 0, "src", {})
    batches = [[(1, "a"), (0, "b")], [(True, "c"), (False, "d")], [(1.0, "e")], [("1", "f")]]
    for batch in batches:
        w.add(batch)
    got = []
    for seq, (target, blob) in enumerate(w.chunks()):
        got += list(decode_input([(target, (DATA, 0, 0, seq, blob, 0))], dest)[0][0])
    expected = {
        (compute_key_group_for_serialized_key(ser(v[0]), 4096), v[1]) for b in batches for v in b
    }
    assert {(kg, v[1]) for kg, _k, v in got} == expected
    assert len({kg for kg, _k, _v in got}) == 6  # every key its own (no collisions here)


def test_chunks_of_several_senders_iterate_and_join_in_sender_order():
    """A receiver keeps each sender's columns apart until an operator asks for whole
    columns: iterating before and after the join, and the joined columns, give the
    senders' triples in (sender, batch) order; timestamps follow the same order."""
    keying = KeyingSpec(lambda v: v[0], PickleSerializer())
    dest = _receiver(128, (keying, None))
    edge = Edge(1, Partitioning.HASH, keying, 0, None, True)
    sent = {src: [(f"k{(i * 7 + src) % 13}", src, i) for i in range(40)] for src in (0, 1, 2)}
    payloads = []
    for src in (2, 0, 1):  # arrival order is not input order
        w = EdgeWriter(edge, dest, src, "src", {})
        w.add(sent[src], [1000 * src + i for i in range(40)])
        for seq, (target, blob) in enumerate(w.chunks()):
            if target == 0:
                payloads.append((target, (DATA, 0, src, seq, blob, 0)))
    inputs, _acks, tss, _wm = decode_input(payloads, dest)
    cols = inputs[0]
    ser = PickleSerializer().serialize
    expected = [
        (kg, v[0], v)
        for src in (0, 1, 2)
        for v in sent[src]
        if (kg := compute_key_group_for_serialized_key(ser(v[0]), 128)) * 2 // 128 == 0
    ]
    assert isinstance(cols, KeyedColumns) and len(cols) == len(expected)
    assert list(cols) == expected  # segments, not joined yet
    assert tss[0] == [1000 * v[1] + v[2] for _kg, _k, v in expected]
    assert list(cols.kgs) == [t[0] for t in expected]  # joins them
    assert cols.keys == [t[1] for t in expected] and cols.values == [t[2] for t in expected]
    assert list(cols) == expected and cols[1:3] == expected[1:3] and cols[0] == expected[0]
