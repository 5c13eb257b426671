"""Async I/O (AsyncDataStream, AsyncFunction, AsyncRetryStrategy) on the in-process
runner: order, capacity, timeouts and retries."""

from __future__ import annotations

import asyncio

import pytest

from streamstate.common import Time, Types
from streamstate.datastream import AsyncDataStream, AsyncFunction, AsyncRetryStrategy
from streamstate.errors import ConfigurationError, JobExecutionError
from tests.support.envs import make_env


class _Lookup(AsyncFunction):
    """Later inputs finish first, so completion order differs from input order."""

    def open(self, runtime_context):
        self.in_flight = 0
        self.max_in_flight = 0

    async def async_invoke(self, value):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.001 * (10 - value))
        self.in_flight -= 1
        return [value * 10, self.max_in_flight]


def _values(results):
    return [r for r in results if r % 10 == 0]


def test_ordered_wait_keeps_input_order_and_unordered_does_not():
    env = make_env(parallelism=1)
    ds = env.from_collection(list(range(1, 10)))
    ordered = AsyncDataStream.ordered_wait(ds, _Lookup(), Time.seconds(5), capacity=9)
    assert _values(ordered.execute_and_collect(limit=18)) == [v * 10 for v in range(1, 10)]
    env = make_env(parallelism=1)
    ds = env.from_collection(list(range(1, 10)))
    unordered = AsyncDataStream.unordered_wait(ds, _Lookup(), Time.seconds(5), capacity=9)
    values = _values(unordered.execute_and_collect(limit=18))
    assert sorted(values) == [v * 10 for v in range(1, 10)]
    assert values[0] == 90  # the shortest sleep completed first


def test_capacity_bounds_calls_in_flight():
    env = make_env(parallelism=1)
    ds = env.from_collection(list(range(1, 10)))
    out = AsyncDataStream.ordered_wait(ds, _Lookup(), Time.seconds(5), capacity=2)
    in_flight = [r for r in out.execute_and_collect(limit=18) if r % 10 != 0]
    assert max(in_flight) == 2


class _Slow(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(10)
        return [value]

    def timeout(self, value):
        return [("timed out", value)]


def test_timeout_calls_the_functions_timeout():
    env = make_env(parallelism=1)
    ds = env.from_collection([1, 2])
    out = AsyncDataStream.unordered_wait(ds, _Slow(), 20, capacity=2)  # 20 ms
    assert sorted(out.execute_and_collect(limit=2)) == [("timed out", 1), ("timed out", 2)]


class _Flaky(AsyncFunction):
    def __init__(self):
        self.calls = {}

    async def async_invoke(self, value):
        n = self.calls[value] = self.calls.get(value, 0) + 1
        if n < 3:
            raise ConnectionError(f"try {n}")
        return [(value, n)]


def test_retry_strategy_retries_matching_exceptions_then_fails_past_max_attempts():
    retry = AsyncRetryStrategy.fixed_delay(
        3, 1, exception_predicate=lambda e: isinstance(e, ConnectionError)
    )
    env = make_env(parallelism=1)
    ds = env.from_collection([7])
    out = AsyncDataStream.ordered_wait_with_retry(ds, _Flaky(), Time.seconds(5), retry)
    assert out.execute_and_collect(limit=1) == [(7, 3)]

    env = make_env(parallelism=1, restarts=0)
    ds = env.from_collection([7])
    once = AsyncRetryStrategy.fixed_delay(1, 1, exception_predicate=lambda e: True)
    out = AsyncDataStream.unordered_wait_with_retry(ds, _Flaky(), Time.seconds(5), once)
    with pytest.raises(JobExecutionError, match="ConnectionError: try 2"):
        out.execute_and_collect(limit=1)


class _Empty(AsyncFunction):
    def __init__(self):
        self.calls = 0

    async def async_invoke(self, value):
        self.calls += 1
        return [] if self.calls < 2 else [value]


def test_result_predicate_retries_and_output_type_is_declared():
    retry = AsyncRetryStrategy.exponential_backoff(
        4, 1, 8, 2.0, result_predicate=lambda outputs: not outputs
    )
    assert [retry.get_backoff_time_millis(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 8, 8]
    assert retry.can_retry(4) and not retry.can_retry(5)
    assert not AsyncRetryStrategy.no_restart().can_retry(1)
    env = make_env(parallelism=1)
    ds = env.from_collection(["x"])
    out = AsyncDataStream.ordered_wait_with_retry(
        ds, _Empty(), Time.seconds(5), retry, output_type=Types.STRING()
    )
    assert out.get_type() == Types.STRING()
    assert out.execute_and_collect(limit=1) == ["x"]


def test_bad_arguments_are_configuration_errors():
    ds = make_env().from_collection([1])
    with pytest.raises(ConfigurationError, match="AsyncFunction"):
        AsyncDataStream.ordered_wait(ds, lambda v: v, Time.seconds(1))
    with pytest.raises(ConfigurationError, match="capacity"):
        AsyncDataStream.ordered_wait(ds, _Slow(), Time.seconds(1), capacity=0)
    with pytest.raises(ConfigurationError, match="greater than zero"):
        AsyncRetryStrategy.fixed_delay(0, 1)


class _Pair(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(0)
        return [("all", value)]


def test_async_outputs_keep_their_inputs_event_timestamps():
    from streamstate.common import WatermarkStrategy
    from streamstate.datastream import TumblingEventTimeWindows

    env = make_env(parallelism=1, max_records=3)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        lambda v, t: v * 1000
    )
    ds = env.from_collection(list(range(10))).assign_timestamps_and_watermarks(strategy)
    pairs = AsyncDataStream.unordered_wait(ds, _Pair(), Time.seconds(5))
    sums = (
        pairs.key_by(lambda p: p[0])
        .window(TumblingEventTimeWindows.of(Time.seconds(5)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    assert sorted(sums.execute_and_collect(limit=2)) == [("all", 10), ("all", 35)]
