"""PyFlink declares its window classes ``Generic``; a ported job subscripts them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from streamstate.common import Duration, Types, WatermarkStrategy
from streamstate.common.watermark_strategy import TimestampAssigner
from streamstate.datastream.functions import (
    AllWindowFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)
from streamstate.datastream.window import (
    MergingWindowAssigner,
    TimeWindow,
    Trigger,
    TumblingEventTimeWindows,
    WindowAssigner,
)
from tests.support import envs


class _Ts(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[1])


class CountPerWindow(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    def process(
        self, key: str, context: ProcessWindowFunction.Context, elements: Iterable[tuple]
    ) -> Iterable[tuple]:
        yield key, context.window().start, len(list(elements))


def test_window_classes_are_subscriptable_as_in_pyflink() -> None:
    for alias in (
        ProcessWindowFunction[tuple, tuple, str, TimeWindow],
        WindowFunction[tuple, tuple, str, TimeWindow],
        AllWindowFunction[tuple, tuple, TimeWindow],
        ProcessAllWindowFunction[tuple, tuple, TimeWindow],
        WindowAssigner[tuple, TimeWindow],
        MergingWindowAssigner[tuple, TimeWindow],
        Trigger[tuple, TimeWindow],
        MergingWindowAssigner.MergeCallback[TimeWindow],
    ):
        assert alias.__origin__ is not None  # type: ignore[attr-defined]  # typing alias


def test_subscripted_process_window_function_runs() -> None:
    env = envs.make_env(1)
    data = [("a", 1), ("b", 2), ("a", 3), ("a", 12), ("b", 15)]
    ds = env.from_collection(data, Types.TUPLE([Types.STRING(), Types.INT()]))
    ws = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0))
    out = (
        ds.assign_timestamps_and_watermarks(ws.with_timestamp_assigner(_Ts()))
        .key_by(lambda v: v[0], key_type=Types.STRING())
        .window(TumblingEventTimeWindows.of(Duration.of_millis(10)))
        .process(CountPerWindow(), Types.TUPLE([Types.STRING(), Types.LONG(), Types.INT()]))
        .execute_and_collect()
    )
    with out as results:
        got = sorted(results)
    # windows [0, 10) and [10, 20): a has 2 then 1, b has 1 then 1
    assert got == [("a", 0, 2), ("a", 10, 1), ("b", 0, 1), ("b", 10, 1)]


def test_keyed_stream_partitioning_cannot_be_overridden_as_in_flink() -> None:
    import pytest

    from streamstate.errors import ConfigurationError

    env = envs.make_env(1)
    keyed = env.from_collection([("a", 1)]).key_by(lambda v: v[0])
    for method in ("shuffle", "rebalance", "forward", "broadcast"):
        with pytest.raises(ConfigurationError, match="Cannot override partitioning"):
            getattr(keyed, method)()
    # before key_by the same calls re-partition as usual
    assert env.from_collection([1]).rebalance().key_by(lambda v: v) is not None
