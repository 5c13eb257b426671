"""RateSource: records fall due at a rate stepped by set_rate, on the driver's clock;
what is due and unread is its backlog; a replay reads the same records."""

from __future__ import annotations

import json

import pytest

from streamstate.connectors.rate import RateSource, due_by, due_time_ms
from streamstate.errors import ConfigurationError
from streamstate.runtime.autoscaling import BacklogReporting

T0 = 1_700_000_000_000


def _read_all(source: RateSource, state, parallelism: int, budget: int = 10**9):
    """One epoch: every reader reads its assignment; the state after it and the records."""
    records, progress = [], []
    for assignment in source.plan_epoch(state, parallelism):
        got, done = source.read(assignment, budget)
        records.append(got)
        progress.append(done)
    return source.apply_progress(state, progress), records


def test_records_fall_due_at_the_rate_and_step_with_set_rate():
    source = RateSource(10_000, splits=3)
    state = source.discover(source.create_enumerator_state(2), T0)
    assert source.backlog(state, T0) == 0
    state = source.discover(state, T0 + 1000)
    assert state["due"] == 10_000
    source.set_rate(50_000)
    state = source.discover(state, T0 + 1000)  # the step, taken at the next planning
    state = source.discover(state, T0 + 3000)
    assert state["steps"] == [[T0, 10_000.0], [T0 + 1000, 50_000.0]]
    assert state["due"] == 10_000 + 100_000
    state, per_reader = _read_all(source, state, 2)
    records = sorted(r for reader in per_reader for r in reader)
    assert [i for i, _ in records] == list(range(110_000))  # each due record once
    assert all(due <= T0 + 3000 for _, due in records)
    # due times follow the schedule: 10k/s for a second, then 50k/s
    assert records[9_999][1] == T0 + 1000 and records[10_049][1] == T0 + 1001
    assert source.backlog(state, T0 + 3000) == 0
    assert source.backlog(state, T0 + 3100) == 5_000


def test_backlog_is_what_is_due_and_not_read():
    source = RateSource(1_000, splits=4)
    state = source.discover(source.create_enumerator_state(1), T0)
    state = source.discover(state, T0 + 2000)
    state, per_reader = _read_all(source, state, 1, budget=500)  # a slow reader
    assert len(per_reader[0]) == 500
    assert source.backlog(state, T0 + 2000) == 1_500
    assert source.backlog(state, T0 + 4000) == 3_500
    assert isinstance(source, BacklogReporting)
    assert source.backlog(source.create_enumerator_state(1), T0) is None  # not started


def test_a_replay_from_a_checkpointed_state_reads_the_same_records():
    source = RateSource(7_000, splits=5)
    state = source.discover(source.create_enumerator_state(3), T0)
    state = source.discover(state, T0 + 700)
    state, _ = _read_all(source, state, 3, budget=300)
    checkpoint = json.loads(json.dumps(state))
    state = source.discover(state, T0 + 1500)
    _, first = _read_all(source, state, 3)
    restored = source.restore_enumerator_state(checkpoint, 2)  # rescaled to 2 readers
    restored = source.discover(restored, T0 + 1500)
    _, again = _read_all(source, restored, 2)
    flat = sorted(r for reader in first for r in reader)
    assert flat == sorted(r for reader in again for r in reader)
    assert len(flat) == len({i for i, _ in flat}) == 10_500 - 3 * 300


def test_readers_beyond_the_splits_read_nothing_and_splits_cannot_change():
    source = RateSource(100, splits=2)
    state = source.discover(source.create_enumerator_state(4), T0)
    state = source.discover(state, T0 + 1000)
    _, per_reader = _read_all(source, state, 4)
    assert [len(r) for r in per_reader] == [50, 50, 0, 0]
    with pytest.raises(ConfigurationError, match="splits=2"):
        RateSource(100, splits=3).restore_enumerator_state(state, 4)


def test_a_generator_makes_the_records_and_a_paused_rate_makes_none_due():
    source = RateSource(1_000, splits=1, generator=_square)
    state = source.discover(source.create_enumerator_state(1), T0)
    source.set_rate(0)
    state = source.discover(state, T0 + 10)
    state = source.discover(state, T0 + 60_000)
    assert state["due"] == 10
    _, per_reader = _read_all(source, state, 1)
    assert per_reader == [[(i * i, T0 + i + 1) for i in range(10)]]


def _square(index: int, due_ms: int) -> tuple[int, int]:
    return (index * index, due_ms)


@pytest.mark.parametrize("rate", [-1, float("nan"), "fast", None])
def test_a_bad_rate_is_a_typed_error(rate):
    with pytest.raises(ConfigurationError, match="records per second"):
        RateSource(rate)
    with pytest.raises(ConfigurationError, match="records per second"):
        RateSource(10).set_rate(rate)


def test_due_times_invert_the_count_due():
    steps = [[T0, 3.0], [T0 + 1000, 0.0], [T0 + 5000, 1_000_000.0]]
    for index in range(200):
        at = due_time_ms(steps, index)
        assert due_by(steps, at) >= index + 1 > due_by(steps, at - 1)
