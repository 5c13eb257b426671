"""Restart strategies: public configuration values and runtime arithmetic (Flink's)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamstate.common import Configuration, Duration, Time
from streamstate.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from streamstate.datastream.config_options import restart_strategy_from_configuration
from streamstate.errors import ConfigurationError
from streamstate.runtime.restart import (
    ExponentialDelayRestartStrategy,
    FailureRateRestartStrategy,
    FixedDelayRestartStrategy,
    NoRestartStrategy,
    create_restart_strategy,
)


class Clock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


# -- configuration values ----------------------------------------------------------------------


def test_configurations_are_frozen_values():
    a = RestartStrategies.fixed_delay_restart(3, 1000)
    b = RestartStrategies.fixed_delay_restart(3, timedelta(seconds=1))
    c = RestartStrategies.fixed_delay_restart(3, Time.seconds(1))
    d = RestartStrategies.fixed_delay_restart(3, Duration.of_millis(1000))
    assert a == b == c == d and hash(a) == hash(b)
    assert isinstance(a, RestartStrategyConfiguration)
    assert a.get_restart_attempts() == 3
    assert a.get_delay_between_attempts_interval() == timedelta(seconds=1)
    with pytest.raises(AttributeError):
        a.restart_attempts = 5  # type: ignore[misc]
    assert RestartStrategies.no_restart() == RestartStrategies.no_restart()
    assert RestartStrategies.no_restart() != RestartStrategies.fall_back_restart()
    assert "fixed delay" in a.get_description()


def test_failure_rate_configuration():
    fr = RestartStrategies.failure_rate_restart(3, timedelta(minutes=5), timedelta(seconds=10))
    assert fr.get_max_failure_rate() == 3
    assert fr.get_failure_interval() == timedelta(minutes=5)
    assert fr.get_delay_between_attempts_interval() == timedelta(seconds=10)
    assert fr == RestartStrategies.failure_rate_restart(3, 300_000, 10_000)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RestartStrategies.fixed_delay_restart(-1, 10),
        lambda: RestartStrategies.fixed_delay_restart(1, -10),
        lambda: RestartStrategies.fixed_delay_restart(1, 1.5),
        lambda: RestartStrategies.fixed_delay_restart("3", 10),
        lambda: RestartStrategies.failure_rate_restart(0, 10, 10),
        lambda: RestartStrategies.failure_rate_restart(1, 0, 10),
        lambda: RestartStrategies.failure_rate_restart(1, timedelta(seconds=-1), 10),
    ],
)
def test_invalid_configurations(make):
    with pytest.raises(ConfigurationError):
        make()


# -- runtime arithmetic ------------------------------------------------------------------------


def test_no_restart():
    s = NoRestartStrategy()
    s.notify_failure(0)
    assert not s.can_restart()


def test_fixed_delay_exhausts_after_n():
    s = FixedDelayRestartStrategy(attempts=3, delay_ms=250)
    outcomes = []
    for t in range(5):
        s.notify_failure(t)
        outcomes.append(s.can_restart())
    assert outcomes == [True, True, True, False, False]
    assert s.get_backoff_time_ms() == 250
    assert s.failures == 5


def test_fixed_delay_zero_attempts():
    s = FixedDelayRestartStrategy(0, 0)
    s.notify_failure(0)
    assert not s.can_restart()


def test_failure_rate_window():
    clock = Clock()
    s = FailureRateRestartStrategy(
        max_failures_per_interval=3, interval_ms=1000, delay_ms=50, clock=clock
    )
    # Flink 2.x: 3 restarts within the interval are allowed, the 4th failure fails the job
    for t in (0, 100, 200):
        clock.now = t
        s.notify_failure()
        assert s.can_restart()
    clock.now = 1000  # 4th failure; the 1st is exactly `interval` old: still within
    s.notify_failure()
    assert not s.can_restart()
    clock.now = 1001  # ... and just outside
    assert s.can_restart()
    assert s.get_backoff_time_ms() == 50


def test_failure_rate_3_per_10s_fails_at_the_4th_failure():
    """The issue's case: failure_rate_restart(3, 10 s) allows 3 restarts."""
    s = create_restart_strategy(RestartStrategies.failure_rate_restart(3, 10_000, 0))
    decisions = []
    for i in range(4):
        s.notify_failure(now_ms=i * 1000)
        decisions.append(s.can_restart(now_ms=i * 1000))
    assert decisions == [True, True, True, False]


def test_failure_rate_spaced_failures_restart_forever():
    s = FailureRateRestartStrategy(2, interval_ms=100, delay_ms=0)
    for i in range(20):
        s.notify_failure(now_ms=i * 101)
        assert s.can_restart(now_ms=i * 101)


