"""The window operator driven directly (no Spark): elements, watermarks, restore, rescale.

Every test runs on every registered keyed backend (heap and RocksDB)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest

from streamstate.common.time import Time
from streamstate.datastream.data_stream import AllWindowedStream, WindowedStream
from streamstate.datastream.functions import (
    AggregateFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.datastream.window import (
    ContinuousEventTimeTrigger,
    CountWindow,
    EventTimeSessionWindows,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    PurgingTrigger,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from streamstate.errors import ConfigurationError, StateAccessError
from streamstate.runtime.checkpoint.handles import (
    ByteStreamStateHandle,
    KeyGroupsStateHandle,
    handle_from_dict,
)
from streamstate.runtime.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from streamstate.runtime.operators.base import OperatorContext
from streamstate.runtime.serializers.key import default_key_serializer
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.registry import create_keyed_backend, registered_keyed_backends

MAX_P = 128


class _Backends:
    """The keyed backend kind the harnesses create (set per test by ``_each_backend``)."""

    kind = "hashmap"
    local_dir: str | None = None
    made: list[Any] = []


@pytest.fixture(autouse=True, params=registered_keyed_backends())
def _each_backend(request: Any) -> Any:
    from tests.support.backends import fast_local_dir

    _Backends.kind = request.param
    _Backends.made = []
    _Backends.local_dir = fast_local_dir() if request.param == "rocksdb" else None
    yield request.param
    for b in _Backends.made:
        b.dispose()
    if _Backends.local_dir is not None:
        import shutil

        shutil.rmtree(_Backends.local_dir, ignore_errors=True)
    _Backends.kind, _Backends.local_dir = "hashmap", None


def ns_entries(backend: Any, state: str, namespace: Any = None) -> list[Any]:
    """Keys holding state ``state`` in ``namespace`` (every namespace when ``None``)."""
    out: list[Any] = []
    store = backend.store(state)
    for kgi in range(len(backend.key_group_range)):
        for ns, keys, _ in store.entries(kgi):
            if namespace is None or ns == namespace:
                out.extend(keys)
    return out


class Tag:
    """A stand-in OutputTag (the real one arrives with the side-output plumbing)."""

    def __init__(self, tag_id: str) -> None:
        self.tag_id = tag_id


class Harness:
    """One window operator subtask: feed elements and watermarks, snapshot, restore."""

    def __init__(
        self,
        build: Any,
        kg_range: KeyGroupRange | None = None,
        handles: Any = (),
        watermark: int | None = None,
    ) -> None:
        """``watermark``: the restored watermark (as the task hands it to an instance)."""
        self.build = build
        extra = {"local_dir": _Backends.local_dir} if _Backends.local_dir else {}
        self.backend = create_keyed_backend(
            _Backends.kind,
            operator_name="win",
            key_group_range=kg_range or KeyGroupRange(0, MAX_P - 1),
            max_parallelism=MAX_P,
            key_serializer=default_key_serializer(),
            **extra,
        )
        _Backends.made.append(self.backend)
        if handles:
            self.backend.restore(list(handles))
        self.op = build()
        self.side: list[tuple[str, Any, Any]] = []
        self.op.emit_side = lambda tag_id, v, ts: self.side.append((tag_id, v, ts))
        self.ctx = OperatorContext("win", 0, 1, MAX_P, 0, {}, self.backend)
        if watermark is not None:
            self.ctx.current_watermark = watermark
        self.op.setup(self.ctx)
        self.op.open()
        self.out: list[tuple[Any, Any]] = []

    def elements(self, items: Iterable[tuple[Any, Any, Any]]) -> None:
        """``(key, value, timestamp)`` triples."""
        batch, ts = [], []
        for key, value, t in items:
            batch.append((self.backend.key_group_of(key), key, value))
            ts.append(t)
        out, out_ts = self.op.process_batch_ts(batch, ts)
        assert len(out) == len(out_ts)
        self.out.extend(zip(out, out_ts, strict=True))

    def watermark(self, wm: int) -> None:
        out = self.op.process_watermark(wm)
        self.out.extend(zip(out, self.op.hook_timestamps, strict=True))

    def processing_time(self, now: int) -> None:
        self.ctx.processing_time = now  # as the task: the epoch's driver time
        out = self.op.on_processing_time(now)
        self.out.extend(zip(out, self.op.hook_timestamps, strict=True))

    def handle(self) -> KeyGroupsStateHandle:
        self.op.snapshot_state(None, 0)  # as an epoch's commit does before the snapshot
        snap = self.backend.snapshot()
        h = KeyGroupsStateHandle(
            ByteStreamStateHandle.of(snap.data),
            self.backend.key_group_range,
            snap.offsets,
            snap.meta,
        )
        return handle_from_dict(json.loads(json.dumps(h.to_dict())))


class FakeKeyed:
    """Just enough of a KeyedStream for WindowedStream to build its operator factory."""

    def __init__(self) -> None:
        self.factory: Any = None

    def get_execution_environment(self) -> Any:
        return None

    def _keyed(self, name: str, factory: Any, *types: Any) -> Any:
        self.factory = factory

        class _DS:
            class _T:
                parallelism = None

            _t = _T()

        return _DS()

    def key_by(self, selector: Any) -> FakeKeyed:
        return self


def windowed(assigner: Any, configure: Any, all_windows: bool = False) -> Any:
    """The operator factory of ``assigner`` configured by ``configure(windowed_stream)``."""
    fk = FakeKeyed()
    ws = AllWindowedStream(fk, assigner) if all_windows else WindowedStream(fk, assigner)  # type: ignore[arg-type]
    configure(ws)
    return fk.factory


def count_reduce(ws: Any) -> Any:
    return ws.reduce(lambda a, b: (a[0], a[1] + b[1]))


# ------------------------------------------------------------------ tumbling event time


def test_tumbling_event_time_counts_fire_at_watermark() -> None:
    h = Harness(windowed(TumblingEventTimeWindows.of(Time.milliseconds(10)), count_reduce))
    h.elements([("a", ("a", 1), 1), ("b", ("b", 1), 3), ("a", ("a", 1), 9), ("a", ("a", 1), 12)])
    assert h.out == []
    h.watermark(8)
    assert h.out == []
    h.watermark(9)
    assert sorted(h.out) == [(("a", 2), 9), (("b", 1), 9)]
    h.out.clear()
    h.watermark(100)
    assert h.out == [(("a", 1), 19)]
    # everything was cleaned up: no timers, no window contents left
    assert h.op.timers.num_event_time_timers() == 0
    h.backend.snapshot()
    assert ns_entries(h.backend, "window-contents", TimeWindow(0, 10)) == []


def test_allowed_lateness_refires_and_late_side_output() -> None:
    tag = Tag("late")
    h = Harness(
        windowed(
            TumblingEventTimeWindows.of(10),
            lambda ws: (
                ws.allowed_lateness(5)
                .side_output_late_data(tag)
                .reduce(lambda a, b: (a[0], a[1] + b[1]))
            ),
        )
    )
    h.elements([("a", ("a", 1), 2)])
    h.watermark(10)
    assert h.out == [(("a", 1), 9)]
    # late but within the allowed lateness: added, and the window fires again at once
    h.elements([("a", ("a", 1), 4)])
    assert h.out[-1] == (("a", 2), 9)
    h.watermark(14)  # cleanup time is 9 + 5 = 14: the window is gone
    h.elements([("a", ("a", 1), 5)])
    assert h.side == [("late", ("a", 1), 5)]
    assert len(h.out) == 2
    assert h.op.timers.num_event_time_timers() == 0


def test_late_elements_are_dropped_and_counted_without_side_output() -> None:
    h = Harness(windowed(TumblingEventTimeWindows.of(10), count_reduce))
    h.watermark(50)
    h.elements([("a", ("a", 1), 3)])
    assert h.out == [] and h.side == []
    assert h.op.num_late_records_dropped == 1


def test_sliding_windows_with_aggregate_and_window_function() -> None:
    class Avg(AggregateFunction):
        def create_accumulator(self) -> Any:
            return (0, 0)

        def add(self, value: Any, accumulator: Any) -> Any:
            return accumulator[0] + value, accumulator[1] + 1

        def get_result(self, accumulator: Any) -> Any:
            return accumulator[0] / accumulator[1]

        def merge(self, acc_a: Any, acc_b: Any) -> Any:
            return acc_a[0] + acc_b[0], acc_a[1] + acc_b[1]

    class WithWindow(WindowFunction):
        def apply(self, key: Any, window: Any, inputs: Any) -> Any:
            yield key, window.start, window.end, list(inputs)

    h = Harness(
        windowed(SlidingEventTimeWindows.of(20, 10), lambda ws: ws.aggregate(Avg(), WithWindow()))
    )
    h.elements([("k", 10, 5), ("k", 20, 15), ("k", 30, 25)])
    h.watermark(1000)
    assert [v for v, _ in h.out] == [
        ("k", -10, 10, [10.0]),
        ("k", 0, 20, [15.0]),
        ("k", 10, 30, [25.0]),
        ("k", 20, 40, [30.0]),
    ]
    assert [t for _, t in h.out] == [9, 19, 29, 39]


def test_process_window_function_context_and_state() -> None:
    seen_clear: list[Any] = []

    class P(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Any) -> Any:
            fired = context.window_state().get_state(ValueStateDescriptor("fired"))
            n = (fired.value() or 0) + 1
            fired.update(n)
            total = context.global_state().get_state(ValueStateDescriptor("total"))
            total.update((total.value() or 0) + len(elements))
            yield (
                key,
                context.window().start,
                sorted(elements),
                n,
                total.value(),
                (context.current_watermark()),
            )

        def clear(self, context: Any) -> None:
            seen_clear.append(context.window())
            context.window_state().get_state(ValueStateDescriptor("fired")).clear()

    h = Harness(
        windowed(
            TumblingEventTimeWindows.of(10),
            lambda ws: (
                ws.trigger(ContinuousEventTimeTrigger.of(5)).allowed_lateness(20).process(P())
            ),
        )
    )
    h.elements([("k", 1, 1), ("k", 2, 2), ("k", 7, 7)])
    h.watermark(5)
    h.watermark(9)
    h.watermark(100)
    assert [v for v, _ in h.out] == [
        ("k", 0, [1, 2, 7], 1, 3, 5),
        ("k", 0, [1, 2, 7], 2, 6, 9),
    ]
    assert seen_clear == [TimeWindow(0, 10)]
    h.backend.snapshot()
    assert ns_entries(h.backend, "fired", TimeWindow(0, 10)) == []
    assert ns_entries(h.backend, "total", VOID_NAMESPACE) == ["k"]


def test_purging_trigger_empties_the_window() -> None:
    h = Harness(
        windowed(
            GlobalWindows.create(),
            lambda ws: ws.trigger(PurgingTrigger.of(_EveryTwo())).reduce(lambda a, b: a + b),
        )
    )
    h.elements([("k", 1, None), ("k", 2, None), ("k", 3, None), ("k", 4, None), ("k", 5, None)])
    assert [v for v, _ in h.out] == [3, 7]


class _EveryTwo(ContinuousEventTimeTrigger):
    """A trigger firing every second element (uses the count trigger's logic)."""

    def __init__(self) -> None:
        from streamstate.datastream.window import CountTrigger

        self.inner = CountTrigger.of(2)

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> Any:
        return self.inner.on_element(element, timestamp, window, ctx)

    def on_event_time(self, time: int, window: Any, ctx: Any) -> Any:
        return self.inner.on_event_time(time, window, ctx)

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> Any:
        return self.inner.on_processing_time(time, window, ctx)

    def clear(self, window: Any, ctx: Any) -> None:
        self.inner.clear(window, ctx)


# ------------------------------------------------------------------ count windows


def test_count_tumbling_and_sliding_windows_per_key() -> None:
    class Collect(WindowFunction):
        def apply(self, key: Any, window: Any, inputs: Any) -> Any:
            yield key, window.id, list(inputs)

    from streamstate.datastream.window import CountTumblingWindowAssigner

    h = Harness(windowed(CountTumblingWindowAssigner.of(3), lambda ws: ws.apply(Collect())))
    h.elements([("a", i, None) for i in range(7)] + [("b", i, None) for i in range(3)])
    assert [v for v, _ in h.out] == [
        ("a", 0, [0, 1, 2]),
        ("a", 1, [3, 4, 5]),
        ("b", 0, [0, 1, 2]),
    ]
    from streamstate.datastream.window import CountSlidingWindowAssigner

    h2 = Harness(windowed(CountSlidingWindowAssigner.of(3, 2), lambda ws: ws.apply(Collect())))
    h2.elements([("a", i, None) for i in range(7)])
    assert [v for v, _ in h2.out] == [
        ("a", 0, [0, 1, 2]),
        ("a", 1, [2, 3, 4]),
        ("a", 2, [4, 5, 6]),
    ]
    assert CountWindow(0).max_timestamp() > 0


# ------------------------------------------------------------------ sessions


def session_counts(ws: Any) -> Any:
    class Sess(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Any) -> Any:
            w = context.window()
            yield key, w.start, w.end, sorted(elements)

    return ws.process(Sess())


def test_event_time_sessions_merge_with_their_state() -> None:
    h = Harness(windowed(EventTimeSessionWindows.with_gap(Time.milliseconds(10)), session_counts))
    h.elements([("a", 1, 1), ("a", 25, 25), ("b", 2, 2)])
    h.elements([("a", 8, 8)])  # [8,18) extends [1,11) to [1,18)
    assert len(h.op.merging_sets_state.items()) == 2
    h.elements([("a", 16, 16)])  # [16,26) bridges [1,18) and [25,35)
    h.watermark(1000)
    assert sorted(v for v, _ in h.out) == [("a", 1, 35, [1, 8, 16, 25]), ("b", 2, 12, [2])]
    assert sorted(t for _, t in h.out) == [11, 34]
    assert h.op.timers.num_event_time_timers() == 0
    h.backend.snapshot()
    for name in ("window-contents", "merging-window-set"):
        assert ns_entries(h.backend, name) == [], name


def test_session_merge_survives_restore_between_elements() -> None:
    build = windowed(EventTimeSessionWindows.with_gap(10), session_counts)
    ref = Harness(build)
    ref.elements([("a", 1, 1), ("a", 30, 30)])
    ref.elements([("a", 20, 20), ("a", 5, 5)])
    ref.watermark(1000)

    h1 = Harness(build)
    h1.elements([("a", 1, 1), ("a", 30, 30)])
    h1.watermark(0)
    h2 = Harness(build, handles=[h1.handle()])
    h2.watermark(0)
    h2.elements([("a", 20, 20), ("a", 5, 5)])
    h2.watermark(1000)
    assert h2.out == ref.out
    assert sorted(ref.out) == [(("a", 1, 15, [1, 5]), 14), (("a", 20, 40, [20, 30]), 39)]


def test_merging_assigner_rejects_window_state_and_non_merging_triggers() -> None:
    class P(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Any) -> Any:
            context.window_state().get_state(ValueStateDescriptor("x"))
            return []

    h = Harness(windowed(EventTimeSessionWindows.with_gap(10), lambda ws: ws.process(P())))
    h.elements([("a", 1, 1)])
    with pytest.raises(StateAccessError, match="merging windows"):
        h.watermark(100)

    class NoMerge(ContinuousEventTimeTrigger):
        def can_merge(self) -> bool:
            return False

    with pytest.raises(TypeError, match="does not support merging"):
        windowed(
            EventTimeSessionWindows.with_gap(10),
            lambda ws: ws.trigger(NoMerge(5)).reduce(lambda a, b: a),
        )


def test_processing_time_windows_and_sessions() -> None:
    h = Harness(windowed(TumblingProcessingTimeWindows.of(100), count_reduce))
    h.processing_time(1000)
    h.elements([("a", ("a", 1), None), ("a", ("a", 1), None)])
    h.processing_time(1050)
    h.elements([("a", ("a", 1), None)])
    assert h.out == []
    h.processing_time(1099)
    assert h.out == [(("a", 3), 1099)]
    s = Harness(windowed(ProcessingTimeSessionWindows.with_gap(50), session_counts))
    s.processing_time(1000)
    s.elements([("a", 1, None)])
    s.processing_time(1030)
    s.elements([("a", 2, None)])
    s.processing_time(1078)
    assert s.out == []
    s.processing_time(1079)
    assert s.out == [(("a", 1000, 1080, [1, 2]), 1079)]


# ------------------------------------------------------------------ restore and rescale


def _events(n_keys: int, n: int) -> list[tuple[str, tuple[str, int], int]]:
    # out of order within a bound of 7 ms
    return [(f"k{i % n_keys}", (f"k{i % n_keys}", 1), i * 3 - (i * 7) % 8) for i in range(n)]


def test_restore_and_rescale_give_the_failure_free_result() -> None:
    build = windowed(
        TumblingEventTimeWindows.of(20),
        lambda ws: (
            ws.allowed_lateness(5)
            .side_output_late_data(Tag("late"))
            .reduce(lambda a, b: (a[0], a[1] + b[1]))
        ),
    )
    events = _events(13, 300)
    chunks = [events[i : i + 50] for i in range(0, 300, 50)]
    wms = [c[-1][2] - 10 for c in chunks]

    ref = Harness(build)
    for c, wm in zip(chunks, wms, strict=True):
        ref.elements(c)
        ref.watermark(wm)
    ref.watermark(1 << 40)

    # first half on one subtask, then restore into 3 subtasks (rescale)
    h = Harness(build)
    for c, wm in zip(chunks[:3], wms[:3], strict=True):
        h.elements(c)
        h.watermark(wm)
    handle = h.handle()
    outs = list(h.out)
    sides = list(h.side)
    parts = []
    for idx in range(3):
        rng = compute_key_group_range_for_operator_index(MAX_P, 3, idx)
        p = Harness(build, rng, [handle])
        p.watermark(wms[2])  # the restored watermark
        parts.append(p)
    for c, wm in zip(chunks[3:], wms[3:], strict=True):
        for p in parts:
            rng = p.backend.key_group_range
            p.elements([e for e in c if p.backend.key_group_of(e[0]) in rng])
            p.watermark(wm)
    for p in parts:
        p.watermark(1 << 40)
        outs.extend(p.out)
        sides.extend(p.side)
    assert sorted(outs) == sorted(ref.out)
    assert sorted(sides) == sorted(ref.side)
    assert sum(v[1] for v, _ in ref.out) + len(ref.side) == 300


def test_window_all_process_all_window_function() -> None:
    class P(ProcessAllWindowFunction):
        def process(self, context: Any, elements: Any) -> Any:
            yield context.window().start, sum(elements)

    h = Harness(windowed(TumblingEventTimeWindows.of(10), lambda ws: ws.process(P()), True))
    h.elements([(0, 1, 1), (0, 2, 12), (0, 3, 5)])
    h.watermark(100)
    assert [v for v, _ in h.out] == [(0, 4), (10, 2)]
    with pytest.raises(TypeError, match="ProcessAllWindowFunction"):
        windowed(TumblingEventTimeWindows.of(10), lambda ws: ws.process(object()), True)


def test_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="only valid for event-time"):
        windowed(
            TumblingProcessingTimeWindows.of(10), lambda ws: ws.allowed_lateness(5).reduce(max)
        )
    with pytest.raises(TypeError, match="WindowFunction"):
        windowed(TumblingEventTimeWindows.of(10), lambda ws: ws.reduce(max, object()))
    # a window's contents live in a merging kind of state (list, reducing, aggregating)
    from streamstate.runtime.windowing.operator import WindowOperator

    assigner = TumblingEventTimeWindows.of(10)
    trigger = assigner.get_default_trigger(None)
    with pytest.raises(ConfigurationError, match="not in value state"):
        WindowOperator(assigner, trigger, 0, None, ValueStateDescriptor("w"), None)


