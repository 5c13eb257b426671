"""The internal timer service: ordering, dedup, delete, snapshot/restore, rescale."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamstate.errors import StateAccessError
from streamstate.runtime.checkpoint.handles import (
    ByteStreamStateHandle,
    KeyGroupsStateHandle,
    handle_from_dict,
)
from streamstate.runtime.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.state.base import KeyedStateBackend
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.heap.backend import HeapKeyedStateBackend
from streamstate.runtime.state.registry import create_keyed_backend
from streamstate.runtime.timers import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    InternalTimer,
    InternalTimerService,
)

MAX_P = 128
KEY_SER = PickleSerializer()


def backend(kg_range: KeyGroupRange | None = None, name: str = "hashmap") -> KeyedStateBackend:
    b: KeyedStateBackend = create_keyed_backend(
        name,
        operator_name="op",
        key_group_range=kg_range or KeyGroupRange(0, MAX_P - 1),
        max_parallelism=MAX_P,
        key_serializer=KEY_SER,
    )
    return b


def set_key(b: KeyedStateBackend, key: Any) -> None:
    b.set_current_key(key, b.key_group_of(key))


def handle_of(b: KeyedStateBackend) -> KeyGroupsStateHandle:
    snap = b.snapshot()
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(snap.data), b.key_group_range, snap.offsets, snap.meta
    )
    return handle_from_dict(json.loads(json.dumps(h.to_dict())))


def fire_all_event(svc: InternalTimerService, wm: int) -> list[tuple[Any, Any, int]]:
    return [(t.key, t.namespace, t.timestamp) for t in svc.advance_watermark(wm)]


def test_event_timers_fire_in_timestamp_order_and_only_when_due() -> None:
    b = backend()
    svc = InternalTimerService(b, "t")
    for key, ts in [("a", 30), ("b", 10), ("c", 20), ("a", 5)]:
        set_key(b, key)
        svc.register_event_time_timer(VOID_NAMESPACE, ts)
    assert svc.current_watermark() == MIN_WATERMARK
    assert fire_all_event(svc, 4) == []
    assert fire_all_event(svc, 20) == [
        ("a", VOID_NAMESPACE, 5),
        ("b", VOID_NAMESPACE, 10),
        ("c", VOID_NAMESPACE, 20),
    ]
    assert svc.current_watermark() == 20
    assert svc.num_event_time_timers() == 1
    assert svc.next_event_time_timer() == 30
    # the watermark never goes back
    assert fire_all_event(svc, 3) == []
    assert svc.current_watermark() == 20
    assert fire_all_event(svc, MAX_WATERMARK) == [("a", VOID_NAMESPACE, 30)]
    assert svc.num_event_time_timers() == 0
    assert svc.next_event_time_timer() is None


def test_fired_timer_sets_current_key_and_carries_key_group() -> None:
    b = backend()
    svc = InternalTimerService(b, "t")
    for key in ["x", "y", 42]:
        set_key(b, key)
        svc.register_event_time_timer("ns", 7)
    for t in svc.advance_watermark(7):
        assert isinstance(t, InternalTimer)
        assert b.get_current_key() == t.key
        assert t.key_group == b.key_group_of(t.key)
        assert b.get_current_key_group() == t.key_group


def test_dedup_per_key_namespace_timestamp() -> None:
    b = backend()
    svc = InternalTimerService(b, "t")
    set_key(b, "k")
    for _ in range(3):
        svc.register_event_time_timer("w1", 100)
    svc.register_event_time_timer("w2", 100)
    svc.register_event_time_timer("w1", 101)
    set_key(b, "other")
    svc.register_event_time_timer("w1", 100)
    assert svc.num_event_time_timers() == 4
    fired = fire_all_event(svc, 200)
    assert sorted(fired, key=repr) == sorted(
        [("k", "w1", 100), ("k", "w2", 100), ("other", "w1", 100), ("k", "w1", 101)], key=repr
    )
    assert len(fired) == 4


def test_delete_and_reregister() -> None:
    b = backend()
    svc = InternalTimerService(b, "t")
    set_key(b, "k")
    svc.register_event_time_timer(VOID_NAMESPACE, 10)
    svc.register_event_time_timer(VOID_NAMESPACE, 20)
    svc.delete_event_time_timer(VOID_NAMESPACE, 10)
    svc.delete_event_time_timer(VOID_NAMESPACE, 999)  # absent: no-op
    set_key(b, "other")
    svc.delete_event_time_timer(VOID_NAMESPACE, 20)  # another key's timer: untouched
    assert svc.num_event_time_timers() == 1
    assert svc.next_event_time_timer() == 20
    set_key(b, "k")
    svc.delete_event_time_timer(VOID_NAMESPACE, 20)
    svc.register_event_time_timer(VOID_NAMESPACE, 20)  # again after delete: fires once
    assert fire_all_event(svc, 100) == [("k", VOID_NAMESPACE, 20)]


def test_heap_compacts_after_many_deletes() -> None:
    b = backend()
    svc = InternalTimerService(b, "t")
    set_key(b, "k")
    # a timeout pattern: each "record" replaces the previous timer by a later one
    for ts in range(10_000):
        svc.register_event_time_timer(VOID_NAMESPACE, ts + 1000)
        svc.delete_event_time_timer(VOID_NAMESPACE, ts + 1000 - 1)
    assert svc.num_event_time_timers() == 1
    assert len(svc._event.heap) < 3000 and len(svc._event.buckets) == 1
    assert fire_all_event(svc, MAX_WATERMARK) == [("k", VOID_NAMESPACE, 10_999)]


def test_timers_registered_while_firing_fire_in_the_same_advance() -> None:
    b = backend()
    svc = InternalTimerService(b, "t")
    set_key(b, "k")
    svc.register_event_time_timer(VOID_NAMESPACE, 10)
    seen = []
    for t in svc.advance_watermark(50):
        seen.append(t.timestamp)
        if t.timestamp == 10:
            svc.register_event_time_timer(VOID_NAMESPACE, 30)  # due: fires now
            svc.register_event_time_timer(VOID_NAMESPACE, 60)  # not due
            svc.register_event_time_timer(VOID_NAMESPACE, 10)  # the fired one again: due
            svc.delete_event_time_timer(VOID_NAMESPACE, 10)  # ... and deleted again
    assert seen == [10, 30]
    assert [t.timestamp for t in svc.event_time_timers()] == [60]


def test_processing_time_timers_and_clock() -> None:
    b = backend()
    now = [1000]
    svc = InternalTimerService(b, "t", clock=lambda: now[0])
    assert svc.current_processing_time() == 1000
    now[0] = 1500
    assert svc.current_processing_time() == 1500  # the clock until time is advanced
    set_key(b, "k")
    svc.register_processing_time_timer("n", 2000)
    svc.register_processing_time_timer("n", 1200)
    svc.register_event_time_timer("n", 1200)  # other domain: independent
    assert [t.timestamp for t in svc.advance_processing_time(1999)] == [1200]
    assert svc.current_processing_time() == 1999
    assert list(svc.advance_processing_time(1000)) == []  # never goes back
    assert svc.current_processing_time() == 1999
    svc.delete_processing_time_timer("n", 2000)
    assert list(svc.advance_processing_time(5000)) == []
    assert svc.num_event_time_timers() == 1


def test_registering_without_a_current_key_is_a_clear_error() -> None:
    b = backend()
    svc = InternalTimerService(b, "t")
    with pytest.raises(StateAccessError, match="current key"):
        svc.register_event_time_timer(VOID_NAMESPACE, 1)
    assert svc.num_event_time_timers() == 0
    with pytest.raises(StateAccessError, match="keyed stream"):
        InternalTimerService(None, "t")  # type: ignore[arg-type]


def test_unhashable_namespace_is_a_clear_error() -> None:
    b = backend()
    svc = InternalTimerService(b, "t")
    set_key(b, "k")
    with pytest.raises(StateAccessError, match="hashable"):
        svc.register_event_time_timer([1, 2], 1)


def test_services_with_different_names_are_independent() -> None:
    b = backend()
    s1 = InternalTimerService(b, "one")
    s2 = InternalTimerService(b, "two")
    set_key(b, "k")
    s1.register_event_time_timer(VOID_NAMESPACE, 1)
    assert s2.num_event_time_timers() == 0
    assert fire_all_event(s2, 10) == []
    assert fire_all_event(s1, 10) == [("k", VOID_NAMESPACE, 1)]


def _populate(b: KeyedStateBackend, svc: InternalTimerService, n: int) -> None:
    for i in range(n):
        set_key(b, f"key-{i}")
        svc.register_event_time_timer(("win", i % 3), 100 + i)
        svc.register_processing_time_timer(VOID_NAMESPACE, 5000 + i)


def test_snapshot_restore_through_heap_backend() -> None:
    b = backend()
    svc = InternalTimerService(b, "t")
    _populate(b, svc, 50)
    # fire some before the snapshot: they must not come back
    fired_before = fire_all_event(svc, 109)
    assert len(fired_before) == 10
    handle = handle_of(b)
    expected_event = svc.event_time_timers()
    expected_proc = svc.processing_time_timers()

    b2 = backend()
    b2.restore([handle])
    svc2 = InternalTimerService(b2, "t")
    assert svc2.event_time_timers() == expected_event
    assert svc2.processing_time_timers() == expected_proc
    assert fire_all_event(svc2, MAX_WATERMARK) == [
        (t.key, t.namespace, t.timestamp) for t in expected_event
    ]
    assert len(list(svc2.advance_processing_time(MAX_WATERMARK))) == 40 + 10


def test_delta_snapshots_carry_timer_changes() -> None:
    b = backend()
    svc = InternalTimerService(b, "t")
    _populate(b, svc, 20)
    base = handle_of(b)
    fire_all_event(svc, 104)  # fires 5 (removes them from state)
    set_key(b, "late")
    svc.register_event_time_timer(VOID_NAMESPACE, 1)
    delta = b.snapshot_delta()

    b2 = backend()
    b2.restore([base])
    b2.apply_delta(delta)
    svc2 = InternalTimerService(b2, "t")
    assert svc2.event_time_timers() == svc.event_time_timers()


@pytest.mark.parametrize("new_parallelism", [1, 2, 3])
def test_restore_into_other_key_group_ranges_rescales_timers(new_parallelism: int) -> None:
    # two subtasks before, each with its key groups
    olds = []
    all_timers: set[tuple[Any, Any, int]] = set()
    for idx in range(2):
        rng = compute_key_group_range_for_operator_index(MAX_P, 2, idx)
        b = backend(rng)
        svc = InternalTimerService(b, "t")
        for i in range(200):
            key = f"k{i}"
            kg = b.key_group_of(key)
            if kg in rng:
                b.set_current_key(key, kg)
                svc.register_event_time_timer(VOID_NAMESPACE, i)
                all_timers.add((key, VOID_NAMESPACE, i))
        olds.append(handle_of(b))
    assert len(all_timers) == 200

    got: list[tuple[Any, Any, int]] = []
    for idx in range(new_parallelism):
        rng = compute_key_group_range_for_operator_index(MAX_P, new_parallelism, idx)
        b = backend(rng)
        b.restore(olds)
        svc = InternalTimerService(b, "t")
        mine = fire_all_event(svc, MAX_WATERMARK)
        assert all(b.key_group_of(k) in rng for k, _, _ in mine)
        assert [ts for _, _, ts in mine] == sorted(ts for _, _, ts in mine)
        got.extend(mine)
    assert sorted(got, key=repr) == sorted(all_timers, key=repr)


def test_heap_backend_get_current_key_group_matches_default() -> None:
    b = backend()
    assert isinstance(b, HeapKeyedStateBackend)
    for key in ["a", 1, (1, "x"), None]:
        set_key(b, key)
        assert b.get_current_key_group() == KeyedStateBackend.get_current_key_group(b)


# ------------------------------------------------------------------ property test

_op = st.one_of(
    st.tuples(st.just("reg"), st.integers(0, 5), st.sampled_from(["a", "b"]), st.integers(0, 40)),
    st.tuples(st.just("del"), st.integers(0, 5), st.sampled_from(["a", "b"]), st.integers(0, 40)),
    st.tuples(st.just("wm"), st.just(0), st.just(""), st.integers(0, 50)),
    st.tuples(st.just("snap"), st.just(0), st.just(""), st.just(0)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_op, max_size=60))
def test_property_matches_a_model_across_restores(ops: list[tuple[str, int, str, int]]) -> None:
    """Any sequence of register/delete/advance/snapshot-restore behaves like a sorted set."""
    b = backend()
    svc = InternalTimerService(b, "p")
    model: set[tuple[int, str, int]] = set()
    wm = MIN_WATERMARK
    for kind, key, ns, ts in ops:
        if kind == "reg":
            set_key(b, key)
            svc.register_event_time_timer(ns, ts)
            model.add((key, ns, ts))
        elif kind == "del":
            set_key(b, key)
            svc.delete_event_time_timer(ns, ts)
            model.discard((key, ns, ts))
        else:
            if kind == "snap":
                h = handle_of(b)
                b = backend()
                b.restore([h])
                svc = InternalTimerService(b, "p")
                ts = wm  # the restored operator gets the checkpointed watermark again
            wm = max(wm, ts)
            fired = fire_all_event(svc, ts)
            due = {t for t in model if t[2] <= wm}
            assert sorted(fired, key=repr) == sorted(due, key=repr)
            assert len(fired) == len(due)
            assert [f[2] for f in fired] == sorted(f[2] for f in fired)
            model -= due
        assert svc.num_event_time_timers() == len(model)
    assert sorted(fire_all_event(svc, MAX_WATERMARK), key=repr) == sorted(model, key=repr)


def test_for_operator_caches_per_context_and_name() -> None:
    from streamstate.runtime.operators.base import OperatorContext

    b = backend()
    ctx = OperatorContext("op", 0, 1, MAX_P, 0, {}, b)
    s1 = InternalTimerService.for_operator(ctx, "a")
    assert InternalTimerService.for_operator(ctx, "a") is s1
    assert InternalTimerService.for_operator(ctx, "b") is not s1
    ctx.processing_time = 1234  # type: ignore[attr-defined]
    assert s1.current_processing_time() == 1234
    ctx2 = OperatorContext("op", 0, 1, MAX_P, 0, {}, backend())
    ctx2.current_watermark = 99  # type: ignore[attr-defined]
    assert InternalTimerService.for_operator(ctx2, "a").current_watermark() == 99
    with pytest.raises(StateAccessError, match="keyed stream"):
        InternalTimerService.for_operator(OperatorContext("op", 0, 1, MAX_P, 0, {}, None), "a")


@pytest.mark.parametrize("name", ["hashmap", "rocksdb"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    regs=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["n1", "n2"]), st.integers(0, 9)
        ),
        max_size=30,
    ),
    wms=st.lists(st.integers(0, 10), min_size=1, max_size=3),
)
def test_bulk_registration_and_taking_equal_the_per_timer_calls(
    name: str, regs: list[tuple[str, str, int]], wms: list[int]
) -> None:
    """register_event_time_timers / take_due_event_time_timers: same timers, same order,
    same state as register_event_time_timer / advance_watermark."""
    runs = []
    for bulk in (False, True):
        b = backend(name=name)
        svc = InternalTimerService(b, "t")
        # consecutive registrations of one (namespace, timestamp) form one bulk call
        groups: list[tuple[str, int, list[str]]] = []
        for key, ns, ts in regs:
            if groups and groups[-1][:2] == (ns, ts):
                groups[-1][2].append(key)
            else:
                groups.append((ns, ts, [key]))
        for ns, ts, keys in groups:
            if bulk:
                svc.register_event_time_timers(ns, ts, [(k, b.key_group_of(k)) for k in keys])
            else:
                for k in keys:
                    set_key(b, k)
                    svc.register_event_time_timer(ns, ts)
        fired = []
        for wm in wms:
            if bulk:
                for ts, due in svc.take_due_event_time_timers(wm):
                    fired += [(key, kg, ns, ts) for key, kg, ns in due]
            else:
                fired += [
                    (t.key, t.key_group, t.namespace, t.timestamp)
                    for t in svc.advance_watermark(wm)
                ]
        svc.flush()  # as the operator's snapshot_state: bulk registrations reach the state
        restored = backend(name=name)
        restored.restore([handle_of(b)])
        svc2 = InternalTimerService(restored, "t")
        left = fire_all_event(svc2, MAX_WATERMARK)
        # every registered timer either fired or is left in the state, once
        fired_once = [(key, ns, ts) for key, _, ns, ts in fired]
        assert sorted(fired_once + left) == sorted(set(regs))
        runs.append((fired, svc.num_event_time_timers(), left))
        b.dispose()
        restored.dispose()
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", ["hashmap", "rocksdb"])
def test_bulk_timers_reach_the_state_at_flush_unless_they_fired(name: str) -> None:
    """A bulk-registered timer that fires before the flush never touches the state; the
    ones still registered are written at flush(); per-timer calls flush first."""
    b = backend(name=name)
    svc = InternalTimerService(b, "t")
    state = "_timer_state/event_t"
    kg = b.key_group_of
    svc.register_event_time_timers("w1", 10, [("a", kg("a")), ("b", kg("b"))])
    svc.register_event_time_timers("w2", 20, [("b", kg("b")), ("c", kg("c"))])
    assert svc.num_event_time_timers() == 4
    assert list(b.get_keys(state)) == []  # nothing written yet
    b.snapshot_delta()  # forget the registration of the state itself
    fired = [(k, ns, ts) for ts, due in svc.take_due_event_time_timers(10) for k, _, ns in due]
    assert sorted(fired) == [("a", "w1", 10), ("b", "w1", 10)]
    assert list(b.get_keys(state)) == []
    svc.flush()
    assert sorted(b.get_keys(state)) == ["b", "c"]
    # a restore sees exactly the timers left, and fires them as the original does
    restored = backend(name=name)
    restored.restore([handle_of(b)])
    svc2 = InternalTimerService(restored, "t")
    assert fire_all_event(svc2, MAX_WATERMARK) == [
        (t.key, t.namespace, t.timestamp) for t in svc.advance_watermark(MAX_WATERMARK)
    ]
    # a per-timer delete of a timer not flushed yet: gone from both queue and state
    svc.register_event_time_timers("w3", 30, [("d", kg("d"))])
    set_key(b, "d")
    svc.delete_event_time_timer("w3", 30)
    assert svc.num_event_time_timers() == 0
    assert list(b.get_keys(state)) == []
    # a per-timer registration flushes the bulk ones first and keeps the current key
    svc.register_event_time_timers("w4", 40, [("e", kg("e"))])
    set_key(b, "a")
    svc.register_event_time_timer("w4", 40)
    assert b.get_current_key() == "a"
    assert sorted(b.get_keys(state)) == ["a", "e"]
    # a bucket that fired and was made again: only the timers of the new one are written
    svc.register_event_time_timers("w5", 50, [("f", kg("f"))])
    assert [ts for ts, _ in svc.take_due_event_time_timers(50)] == [40, 50]
    svc.register_event_time_timers("w5", 50, [("g", kg("g"))])
    svc.flush()
    assert sorted(b.get_keys(state)) == ["g"]
    b.dispose()
    restored.dispose()


def test_bulk_registration_rejects_an_unhashable_namespace() -> None:
    b = backend()
    svc = InternalTimerService(b, "t")
    with pytest.raises(StateAccessError, match="hashable"):
        svc.register_event_time_timers([1], 5, [("a", b.key_group_of("a"))])
    assert svc.num_event_time_timers() == 0
