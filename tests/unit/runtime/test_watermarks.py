"""Watermark generation, combination and state (no Spark, no job)."""

from __future__ import annotations

import datetime as dt
import pickle

import cloudpickle
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstate.common import Duration, Time, TimestampAssigner, WatermarkStrategy
from streamstate.datastream import OutputTag, TimeDomain
from streamstate.errors import ConfigurationError, TimestampError
from streamstate.runtime.operators.base import OperatorContext
from streamstate.runtime.operators.timestamps import TimestampsAndWatermarksOperator
from streamstate.runtime.watermarks import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    BoundedOutOfOrdernessGenerator,
    ChannelWatermark,
    combine_channels,
    merge_states,
)


class ByField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


def make_op(strategy: WatermarkStrategy) -> TimestampsAndWatermarksOperator:
    op = TimestampsAndWatermarksOperator(cloudpickle.loads(cloudpickle.dumps(strategy)))
    op.setup(OperatorContext("ts", 0, 1, 128, 0, {}))
    op.open()
    return op


# -- the public strategy ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "bound", [Duration.of_millis(250), dt.timedelta(milliseconds=250), Time.milliseconds(250), 250]
)
def test_bounded_out_of_orderness_accepts_durations(bound):
    op = make_op(
        WatermarkStrategy.for_bounded_out_of_orderness(bound).with_timestamp_assigner(ByField())
    )
    op.process_batch_ts([("a", 1000), ("a", 400)], None)
    assert op.output_watermark(MIN_WATERMARK, None) == (1000 - 250 - 1, False)


def test_monotonous_watermark_trails_max_timestamp_by_one():
    op = make_op(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ByField()))
    assert op.output_watermark(MIN_WATERMARK, None) == (MIN_WATERMARK, False)
    out, ts = op.process_batch_ts([("a", 5), ("b", 9), ("c", 7)], None)
    assert out == [("a", 5), ("b", 9), ("c", 7)] and ts == [5, 9, 7]
    assert op.output_watermark(MIN_WATERMARK, None) == (8, False)
    # the watermark never goes back: smaller timestamps later do not lower it
    op.process_batch_ts([("d", 1)], None)
    assert op.output_watermark(MIN_WATERMARK, None) == (8, False)


def test_callable_assigner_gets_the_previous_timestamp():
    def assign(value, record_timestamp):
        return value * 10 if record_timestamp == MIN_WATERMARK else record_timestamp + 1

    op = make_op(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(assign))
    _, ts = op.process_batch_ts([1, 2], [None, 77])
    assert ts == [10, 78]


def test_no_assigner_keeps_record_timestamps():
    op = make_op(WatermarkStrategy.for_monotonous_timestamps())
    _, ts = op.process_batch_ts(["x", "y"], [5, None])
    assert ts == [5, MIN_WATERMARK]


def test_no_watermarks_emits_none_but_the_final_one():
    op = make_op(WatermarkStrategy.no_watermarks().with_timestamp_assigner(ByField()))
    op.process_batch_ts([("a", 100)], None)
    assert op.output_watermark(MIN_WATERMARK, None) == (None, False)
    assert op.output_watermark(MAX_WATERMARK, None) == (MAX_WATERMARK, False)


def test_assigner_returning_a_non_int_is_a_typed_error():
    op = make_op(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, t: 1.5)
    )
    with pytest.raises(TimestampError, match="int milliseconds"):
        op.process_batch_ts([1], None)


class ByFieldPlusZero(TimestampAssigner):
    """ByField's timestamps through a body that is more than a field read."""

    def extract_timestamp(self, value, record_timestamp):
        return value[1] + 0


