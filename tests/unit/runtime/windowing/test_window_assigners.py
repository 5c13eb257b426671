"""Window assigners, windows and triggers (no Spark, no operator)."""

from __future__ import annotations

import datetime as dt
import pickle
from typing import Any

import pytest

from streamstate.common.time import Time
from streamstate.datastream.state import State
from streamstate.datastream.window import (
    ContinuousEventTimeTrigger,
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    CountWindow,
    DynamicEventTimeSessionWindows,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindow,
    GlobalWindows,
    NeverTrigger,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    PurgingTrigger,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
)
from streamstate.errors import ConfigurationError, TimestampError


class Ctx(WindowAssigner.WindowAssignerContext):
    def __init__(self, now: int = 0) -> None:
        self.now = now
        self.values: dict[str, Any] = {}

    def get_current_processing_time(self) -> int:
        return self.now

    def get_runtime_context(self) -> Any:
        ctx = self

        class _V:
            def __init__(self, name: str) -> None:
                self.name = name

            def value(self) -> Any:
                return ctx.values.get(self.name)

            def update(self, v: Any) -> None:
                ctx.values[self.name] = v

        class _RC:
            def get_state(self, d: Any) -> Any:
                return _V(d.name)

        return _RC()


def test_time_window_basics() -> None:
    w = TimeWindow(0, 10)
    assert w.max_timestamp() == 9
    assert w == TimeWindow(0, 10) and w != TimeWindow(0, 11) and w != (0, 10)
    assert len({w, TimeWindow(0, 10)}) == 1
    assert w.intersects(TimeWindow(10, 20)) and not w.intersects(TimeWindow(11, 20))
    assert w.cover(TimeWindow(5, 30)) == TimeWindow(0, 30)
    assert sorted([TimeWindow(5, 6), TimeWindow(0, 9), TimeWindow(0, 3)]) == [
        TimeWindow(0, 3),
        TimeWindow(0, 9),
        TimeWindow(5, 6),
    ]
    assert pickle.loads(pickle.dumps(w)) == w
    assert TimeWindow.get_window_start_with_offset(-1, 0, 10) == -10
    assert TimeWindow.get_window_start_with_offset(17, 3, 10) == 13
    assert CountWindow(3) == CountWindow(3) and CountWindow(3) != CountWindow(4)
    assert GlobalWindow.get() == GlobalWindow() and pickle.loads(pickle.dumps(GlobalWindow())) == (
        GlobalWindow()
    )


def test_tumbling_event_time() -> None:
    a = TumblingEventTimeWindows.of(Time.seconds(10))
    assert list(a.assign_windows("x", 12_345, Ctx())) == [TimeWindow(10_000, 20_000)]
    assert list(a.assign_windows("x", 0, Ctx())) == [TimeWindow(0, 10_000)]
    assert list(a.assign_windows("x", -1, Ctx())) == [TimeWindow(-10_000, 0)]
    off = TumblingEventTimeWindows.of(dt.timedelta(seconds=10), Time.seconds(2))
    assert list(off.assign_windows("x", 1_000, Ctx())) == [TimeWindow(-8_000, 2_000)]
    assert isinstance(a.get_default_trigger(None), EventTimeTrigger) and a.is_event_time()
    with pytest.raises(TimestampError, match="assign_timestamps_and_watermarks"):
        a.assign_windows("x", None, Ctx())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="abs\\(offset\\) < size"):
        TumblingEventTimeWindows.of(Time.seconds(1), Time.seconds(1))
    with pytest.raises(ConfigurationError, match="> 0"):
        TumblingEventTimeWindows.of(0)
    # the cached window object must not leak into a pickled assigner
    b = pickle.loads(pickle.dumps(a))
    assert list(b.assign_windows("x", 5, Ctx())) == [TimeWindow(0, 10_000)]


def test_tumbling_processing_time_uses_the_context_clock() -> None:
    a = TumblingProcessingTimeWindows.of(Time.milliseconds(100))
    assert list(a.assign_windows("x", None, Ctx(now=250))) == [TimeWindow(200, 300)]  # type: ignore[arg-type]
    assert not a.is_event_time()
    assert isinstance(a.get_default_trigger(None), ProcessingTimeTrigger)


def test_sliding_windows() -> None:
    a = SlidingEventTimeWindows.of(Time.seconds(10), Time.seconds(5))
    assert sorted(a.assign_windows("x", 12_000, Ctx())) == [
        TimeWindow(5_000, 15_000),
        TimeWindow(10_000, 20_000),
    ]
    b = SlidingEventTimeWindows.of(30, 10)
    assert sorted(b.assign_windows("x", 25, Ctx())) == [
        TimeWindow(0, 30),
        TimeWindow(10, 40),
        TimeWindow(20, 50),
    ]
    p = SlidingProcessingTimeWindows.of(30, 10)
    assert len(p.assign_windows("x", None, Ctx(now=25))) == 3  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        SlidingEventTimeWindows.of(10, 5, 5)


