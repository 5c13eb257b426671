"""Restart strategy configurations, as ``pyflink.common.restart_strategy``.

These are frozen values describing *what* to do on failure; the driver turns them into
stateful runtime strategies (:func:`streamstate.runtime.restart.create_restart_strategy`).
Durations take int milliseconds, :class:`datetime.timedelta`, ``Time`` or ``Duration``;
two configurations are equal iff they describe the same strategy (``3, 1000`` equals
``3, timedelta(seconds=1)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from streamstate.common.time import to_millis
from streamstate.errors import ConfigurationError

__all__ = ["RestartStrategies", "RestartStrategyConfiguration"]


def _check_positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ConfigurationError(f"{what} must be >= 0, got {value}")
    return value


class RestartStrategyConfiguration:
    """Abstract configuration for restart strategies."""

    def get_description(self) -> str:
        """A human-readable description of the strategy."""
        raise NotImplementedError


class RestartStrategies:
    """Factory of :class:`RestartStrategyConfiguration` values."""

    @dataclass(frozen=True)
    class NoRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Never restart: the first failure fails the job."""

        def get_description(self) -> str:
            return "Restart deactivated."

    @dataclass(frozen=True, init=False)
    class FixedDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart up to ``restart_attempts`` times, waiting a fixed delay before each."""

        restart_attempts: int
        delay_between_attempts_interval_ms: int

        def __init__(self, restart_attempts: int, delay_between_attempts_interval: Any) -> None:
            object.__setattr__(
                self, "restart_attempts", _check_positive_int(restart_attempts, "restart_attempts")
            )
            object.__setattr__(
                self,
                "delay_between_attempts_interval_ms",
                to_millis(delay_between_attempts_interval, "delay_between_attempts_interval"),
            )

        def get_restart_attempts(self) -> int:
            return self.restart_attempts

        def get_delay_between_attempts_interval(self) -> timedelta:
            return timedelta(milliseconds=self.delay_between_attempts_interval_ms)

        def get_description(self) -> str:
            return (
                f"Restart with fixed delay ({self.delay_between_attempts_interval_ms} ms). "
                f"#{self.restart_attempts} restart attempts."
            )

    @dataclass(frozen=True, init=False)
    class FailureRateRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart at most ``max_failure_rate`` times within any ``failure_interval``."""

        max_failure_rate: int
        failure_interval_ms: int
        delay_between_attempts_interval_ms: int

        def __init__(
            self,
            max_failure_rate: int,
            failure_interval: Any,
            delay_between_attempts_interval: Any,
        ) -> None:
            rate = _check_positive_int(max_failure_rate, "max_failure_rate")
            if rate == 0:
                raise ConfigurationError("max_failure_rate must be > 0")
            interval = to_millis(failure_interval, "failure_interval")
            if interval <= 0:
                raise ConfigurationError("failure_interval must be > 0 ms")
            object.__setattr__(self, "max_failure_rate", rate)
            object.__setattr__(self, "failure_interval_ms", interval)
            object.__setattr__(
                self,
                "delay_between_attempts_interval_ms",
                to_millis(delay_between_attempts_interval, "delay_between_attempts_interval"),
            )

        def get_max_failure_rate(self) -> int:
            return self.max_failure_rate

        def get_failure_interval(self) -> timedelta:
            return timedelta(milliseconds=self.failure_interval_ms)

        def get_delay_between_attempts_interval(self) -> timedelta:
            return timedelta(milliseconds=self.delay_between_attempts_interval_ms)

        def get_description(self) -> str:
            return (
                f"Failure rate restart with maximum of {self.max_failure_rate} failures within "
                f"interval {self.failure_interval_ms} ms and fixed delay "
                f"{self.delay_between_attempts_interval_ms} ms."
            )

    @dataclass(frozen=True, init=False)
    class ExponentialDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Restart after a delay that grows by ``backoff_multiplier`` per failure up to
        ``max_backoff``, back to ``initial_backoff`` after ``reset_backoff_threshold`` without
        a failure; ``jitter_factor`` spreads each delay by +-that fraction (Flink 2.x's
        default strategy: 1 s, 1 min, x1.5, 1 h, 0.1)."""

        initial_backoff_ms: int
        max_backoff_ms: int
        backoff_multiplier: float
        reset_backoff_threshold_ms: int
        jitter_factor: float

        def __init__(
            self,
            initial_backoff: Any,
            max_backoff: Any,
            backoff_multiplier: float,
            reset_backoff_threshold: Any,
            jitter_factor: float,
        ) -> None:
            initial = to_millis(initial_backoff, "initial_backoff")
            maximum = to_millis(max_backoff, "max_backoff")
            reset = to_millis(reset_backoff_threshold, "reset_backoff_threshold")
            if not 1 <= initial <= maximum:
                raise ConfigurationError(
                    f"initial_backoff ({initial} ms) must be >= 1 ms and <= max_backoff "
                    f"({maximum} ms)"
                )
            if not float(backoff_multiplier) > 1:
                raise ConfigurationError(
                    f"backoff_multiplier must be > 1, got {backoff_multiplier!r}"
                )
            if reset < 1:
                raise ConfigurationError(f"reset_backoff_threshold must be >= 1 ms, got {reset}")
            if not 0 <= float(jitter_factor) <= 1:
                raise ConfigurationError(f"jitter_factor must be in [0, 1], got {jitter_factor!r}")
            object.__setattr__(self, "initial_backoff_ms", initial)
            object.__setattr__(self, "max_backoff_ms", maximum)
            object.__setattr__(self, "backoff_multiplier", float(backoff_multiplier))
            object.__setattr__(self, "reset_backoff_threshold_ms", reset)
            object.__setattr__(self, "jitter_factor", float(jitter_factor))

        def get_initial_backoff(self) -> timedelta:
            return timedelta(milliseconds=self.initial_backoff_ms)

        def get_max_backoff(self) -> timedelta:
            return timedelta(milliseconds=self.max_backoff_ms)

        def get_backoff_multiplier(self) -> float:
            return self.backoff_multiplier

        def get_reset_backoff_threshold(self) -> timedelta:
            return timedelta(milliseconds=self.reset_backoff_threshold_ms)

        def get_jitter_factor(self) -> float:
            return self.jitter_factor

        def get_description(self) -> str:
            return (
                f"Restart with exponential delay: starting at {self.initial_backoff_ms} ms, "
                f"increasing by {self.backoff_multiplier}, with maximum "
                f"{self.max_backoff_ms} ms. Delay resets after "
                f"{self.reset_backoff_threshold_ms} ms, jitter {self.jitter_factor}."
            )

    @dataclass(frozen=True)
    class FallbackRestartStrategyConfiguration(RestartStrategyConfiguration):
        """Use the strategy from the configuration (``restart-strategy.type``) or the default."""

        def get_description(self) -> str:
            return "Cluster level default restart strategy"

    @staticmethod
    def no_restart() -> RestartStrategies.NoRestartStrategyConfiguration:
        """Generates NoRestartStrategyConfiguration."""
        return RestartStrategies.NoRestartStrategyConfiguration()

    @staticmethod
    def fall_back_restart() -> RestartStrategies.FallbackRestartStrategyConfiguration:
        return RestartStrategies.FallbackRestartStrategyConfiguration()

    @staticmethod
    def fixed_delay_restart(
        restart_attempts: int, delay_between_attempts: Any
    ) -> RestartStrategies.FixedDelayRestartStrategyConfiguration:
        """Generates a FixedDelayRestartStrategyConfiguration.

        :param restart_attempts: Number of restart attempts.
        :param delay_between_attempts: Delay between attempts: int ms or timedelta.
        """
        return RestartStrategies.FixedDelayRestartStrategyConfiguration(
            restart_attempts, delay_between_attempts
        )

    @staticmethod
    def exponential_delay_restart(
        initial_backoff: Any,
        max_backoff: Any,
        backoff_multiplier: float,
        reset_backoff_threshold: Any,
        jitter_factor: float,
    ) -> RestartStrategies.ExponentialDelayRestartStrategyConfiguration:
        """Generates an ExponentialDelayRestartStrategyConfiguration (durations: int ms or
        timedelta)."""
        return RestartStrategies.ExponentialDelayRestartStrategyConfiguration(
            initial_backoff, max_backoff, backoff_multiplier, reset_backoff_threshold, jitter_factor
        )

    @staticmethod
    def failure_rate_restart(
        failure_rate: int, failure_interval: Any, delay_interval: Any
    ) -> RestartStrategies.FailureRateRestartStrategyConfiguration:
        """Generates a FailureRateRestartStrategyConfiguration.

        :param failure_rate: Maximum number of restarts within ``failure_interval``: the job
                             fails at the next failure (Flink 2.x's arithmetic).
        :param failure_interval: Time interval for failures: int ms or timedelta.
        :param delay_interval: Delay between restart attempts: int ms or timedelta.
        """
        return RestartStrategies.FailureRateRestartStrategyConfiguration(
            failure_rate, failure_interval, delay_interval
        )