def test_a_field_reading_assigner_stamps_as_the_general_path_does():
    """ByField's body is only ``value[1]``: it runs as an itemgetter; the timestamps, the
    watermark and the typed error are those of an assigner called per record."""
    batch = [("a", 5), ("b", 9), ("c", 7)]
    fast, slow = (
        make_op(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(a))
        for a in (ByField(), ByFieldPlusZero())
    )
    assert fast.field is not None and slow.field is None
    for previous in (None, [1, None, 3]):
        assert fast.process_batch_ts(batch, previous) == slow.process_batch_ts(batch, previous)
    assert fast.output_watermark(MIN_WATERMARK, None) == slow.output_watermark(MIN_WATERMARK, None)
    with pytest.raises(ValueError, match="3 records but 2 timestamps"):
        fast.process_batch_ts(batch, [1, 2])
    with pytest.raises(TimestampError, match="returned float 1.5"):
        fast.process_batch_ts([("d", 1.5)], None)


def test_strategy_errors():
    with pytest.raises(ConfigurationError, match="max_out_of_orderness"):
        WatermarkStrategy.for_bounded_out_of_orderness("5s")
    with pytest.raises(ConfigurationError, match="must be positive"):
        WatermarkStrategy.for_monotonous_timestamps().with_idleness(0)
    with pytest.raises(ConfigurationError, match="TimestampAssigner"):
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(42)
    with pytest.raises(ConfigurationError, match="alignment"):
        WatermarkStrategy.for_monotonous_timestamps().with_watermark_alignment("g", 10)


def test_public_names():
    assert OutputTag("late") == OutputTag("late") and hash(OutputTag("a")) == hash(OutputTag("a"))
    assert pickle.loads(pickle.dumps(OutputTag("x"))).tag_id == "x"
    with pytest.raises(ValueError, match="empty"):
        OutputTag("")
    assert [d.name for d in TimeDomain] == ["EVENT_TIME", "PROCESSING_TIME"]


# -- idleness ----------------------------------------------------------------------------------


def test_idleness_after_timeout_and_back_with_records():
    g = BoundedOutOfOrdernessGenerator(0, idle_timeout_ms=1000)
    g.on_timestamps([50], now_ms=10_000)
    assert g.current(10_500) == (49, False)
    assert g.current(11_000) == (None, True)  # 1000 ms without records
    g.on_timestamps([60], now_ms=12_000)
    assert g.current(12_000) == (59, False)


def test_idle_clock_starts_with_the_job_when_no_record_ever_came():
    g = BoundedOutOfOrdernessGenerator(0, idle_timeout_ms=100)
    assert g.current(1_000) == (MIN_WATERMARK, False)
    assert g.current(1_099) == (MIN_WATERMARK, False)
    assert g.current(1_100) == (None, True)


# -- combining channels ------------------------------------------------------------------------


def test_combine_is_min_over_active_channels():
    chans = [ChannelWatermark(10), ChannelWatermark(3, idle=True), ChannelWatermark(7)]
    assert combine_channels(chans) == (7, False)
    assert combine_channels([ChannelWatermark(3, True), ChannelWatermark(4, True)]) == (None, True)
    assert combine_channels([]) == (None, False)


@given(st.lists(st.tuples(st.integers(-(10**6), 10**6), st.booleans()), min_size=1, max_size=8))
def test_combine_property(chans):
    wm, idle = combine_channels([ChannelWatermark(w, i) for w, i in chans])
    active = [w for w, i in chans if not i]
    if active:
        assert (wm, idle) == (min(active), False)
    else:
        assert (wm, idle) == (None, True)


def test_merge_states_is_conservative():
    merged = merge_states(
        [
            {"wm": 10, "gen": {"max": 30, "active": 5}},
            {"wm": 4, "gen": {"max": 20, "active": 9}},
            {"wm": 12},
        ]
    )
    assert merged == {"wm": 4, "gen": {"max": 20, "active": 9}}
    assert merge_states([]) == {}


def test_generator_state_round_trip():
    op = make_op(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ByField()))
    op.process_batch_ts([("a", 500)], None)
    snap = op.snapshot_watermark_state()
    op2 = make_op(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ByField()))
    op2.restore_watermark_state(pickle.loads(pickle.dumps(snap)))
    assert op2.output_watermark(MIN_WATERMARK, None) == (499, False)
