"""streamstate.testing.KeyedFunctionHarness: user functions on the real operators and backends."""

from __future__ import annotations

from typing import Any

import pytest

from streamstate.common import Types
from streamstate.datastream import KeyedProcessFunction, MapFunction, OutputTag, RuntimeContext
from streamstate.datastream.state import ListStateDescriptor, ValueStateDescriptor
from streamstate.errors import ConfigurationError, StateAccessError
from streamstate.runtime.state.registry import registered_keyed_backends
from streamstate.testing import KeyedFunctionHarness
from tests.support.backends import fast_local_dir

BIG = OutputTag("big", Types.STRING())
COUNT = ValueStateDescriptor("count", Types.LONG())
SEEN = ListStateDescriptor("seen", Types.INT())


class CountAndRemind(KeyedProcessFunction):
    """Counts per key; 10 ms after each element an event-time reminder emits the count."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(COUNT)
        self.seen = runtime_context.get_list_state(SEEN)

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Any:
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.seen.add(value[1])
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)
        if n == 3:
            ctx.output(BIG, f"{value[0]} reached 3")
        yield value[0], n

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Any:
        yield "reminder", ctx.get_current_key(), self.count.value(), timestamp


@pytest.fixture(params=registered_keyed_backends())
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "rocksdb":
        return {"state_backend": "rocksdb", "local_dir": fast_local_dir()}
    return {"state_backend": request.param}


def harness(backend: dict[str, Any], **kw: Any) -> KeyedFunctionHarness:
    return KeyedFunctionHarness(CountAndRemind(), lambda v: v[0], Types.STRING(), **backend, **kw)


def test_elements_state_timers_and_side_outputs(backend: dict[str, Any]) -> None:
    with harness(backend) as h:
        assert h.process_element(("a", 1), timestamp=100) == [("a", 1)]
        h.process_element(("a", 2), timestamp=105)
        h.process_element(("b", 7), timestamp=101)
        h.process_element(("a", 3), timestamp=106)
        assert h.get_state("a", COUNT) == 3 and h.get_state("b", COUNT) == 1
        assert h.get_state("a", SEEN) == [1, 2, 3] and h.get_state("zz", COUNT) is None
        assert h.get_side_output(BIG) == ["a reached 3"]
        assert h.num_event_time_timers() == 4
        assert h.event_time_timers()[0] == ("a", 110)
        # the watermark fires due timers in timestamp order, with the key set
        assert h.process_watermark(111) == [("reminder", "a", 3, 110), ("reminder", "b", 1, 111)]
        assert h.num_event_time_timers() == 2
        assert h.get_output()[-1] == (("reminder", "b", 1, 111), 111)
        assert h.get_output()[0] == (("a", 1), 100)  # outputs carry their input's timestamp
        assert h.process_watermark(111) == []  # the watermark never goes back


def test_snapshot_restores_at_another_parallelism(backend: dict[str, Any]) -> None:
    keys = [f"k{i}" for i in range(40)]
    with harness(backend) as h:
        for i, k in enumerate(keys):
            h.process_element((k, i), timestamp=1_000 + i)
        assert len(h.process_watermark(1_015)) == 6
        snap = h.snapshot()
        expected = {k: h.get_state(k, COUNT) for k in keys}
    seen: dict[str, int] = {}
    pending: list[Any] = []
    for idx in range(2):
        h2 = harness(backend, parallelism=2, subtask_index=idx).restore(snap)
        with h2:
            assert h2.current_watermark == 1_015
            for k in keys:
                try:
                    seen[k] = h2.get_state(k, COUNT)
                except ConfigurationError:
                    continue  # owned by the other subtask
            pending += h2.event_time_timers()
            out = h2.process_watermark(2_000)
            assert all(r[0] == "reminder" for r in out)
    assert seen == expected
    # timers not fired before the snapshot fire after the restore, each exactly once
    assert len(pending) == 40 - 6 and len({k for k, _ in pending}) == 34


def test_keyed_map_function_with_state(backend: dict[str, Any]) -> None:
    class Dedupe(MapFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.INT()))

        def map(self, value: Any) -> Any:
            changed = self.last.value() != value[1]
            self.last.update(value[1])
            return value[0], changed

    h = KeyedFunctionHarness(Dedupe(), lambda v: v[0], kind="map", **backend)
    with h:
        out = h.process_elements([("x", 1), ("x", 1), ("y", 1), ("x", 2)])
    assert out == [("x", True), ("x", False), ("y", True), ("x", True)]


def test_misuse_is_typed(backend: dict[str, Any]) -> None:
    h = harness(backend, parallelism=4, subtask_index=0)
    with h:
        with pytest.raises(ConfigurationError, match="does not own"):
            for i in range(50):  # some key of another subtask's key groups
                h.process_element((f"key-{i}", i), timestamp=0)
        with pytest.raises(StateAccessError, match="before the harness's first use"):
            h.restore(h.snapshot())
    with pytest.raises(ConfigurationError, match="unknown harness kind"):
        KeyedFunctionHarness(CountAndRemind(), lambda v: v[0], kind="window")