def test_purged_window_namespaces_do_not_accumulate() -> None:
    h = Harness(windowed(TumblingEventTimeWindows.of(10), count_reduce))
    for i in range(50):
        h.elements([("a", ("a", 1), i * 10 + 1), ("b", ("b", 1), i * 10 + 2)])
        h.watermark(i * 10 + 9)
        h.backend.snapshot_delta()
    assert len(h.out) == 100
    assert ns_entries(h.backend, "window-contents") == []
    # the change sets (and on the heap the namespaces) of purged windows are dropped: what
    # is left is the void namespace and the handle's window
    assert len(h.backend.store("window-contents").dirty) <= 3


def test_merge_namespaces_for_list_reducing_aggregating() -> None:
    from streamstate.datastream.state import (
        AggregatingStateDescriptor,
        ListStateDescriptor,
        ReducingStateDescriptor,
    )

    class Agg(AggregateFunction):
        def create_accumulator(self) -> Any:
            return []

        def add(self, value: Any, accumulator: Any) -> Any:
            return [*accumulator, value]

        def get_result(self, accumulator: Any) -> Any:
            return sorted(accumulator)

        def merge(self, acc_a: Any, acc_b: Any) -> Any:
            return acc_a + acc_b

    h = Harness(windowed(TumblingEventTimeWindows.of(10), count_reduce))
    b = h.backend
    b.set_current_key("k", b.key_group_of("k"))
    lst = b.get_partitioned_state(ListStateDescriptor("l"))
    red = b.get_partitioned_state(ReducingStateDescriptor("r", lambda x, y: x + y))
    agg = b.get_partitioned_state(AggregatingStateDescriptor("a", Agg()))
    w1, w2, w3 = TimeWindow(0, 1), TimeWindow(1, 2), TimeWindow(2, 3)
    for i, w in enumerate((w1, w2, w3)):
        for s in (lst, red, agg):
            s.set_current_namespace(w)
            s.add(i + 1)
    base = h.handle()
    for s in (lst, red, agg):
        s.merge_namespaces(w1, [w2, w3, w1])
        s.set_current_namespace(w1)
    assert sorted(lst.get()) == [1, 2, 3] and red.get() == 6 and agg.get() == [1, 2, 3]
    for s in (lst, red, agg):
        s.set_current_namespace(w2)
    assert list(lst.get()) == [] and red.get() is None and agg.get() is None
    # the merge is carried by a delta on top of the full snapshot
    delta = b.snapshot_delta()
    h2 = Harness(windowed(TumblingEventTimeWindows.of(10), count_reduce), handles=[base])
    h2.backend.apply_delta(delta)
    b2 = h2.backend
    b2.set_current_key("k", b2.key_group_of("k"))
    r2 = b2.get_partitioned_state(ReducingStateDescriptor("r", lambda x, y: x + y))
    r2.set_current_namespace(w1)
    assert r2.get() == 6
    r2.set_current_namespace(w3)
    assert r2.get() is None


