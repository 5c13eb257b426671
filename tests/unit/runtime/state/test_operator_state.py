"""Operator state store and its redistribution (no Spark, no job)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstate.common import Types
from streamstate.datastream.state import ListStateDescriptor, MapStateDescriptor
from streamstate.errors import (
    CorruptCheckpointError,
    StateAccessError,
    StateDescriptorConflictError,
    StateMigrationError,
)
from streamstate.runtime.state.operator import (
    DefaultOperatorStateStore,
    OperatorStateMode,
    decode_operator_snapshot,
    redistribute,
)

SPLIT = ListStateDescriptor("split", Types.LONG())
UNION = ListStateDescriptor("union", Types.STRING())
RULES = MapStateDescriptor("rules", Types.STRING(), Types.LONG())


def store_with(split=(), union=(), rules=None, broadcast=True) -> DefaultOperatorStateStore:
    s = DefaultOperatorStateStore("op", allow_broadcast=broadcast)
    s.get_list_state(SPLIT).update(list(split))
    s.get_union_list_state(UNION).update(list(union))
    if rules is not None:
        s.get_broadcast_state(RULES).put_all(rules)
    return s


def decoded(*stores: DefaultOperatorStateStore):
    return [decode_operator_snapshot(s.snapshot()) for s in stores]


def restore(states) -> DefaultOperatorStateStore:
    s = DefaultOperatorStateStore("op", allow_broadcast=True)
    s.restore(states)
    return s


def test_snapshot_round_trip_keeps_every_kind():
    s = store_with([1, 2, 3], ["a"], {"r": 7})
    [snap] = decoded(s)
    r = restore(snap)
    assert list(r.get_list_state(SPLIT).get()) == [1, 2, 3]
    assert list(r.get_union_list_state(UNION).get()) == ["a"]
    assert dict(r.get_broadcast_state(RULES).items()) == {"r": 7}
    assert r.get_registered_state_names() == {"split", "union"}
    assert r.get_registered_broadcast_state_names() == {"rules"}


def test_restored_state_that_is_not_registered_again_is_kept():
    [snap] = decoded(store_with([5], ["u"]))
    r = restore(snap)
    r.get_list_state(SPLIT)  # only one of the two registered again
    [again] = decoded(r)
    assert again["union"][1] == ["u"] and again["split"][1] == [5]


def test_list_state_is_split_evenly_on_scale_up_and_merged_on_scale_down():
    old = decoded(store_with([0, 1, 2, 3, 4]))  # p=1
    three = [redistribute(old, i, 3)["split"][1] for i in range(3)]
    assert three == [[0], [1, 2], [3, 4]]
    old3 = decoded(*[store_with(x) for x in three])
    two = [redistribute(old3, i, 2)["split"][1] for i in range(2)]
    assert sorted(two[0] + two[1]) == [0, 1, 2, 3, 4]
    assert abs(len(two[0]) - len(two[1])) <= 1


@given(
    st.lists(st.lists(st.integers(-5, 5), max_size=6), min_size=1, max_size=5),
    st.integers(1, 7),
)
def test_even_split_loses_and_duplicates_nothing(per_subtask, new_p):
    old = decoded(*[store_with(x) for x in per_subtask])
    parts = [redistribute(old, i, new_p)["split"][1] for i in range(new_p)]
    flat = [v for p in parts for v in p]
    assert flat == [v for x in per_subtask for v in x]  # contiguous ranges, in subtask order
    if new_p == len(per_subtask):
        assert parts == per_subtask  # same parallelism: every subtask keeps its own (as Flink)
    else:
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1


def test_union_state_goes_to_every_subtask():
    old = decoded(store_with(union=["a"]), store_with(union=["b", "c"]))
    for p in (1, 2, 3):
        for i in range(p):
            assert redistribute(old, i, p)["union"][1] == ["a", "b", "c"]


def test_broadcast_state_each_reads_its_own_copy_new_ones_round_robin():
    old = decoded(store_with(rules={"x": 0}), store_with(rules={"x": 1}))
    got = [redistribute(old, i, 5)["rules"][1] for i in range(5)]
    assert got == [{"x": 0}, {"x": 1}, {"x": 0}, {"x": 1}, {"x": 0}]
    assert [redistribute(old, i, 1)["rules"][1] for i in range(1)] == [{"x": 0}]


def test_mode_conflict_is_a_typed_error():
    s = DefaultOperatorStateStore("op")
    s.get_list_state(ListStateDescriptor("buf"))
    with pytest.raises(StateDescriptorConflictError, match="get_list_state.*get_union_list_state"):
        s.get_union_list_state(ListStateDescriptor("buf"))
    [snap] = decoded(store_with([1]))
    r = restore(snap)
    with pytest.raises(StateDescriptorConflictError, match="checkpointed as split"):
        r.get_union_list_state(ListStateDescriptor("split", Types.LONG()))


def test_broadcast_state_outside_a_broadcast_function_is_a_typed_error():
    s = DefaultOperatorStateStore("my map", allow_broadcast=False)
    with pytest.raises(StateAccessError, match="only available in a BroadcastProcessFunction"):
        s.get_broadcast_state(RULES)


def test_read_only_broadcast_state_rejects_writes():
    s = store_with(rules={"r": 1})
    ro = s.broadcast_state_read_only(RULES)
    assert ro.get("r") == 1 and "r" in ro and list(ro.immutable_entries()) == [("r", 1)]
    for write in (
        lambda: ro.put("x", 1),
        lambda: ro.put_all({"x": 1}),
        lambda: ro.remove("r"),
        lambda: ro.clear(),
    ):
        with pytest.raises(StateAccessError, match="read-only"):
            write()
    assert dict(s.get_broadcast_state(RULES).items()) == {"r": 1}


def test_wrong_descriptor_kind_and_none_elements_are_rejected():
    s = DefaultOperatorStateStore("op", allow_broadcast=True)
    with pytest.raises(StateAccessError, match="takes a ListStateDescriptor"):
        s.get_list_state(RULES)
    with pytest.raises(StateAccessError, match="cannot add None"):
        s.get_list_state(SPLIT).add(None)


def test_snapshot_format_is_versioned_and_checked():
    data = store_with([1]).snapshot()
    assert data[:4] == b"SSOS"
    newer = data[:4] + (99).to_bytes(2, "big") + data[6:]
    with pytest.raises(CorruptCheckpointError, match="format version 99"):
        decode_operator_snapshot(newer)
    with pytest.raises(CorruptCheckpointError):
        decode_operator_snapshot(b"garbage!!!!")
    with pytest.raises(CorruptCheckpointError):
        decode_operator_snapshot(data[:-3])
    assert decode_operator_snapshot(data)["split"][0] is OperatorStateMode.SPLIT_DISTRIBUTE


def test_restored_operator_state_is_checked_against_the_new_serializers():
    [snap] = decoded(store_with([1, 2], ["a"], {"r": 7}))
    r = restore(snap)
    with pytest.raises(StateMigrationError) as e:
        r.get_list_state(ListStateDescriptor("split", Types.STRING()))
    msg = str(e.value)
    assert "'op'" in msg and "'split'" in msg and "element" in msg
    assert "long" in msg and "string" in msg
    with pytest.raises(StateMigrationError, match="map key"):
        r.get_broadcast_state(MapStateDescriptor("rules", Types.LONG(), Types.LONG()))
    # a refused registration leaves the restored state in place
    assert list(r.get_list_state(SPLIT).get()) == [1, 2]
    assert dict(r.get_broadcast_state(RULES).items()) == {"r": 7}
    # compatible after migration: pickle reads back into a typed state and vice versa
    union = r.get_union_list_state(ListStateDescriptor("union", Types.PICKLED_BYTE_ARRAY()))
    assert list(union.get()) == ["a"]
    [again] = decoded(r)
    r2 = restore(again)
    assert list(r2.get_union_list_state(UNION).get()) == ["a"]