def test_failure_rate_burst_after_quiet_period():
    s = FailureRateRestartStrategy(2, interval_ms=100, delay_ms=0)
    s.notify_failure(0)
    s.notify_failure(500)
    assert s.can_restart(now_ms=500)
    s.notify_failure(550)
    assert s.can_restart(now_ms=550)  # 2 restarts within 100 ms are allowed
    s.notify_failure(560)
    assert not s.can_restart(now_ms=560)


def test_exponential_delay_grows_caps_and_resets():
    clock = Clock()
    s = ExponentialDelayRestartStrategy(
        initial_ms=100,
        max_ms=1000,
        multiplier=2.0,
        reset_threshold_ms=5000,
        jitter=0.0,
        clock=clock,
    )
    delays = []
    for t in range(0, 600, 100):
        clock.now = t
        s.notify_failure()
        assert s.can_restart()
        delays.append(s.get_backoff_time_ms())
    assert delays == [100, 200, 400, 800, 1000, 1000]
    clock.now = 500 + 5000 + 1000  # quiet for the threshold plus the current backoff
    s.notify_failure()
    assert s.get_backoff_time_ms() == 100


def test_exponential_delay_jitter_stays_within_the_factor():
    import random

    s = ExponentialDelayRestartStrategy(1000, 60_000, 1.5, 3_600_000, 0.1, rng=random.Random(7))
    s.notify_failure(now_ms=0)
    seen = {s.get_backoff_time_ms() for _ in range(200)}
    assert min(seen) >= 900 and max(seen) <= 1100 and len(seen) > 10


def test_exponential_delay_from_configuration_and_back():
    conf = Configuration().set_string("restart-strategy.type", "exponential-delay")
    conf.set_string("restart-strategy.exponential-delay.initial-backoff", "2 s")
    conf.set_string("restart-strategy.exponential-delay.max-backoff", "30 s")
    conf.set_string("restart-strategy.exponential-delay.backoff-multiplier", "3")
    cfg = restart_strategy_from_configuration(conf)
    s = create_restart_strategy(cfg)
    assert isinstance(s, ExponentialDelayRestartStrategy)
    assert (s.initial_ms, s.max_ms, s.multiplier, s.jitter) == (2000, 30_000, 3.0, 0.1)
    from streamstate.datastream.config_options import restart_strategy_to_configuration

    again = restart_strategy_from_configuration(restart_strategy_to_configuration(cfg))
    assert again == cfg
    with pytest.raises(ConfigurationError, match="backoff_multiplier"):
        RestartStrategies.exponential_delay_restart(1000, 2000, 1.0, 10_000, 0.1)


def test_invalid_runtime_strategies():
    with pytest.raises(ConfigurationError):
        FixedDelayRestartStrategy(-1, 0)
    with pytest.raises(ConfigurationError):
        FailureRateRestartStrategy(0, 10, 0)
    with pytest.raises(ConfigurationError):
        FailureRateRestartStrategy(1, 0, 0)


# -- create_restart_strategy -------------------------------------------------------------------


def test_create_from_configuration_objects():
    clock = Clock()
    s = create_restart_strategy(
        RestartStrategies.fixed_delay_restart(2, timedelta(seconds=3)), clock=clock
    )
    assert isinstance(s, FixedDelayRestartStrategy) and (s.attempts, s.delay_ms) == (2, 3000)
    s = create_restart_strategy(RestartStrategies.failure_rate_restart(4, 60_000, 10))
    assert isinstance(s, FailureRateRestartStrategy)
    assert (s.max_failures_per_interval, s.interval_ms, s.delay_ms) == (4, 60_000, 10)
    assert isinstance(create_restart_strategy(RestartStrategies.no_restart()), NoRestartStrategy)


def test_create_defaults_and_fallback():
    assert isinstance(create_restart_strategy(None), NoRestartStrategy)
    s = create_restart_strategy(None, checkpointing_enabled=True)
    # Flink 2.x's default with checkpointing: exponential delay
    assert isinstance(s, ExponentialDelayRestartStrategy)
    assert (s.initial_ms, s.max_ms, s.multiplier, s.reset_threshold_ms, s.jitter) == (
        1000,
        60_000,
        1.5,
        3_600_000,
        0.1,
    )
    conf = Configuration().set_string("restart-strategy.type", "fixed-delay")
    conf.set_string("restart-strategy.fixed-delay.attempts", "7")
    configured = restart_strategy_from_configuration(conf)
    s = create_restart_strategy(RestartStrategies.fall_back_restart(), configured)
    assert isinstance(s, FixedDelayRestartStrategy) and s.attempts == 7
    # an explicit configuration object wins over the configuration keys
    s = create_restart_strategy(RestartStrategies.no_restart(), configured)
    assert isinstance(s, NoRestartStrategy)


def test_create_rejects_unknown():
    class Weird(RestartStrategyConfiguration):
        pass

    with pytest.raises(ConfigurationError, match="unsupported"):
        create_restart_strategy(Weird())