class _GenericTumbling(TumblingEventTimeWindows):
    """A subclass: the operator takes the generic (per-element) path for it."""


class _CountAgg(AggregateFunction):
    def create_accumulator(self) -> Any:
        return 0

    def add(self, value: Any, accumulator: Any) -> Any:
        return accumulator + value[1]

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        return acc_a + acc_b


class _KeyWindowCount(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        for c in inputs:
            yield key, window.start, c


class _FiringsPerWindow(ProcessWindowFunction):
    """Counts its firings per (key, window) in per-window state; emits the elements."""

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        fired = context.window_state().get_state(ValueStateDescriptor("fired", None))
        fired.update((fired.value() or 0) + 1)
        yield key, context.window().start, [e[1] for e in elements], fired.value()

    def clear(self, context: Any) -> None:
        context.window_state().get_state(ValueStateDescriptor("fired", None)).clear()


#: window functions of each kind the fast path serves: reduce, aggregate with a
#: WindowFunction, process over list contents with per-window state
_FAST_PATH_FUNCTIONS = {
    "reduce": lambda ws: ws.reduce(lambda a, b: (a[0], a[1] + b[1])),
    "aggregate": lambda ws: ws.aggregate(_CountAgg(), _KeyWindowCount()),
    "process": lambda ws: ws.process(_FiringsPerWindow()),
}


@pytest.mark.parametrize("function", sorted(_FAST_PATH_FUNCTIONS))
@pytest.mark.parametrize("lateness", [0, 7, 10])
def test_tumbling_fast_path_equals_the_generic_path(lateness: int, function: str) -> None:
    """Same results in the same order, same late data, same state left, also across a
    restore between batches (a window's contents from before it are folded on) and with
    ``None`` elements (they reset a reduced value or an accumulator)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    tag = Tag("late")

    def configure(ws: Any) -> Any:
        return _FAST_PATH_FUNCTIONS[function](
            ws.allowed_lateness(lateness).side_output_late_data(tag)
        )

    keys = st.sampled_from(["a", "b", "c", "d", "e"])
    # list state refuses None elements (on both paths): None only for reduce / aggregate
    counts = st.integers(1, 3) if function == "process" else st.one_of(st.integers(1, 3), st.none())
    events = st.lists(st.tuples(keys, st.integers(0, 120), counts), max_size=60)
    batches = st.lists(st.tuples(st.integers(0, 130), st.booleans()), min_size=1, max_size=6)

    @settings(max_examples=40, deadline=None)
    @given(events, batches)
    def check(evs: list[tuple[str, int, int | None]], wms: list[tuple[int, bool]]) -> None:
        runs = []
        for assigner in (TumblingEventTimeWindows(10, 0), _GenericTumbling(10, 0)):
            build = windowed(assigner, configure)
            h = Harness(build)
            assert h.op._fast_tumbling is (type(assigner) is TumblingEventTimeWindows)
            out, dropped = [], 0
            chunks = [evs[i :: len(wms)] for i in range(len(wms))]
            for chunk, (wm, restore) in zip(chunks, wms, strict=True):
                h.elements([(k, None if n is None else (k, n), t) for k, t, n in chunk])
                h.watermark(wm)
                if restore:  # a new instance from a snapshot, as after a failure
                    out.extend(h.out)
                    dropped += h.op.num_late_records_dropped
                    side = h.side
                    restored_wm = h.op.timers.current_watermark()
                    h = Harness(build, handles=[h.handle()], watermark=restored_wm)
                    h.side = side
                    h.op.emit_side = lambda tag_id, v, ts, h=h: h.side.append((tag_id, v, ts))
            # the timers as a snapshot sees them (folded windows register theirs late)
            h.op.snapshot_state(None, 0)
            left = h.op.timers.num_event_time_timers()
            h.watermark(1 << 40)
            h.op.snapshot_state(None, 0)
            # every window's contents were cleaned up (none left in the state)
            contents = list(h.backend.get_keys_and_namespaces("window-contents"))
            runs.append(
                (out + h.out, h.side, dropped + h.op.num_late_records_dropped, left, contents)
            )
            assert h.op.timers.num_event_time_timers() == 0
        assert runs[0] == runs[1]

    check()


def test_folded_windows_from_the_state_and_new_fire_at_one_watermark() -> None:
    """A folded window that had contents in the state (restored) and a new one fire at
    one watermark, as on the generic path: the first through the timer queue, the other
    from its accumulators alone."""
    runs = []
    for assigner in (TumblingEventTimeWindows(10, 0), _GenericTumbling(10, 0)):
        build = windowed(assigner, _FAST_PATH_FUNCTIONS["aggregate"])
        h = Harness(build)
        h.elements([("a", ("a", 1), 1), ("b", ("b", 2), 2)])
        h = Harness(build, handles=[h.handle()])
        h.elements([("b", ("b", 3), 3), ("c", ("c", 4), 4), ("a", ("a", 5), 15)])
        h.watermark(100)
        runs.append((h.out, list(h.backend.get_keys_and_namespaces("window-contents"))))
    assert runs[0] == runs[1]
    assert sorted(r[0] for r in runs[0][0]) == [
        ("a", 0, 1),
        ("a", 10, 5),
        ("b", 0, 5),
        ("c", 0, 4),
    ]


def test_add_many_equals_sequential_adds() -> None:
    from streamstate.datastream.state import AggregatingStateDescriptor, ReducingStateDescriptor

    class Agg(AggregateFunction):
        def create_accumulator(self) -> Any:
            return []

        def add(self, value: Any, accumulator: Any) -> Any:
            return [*accumulator, value]

        def get_result(self, accumulator: Any) -> Any:
            return accumulator

        def merge(self, acc_a: Any, acc_b: Any) -> Any:
            return acc_a + acc_b

    values = [3, 1, None, 4, 1, 5]
    results = []
    for bulk in (False, True):
        h = Harness(windowed(TumblingEventTimeWindows.of(10), count_reduce))
        b = h.backend
        b.set_current_key("k", b.key_group_of("k"))
        red = b.get_partitioned_state(ReducingStateDescriptor("r", lambda x, y: x * 10 + y))
        agg = b.get_partitioned_state(AggregatingStateDescriptor("a", Agg()))
        for s in (red, agg):
            s.add(9)
            if bulk:
                s.add_many(values)
            else:
                for v in values:
                    s.add(v)
        results.append((red.get(), agg.get(), b.snapshot_delta() != b""))
    assert results[0] == results[1] == (415, [4, 1, 5], True)