def test_session_assigners_and_merge_windows() -> None:
    a = EventTimeSessionWindows.with_gap(Time.milliseconds(10))
    assert list(a.assign_windows("x", 5, Ctx())) == [TimeWindow(5, 15)]
    merges: list[tuple[list[TimeWindow], TimeWindow]] = []

    class CB:
        def merge(self, to_be_merged: Any, merge_result: Any) -> None:
            merges.append((sorted(to_be_merged), merge_result))

    a.merge_windows(
        [TimeWindow(0, 10), TimeWindow(10, 20), TimeWindow(30, 40), TimeWindow(5, 12)], CB()
    )
    assert merges == [
        ([TimeWindow(0, 10), TimeWindow(5, 12), TimeWindow(10, 20)], TimeWindow(0, 20))
    ]
    p = ProcessingTimeSessionWindows.with_gap(dt.timedelta(milliseconds=7))
    assert list(p.assign_windows("x", None, Ctx(now=100))) == [TimeWindow(100, 107)]  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        EventTimeSessionWindows.with_gap(0)

    class Gap(SessionWindowTimeGapExtractor):
        def extract(self, element: Any) -> int:
            return int(element[1])

    d = EventTimeSessionWindows.with_dynamic_gap(Gap())
    assert isinstance(d, DynamicEventTimeSessionWindows)
    assert list(d.assign_windows(("k", 3), 10, Ctx())) == [TimeWindow(10, 13)]
    with pytest.raises(ConfigurationError, match="0 < gap"):
        d.assign_windows(("k", 0), 10, Ctx())
    pd = ProcessingTimeSessionWindows.with_dynamic_gap(Gap())
    assert list(pd.assign_windows(("k", 4), 0, Ctx(now=50))) == [TimeWindow(50, 54)]


def test_count_assigners() -> None:
    ctx = Ctx()
    t = CountTumblingWindowAssigner.of(3)
    ids = [next(iter(t.assign_windows(i, 0, ctx))).id for i in range(7)]
    assert ids == [0, 0, 0, 1, 1, 1, 2]
    ctx2 = Ctx()
    s = CountSlidingWindowAssigner.of(3, 2)
    got = [sorted(w.id for w in s.assign_windows(i, 0, ctx2)) for i in range(6)]
    # element n belongs to windows [id*2, id*2+2]
    assert got == [[0], [0], [0, 1], [1], [1, 2], [2]]
    g = GlobalWindows.create()
    assert list(g.assign_windows("x", 0, Ctx())) == [GlobalWindow.get()]
    assert isinstance(g.get_default_trigger(None), NeverTrigger)


# ------------------------------------------------------------------ triggers


class FakeState(State):
    def __init__(self, store: dict[Any, Any], key: Any, reduce: Any) -> None:
        self.store, self.key, self.reduce = store, key, reduce

    def get(self) -> Any:
        return self.store.get(self.key)

    def add(self, v: Any) -> None:
        cur = self.store.get(self.key)
        self.store[self.key] = v if cur is None else self.reduce(cur, v)

    def clear(self) -> None:
        self.store.pop(self.key, None)


class TCtx(Trigger.TriggerContext):
    def __init__(self) -> None:
        self.wm = -(1 << 63)
        self.now = 0
        self.event: set[int] = set()
        self.proc: set[int] = set()
        self.store: dict[Any, Any] = {}
        self.window: Any = None

    def get_current_processing_time(self) -> int:
        return self.now

    def get_metric_group(self) -> Any:
        return None

    def get_current_watermark(self) -> int:
        return self.wm

    def register_processing_time_timer(self, time: int) -> None:
        self.proc.add(time)

    def register_event_time_timer(self, time: int) -> None:
        self.event.add(time)

    def delete_processing_time_timer(self, time: int) -> None:
        self.proc.discard(time)

    def delete_event_time_timer(self, time: int) -> None:
        self.event.discard(time)

    def get_partitioned_state(self, state_descriptor: Any) -> Any:
        return FakeState(
            self.store,
            (state_descriptor.name, self.window),
            state_descriptor.get_reduce_function().reduce,
        )


def test_event_time_trigger() -> None:
    t, c, w = EventTimeTrigger.create(), TCtx(), TimeWindow(0, 10)
    assert t.on_element("x", 3, w, c) is TriggerResult.CONTINUE and c.event == {9}
    assert t.on_event_time(8, w, c) is TriggerResult.CONTINUE
    assert t.on_event_time(9, w, c) is TriggerResult.FIRE
    c.wm = 9
    assert t.on_element("late", 3, w, c) is TriggerResult.FIRE
    t.clear(w, c)
    assert c.event == set()
    assert TriggerResult.FIRE_AND_PURGE.is_fire() and TriggerResult.FIRE_AND_PURGE.is_purge()


def test_processing_time_and_purging_trigger() -> None:
    t, c, w = PurgingTrigger.of(ProcessingTimeTrigger.create()), TCtx(), TimeWindow(0, 10)
    assert t.on_element("x", 0, w, c) is TriggerResult.CONTINUE and c.proc == {9}
    assert t.on_processing_time(9, w, c) is TriggerResult.FIRE_AND_PURGE
    assert t.on_event_time(9, w, c) is TriggerResult.CONTINUE
    assert t.can_merge()


def test_count_trigger() -> None:
    t, c, w = CountTrigger.of(3), TCtx(), CountWindow(0)
    c.window = w
    results = [t.on_element(i, 0, w, c) for i in range(7)]
    assert [r is TriggerResult.FIRE for r in results] == [False, False, True] * 2 + [False]
    t.clear(w, c)
    assert c.store == {}


def test_continuous_event_time_trigger() -> None:
    t, c, w = ContinuousEventTimeTrigger.of(Time.milliseconds(10)), TCtx(), TimeWindow(0, 100)
    c.window = w
    assert t.on_element("x", 13, w, c) is TriggerResult.CONTINUE
    assert c.event == {99, 20}
    assert t.on_event_time(20, w, c) is TriggerResult.FIRE
    assert 30 in c.event
    assert t.on_event_time(25, w, c) is TriggerResult.CONTINUE
    assert t.on_event_time(99, w, c) is TriggerResult.FIRE
    t.clear(w, c)
    assert 30 not in c.event
