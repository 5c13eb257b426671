"""Runtime restart strategies (Flink's ``RestartBackoffTimeStrategy``), used by the driver.

Lifecycle, per failure of the job::

    strategy.notify_failure(now_ms)        # record it
    if strategy.can_restart():             # decide
        sleep(strategy.get_backoff_time_ms())
        restore from the latest checkpoint and run again
    else:
        fail the job (JobExecutionError from the last failure)

The arithmetic is Flink's:

* :class:`FixedDelayRestartStrategy` ``(attempts=N)``: failures 1..N restart, failure N+1
  fails the job.
* :class:`FailureRateRestartStrategy` ``(max_failures_per_interval=N, interval)``: at most
  N restarts within ``interval`` ms; the job fails at the (N+1)-th failure within the
  interval (Flink 2.x: ``failureTimestamps.size() > maxFailuresPerInterval``).
* :class:`ExponentialDelayRestartStrategy`: always restarts; the delay starts at the
  initial backoff, grows by the multiplier per failure up to the maximum, and resets when
  the job ran ``reset threshold + current backoff`` without a failure (Flink 2.x's default).
* :class:`NoRestartStrategy`: never restarts.

Time comes from an injectable ``clock`` (ms) unless ``now_ms`` is passed explicitly.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable

from streamstate.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from streamstate.errors import ConfigurationError
from streamstate.runtime.clock import system_clock_ms

__all__ = [
    "DEFAULT_RESTART_DELAY_MS",
    "ExponentialDelayRestartStrategy",
    "FailureRateRestartStrategy",
    "FixedDelayRestartStrategy",
    "NoRestartStrategy",
    "RestartStrategy",
    "create_restart_strategy",
    "system_clock_ms",
]

#: Flink's default delay between restarts (``restart-strategy.*.delay``: 1 s).
DEFAULT_RESTART_DELAY_MS = 1000
_INT_MAX = 2**31 - 1


class RestartStrategy(ABC):
    """Decides whether and when a failed job restarts. Not thread-safe (driver only)."""

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self._clock = clock or system_clock_ms
        self.failures = 0  # total failures notified (for metrics / messages)

    def notify_failure(self, now_ms: int | None = None) -> None:
        """Record a failure that happened at ``now_ms`` (default: the clock)."""
        self.failures += 1
        self._record(self._clock() if now_ms is None else now_ms)

    @abstractmethod
    def _record(self, now_ms: int) -> None: ...

    @abstractmethod
    def can_restart(self, now_ms: int | None = None) -> bool:
        """Whether the job may restart after the failures notified so far."""

    @abstractmethod
    def get_backoff_time_ms(self) -> int:
        """How long to wait before restarting, in ms."""

    @abstractmethod
    def describe(self) -> str: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


class NoRestartStrategy(RestartStrategy):
    def _record(self, now_ms: int) -> None:
        pass

    def can_restart(self, now_ms: int | None = None) -> bool:
        return False

    def get_backoff_time_ms(self) -> int:
        return 0

    def describe(self) -> str:
        return "restart deactivated"


class FixedDelayRestartStrategy(RestartStrategy):
    """At most ``attempts`` restarts, each after ``delay_ms``."""

    def __init__(self, attempts: int, delay_ms: int, clock: Callable[[], int] | None = None):
        super().__init__(clock)
        if attempts < 0:
            raise ConfigurationError(f"restart attempts must be >= 0, got {attempts}")
        if delay_ms < 0:
            raise ConfigurationError(f"restart delay must be >= 0 ms, got {delay_ms}")
        self.attempts = attempts
        self.delay_ms = delay_ms

    def _record(self, now_ms: int) -> None:
        pass

    def can_restart(self, now_ms: int | None = None) -> bool:
        return self.failures <= self.attempts

    def get_backoff_time_ms(self) -> int:
        return self.delay_ms

    def describe(self) -> str:
        return f"fixed delay {self.delay_ms} ms, {self.attempts} restart attempts"


class FailureRateRestartStrategy(RestartStrategy):
    """Fails the job once ``max_failures_per_interval`` failures fall within ``interval_ms``."""

    def __init__(
        self,
        max_failures_per_interval: int,
        interval_ms: int,
        delay_ms: int,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(clock)
        if max_failures_per_interval <= 0:
            raise ConfigurationError(
                f"max failures per interval must be > 0, got {max_failures_per_interval}"
            )
        if interval_ms <= 0:
            raise ConfigurationError(f"failure rate interval must be > 0 ms, got {interval_ms}")
        if delay_ms < 0:
            raise ConfigurationError(f"restart delay must be >= 0 ms, got {delay_ms}")
        self.max_failures_per_interval = max_failures_per_interval
        self.interval_ms = interval_ms
        self.delay_ms = delay_ms
        # The most recent max_failures_per_interval + 1 failure times, oldest first.
        self._times: deque[int] = deque(maxlen=max_failures_per_interval + 1)

    def _record(self, now_ms: int) -> None:
        self._times.append(now_ms)

    def can_restart(self, now_ms: int | None = None) -> bool:
        if len(self._times) <= self.max_failures_per_interval:
            return True
        now = self._clock() if now_ms is None else now_ms
        return now - self._times[0] > self.interval_ms

    def get_backoff_time_ms(self) -> int:
        return self.delay_ms

    def describe(self) -> str:
        return (
            f"failure rate: at most {self.max_failures_per_interval} restarts within "
            f"{self.interval_ms} ms, delay {self.delay_ms} ms"
        )


class ExponentialDelayRestartStrategy(RestartStrategy):
    """Restarts always, after a delay growing from ``initial_ms`` to ``max_ms``."""

    def __init__(
        self,
        initial_ms: int = 1000,
        max_ms: int = 60_000,
        multiplier: float = 1.5,
        reset_threshold_ms: int = 3_600_000,
        jitter: float = 0.1,
        clock: Callable[[], int] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(clock)
        if not 1 <= initial_ms <= max_ms:
            raise ConfigurationError(
                f"initial backoff ({initial_ms} ms) must be >= 1 ms and <= max backoff ({max_ms} ms)"
            )
        if not multiplier > 1:
            raise ConfigurationError(f"backoff multiplier must be > 1, got {multiplier}")
        if reset_threshold_ms < 1:
            raise ConfigurationError(
                f"reset backoff threshold must be >= 1 ms, got {reset_threshold_ms}"
            )
        if not 0 <= jitter <= 1:
            raise ConfigurationError(f"jitter factor must be in [0, 1], got {jitter}")
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.multiplier = multiplier
        self.reset_threshold_ms = reset_threshold_ms
        self.jitter = jitter
        self.current_ms = initial_ms
        self._last_failure_ms: int | None = None
        self._rng = rng or random.Random()

    def _record(self, now_ms: int) -> None:
        last = self._last_failure_ms
        if last is None or now_ms - last >= self.reset_threshold_ms + self.current_ms:
            self.current_ms = self.initial_ms
        elif self.current_ms < self.max_ms:
            self.current_ms = min(int(self.current_ms * self.multiplier), self.max_ms)
        self._last_failure_ms = now_ms

    def can_restart(self, now_ms: int | None = None) -> bool:
        return True

    def get_backoff_time_ms(self) -> int:
        offset = int(self.current_ms * self.jitter)
        jittered = self.current_ms + (self._rng.randint(-offset, offset) if offset else 0)
        return max(0, min(jittered, self.max_ms))

    def describe(self) -> str:
        return (
            f"exponential delay {self.initial_ms} ms .. {self.max_ms} ms (x{self.multiplier}, "
            f"reset after {self.reset_threshold_ms} ms without failure, jitter {self.jitter})"
        )


def create_restart_strategy(
    config: RestartStrategyConfiguration | None,
    configured: RestartStrategyConfiguration | None = None,
    checkpointing_enabled: bool = False,
    clock: Callable[[], int] | None = None,
) -> RestartStrategy:
    """The runtime strategy for the job.

    ``config`` (from ``env.set_restart_strategy``) wins; ``None`` or the fallback
    configuration mean: ``configured`` (parsed from ``restart-strategy.type`` and friends)
    if set, else Flink 2.x's default: no restart without checkpointing, and with
    checkpointing exponential delay (1 s initial, 1 min max, x1.5, reset after 1 h of no
    failure, jitter 0.1).
    """
    if config is None or isinstance(config, RestartStrategies.FallbackRestartStrategyConfiguration):
        config = configured
        if config is None or isinstance(
            config, RestartStrategies.FallbackRestartStrategyConfiguration
        ):
            if checkpointing_enabled:
                return ExponentialDelayRestartStrategy(clock=clock)
            return NoRestartStrategy(clock)
    if isinstance(config, RestartStrategies.NoRestartStrategyConfiguration):
        return NoRestartStrategy(clock)
    if isinstance(config, RestartStrategies.FixedDelayRestartStrategyConfiguration):
        return FixedDelayRestartStrategy(
            config.restart_attempts, config.delay_between_attempts_interval_ms, clock
        )
    if isinstance(config, RestartStrategies.ExponentialDelayRestartStrategyConfiguration):
        return ExponentialDelayRestartStrategy(
            config.initial_backoff_ms,
            config.max_backoff_ms,
            config.backoff_multiplier,
            config.reset_backoff_threshold_ms,
            config.jitter_factor,
            clock,
        )
    if isinstance(config, RestartStrategies.FailureRateRestartStrategyConfiguration):
        return FailureRateRestartStrategy(
            config.max_failure_rate,
            config.failure_interval_ms,
            config.delay_between_attempts_interval_ms,
            clock,
        )
    raise ConfigurationError(
        f"unsupported restart strategy configuration {config!r}; use RestartStrategies."
        f"no_restart(), fixed_delay_restart(...), failure_rate_restart(...) or "
        f"fall_back_restart()"
    )
