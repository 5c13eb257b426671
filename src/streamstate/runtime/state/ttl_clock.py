"""Clocks of state TTL (Flink's ``TtlTimeProvider``).

TTL is processing-time based: a state value's expiration is ``last access
timestamp + ttl``, compared with :meth:`TtlTimeProvider.current_timestamp`.
Every keyed backend has one provider (``backend.ttl_time_provider``); the task
gives each backend its own copy (:meth:`TtlTimeProvider.for_backend`) and calls
:meth:`TtlTimeProvider.on_epoch` at the start of every epoch it runs.

Which clock, and what it means for replay (configuration key
``state.ttl.time-provider``, read on the driver and shipped to the workers):

* ``"driver"`` (default): the epoch's processing time, i.e. the driver's clock
  at the start of the epoch (``EpochSpec.processing_time_ms``), the same time
  processing-time timers see. Every record of an epoch, on every worker, sees
  the same time (no clock skew between workers, no clock read per access); the
  resolution is one epoch.
* ``"system"``: the worker's wall clock, read on every state access (Flink's
  ``TtlTimeProvider.DEFAULT``). Workers with skewed clocks disagree.
* ``"epoch:<start_ms>:<step_ms>"``: a logical clock, ``start_ms + epoch *
  step_ms`` for the whole of epoch ``epoch``.

Replay after a failure: with ``driver`` and ``system``, the restored epochs are
replayed later in real time, so state that was alive in the failed run may
have expired in the replay: results that depend on expiry are not reproducible
across a recovery, exactly as processing-time TTL in Flink. With ``epoch:...``
they are: epoch numbers are part of the checkpoint and a replayed epoch reads
the same input, so the replay sees the same timestamps as the failure-free run
(also across Spark task retries and cache misses). Meant for tests and for
pipelines that want reproducible TTL.

:class:`ManualTtlTimeProvider` is a settable clock for unit tests that drive a
backend directly.
"""

from __future__ import annotations

import copy
import time
from abc import ABC, abstractmethod
from typing import Any

from streamstate.errors import ConfigurationError

__all__ = [
    "TTL_TIME_PROVIDER_KEY",
    "DriverTtlTimeProvider",
    "EpochTtlTimeProvider",
    "ManualTtlTimeProvider",
    "SystemTtlTimeProvider",
    "TtlTimeProvider",
    "ttl_time_provider_from_configuration",
    "ttl_time_provider_from_string",
]

_time_ns = time.time_ns

#: configuration key choosing the TTL clock (a streamstate extension)
TTL_TIME_PROVIDER_KEY = "state.ttl.time-provider"


class TtlTimeProvider(ABC):
    """The current time of state TTL, in epoch milliseconds. Picklable."""

    @abstractmethod
    def current_timestamp(self) -> int:
        """Now, in milliseconds (HOT PATH: called on every access of a state with TTL)."""

    def on_epoch(  # noqa: B027 - optional hook, default no-op
        self, epoch: int, processing_time_ms: int | None = None
    ) -> None:
        """Called by the task at the start of every epoch the backend runs.

        ``processing_time_ms`` is the epoch's processing time (the driver's clock at
        the epoch's start), when the driver sent one.
        """

    def for_backend(self) -> TtlTimeProvider:
        """A private copy for one backend (clocks with per-epoch state must not be shared)."""
        return copy.copy(self)


class SystemTtlTimeProvider(TtlTimeProvider):
    """The wall clock of the process (Flink's ``TtlTimeProvider.DEFAULT``)."""

    def current_timestamp(self) -> int:
        return _wall_ms()

    def __eq__(self, other: object) -> bool:
        return type(other) is SystemTtlTimeProvider

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "SystemTtlTimeProvider()"


class DriverTtlTimeProvider(TtlTimeProvider):
    """The epoch's processing time from the driver (the wall clock until an epoch sets it)."""

    def __init__(self) -> None:
        self.now_ms: int | None = None

    def on_epoch(self, epoch: int, processing_time_ms: int | None = None) -> None:
        self.now_ms = processing_time_ms if processing_time_ms is not None else _wall_ms()

    def current_timestamp(self) -> int:
        now = self.now_ms
        return _wall_ms() if now is None else now

    def __eq__(self, other: object) -> bool:
        return type(other) is DriverTtlTimeProvider

    def __hash__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return "DriverTtlTimeProvider()"


def _wall_ms() -> int:
    return _time_ns() // 1_000_000


class ManualTtlTimeProvider(TtlTimeProvider):
    """A clock that only moves when told to (unit tests). ``for_backend`` returns itself."""

    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = int(now_ms)

    def current_timestamp(self) -> int:
        return self.now_ms

    def set(self, now_ms: int) -> None:
        self.now_ms = int(now_ms)

    def advance(self, ms: int) -> None:
        self.now_ms += int(ms)

    def for_backend(self) -> TtlTimeProvider:
        return self

    def __repr__(self) -> str:
        return f"ManualTtlTimeProvider({self.now_ms})"


class EpochTtlTimeProvider(TtlTimeProvider):
    """``start_ms + epoch * step_ms`` during epoch ``epoch``: deterministic across replays."""

    def __init__(self, start_ms: int = 0, step_ms: int = 1000) -> None:
        if step_ms <= 0:
            raise ConfigurationError(f"the epoch TTL clock needs a positive step, got {step_ms}")
        self.start_ms = int(start_ms)
        self.step_ms = int(step_ms)
        self.now_ms = self.start_ms

    def on_epoch(self, epoch: int, processing_time_ms: int | None = None) -> None:
        self.now_ms = self.start_ms + epoch * self.step_ms

    def current_timestamp(self) -> int:
        return self.now_ms

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, EpochTtlTimeProvider)
            and other.start_ms == self.start_ms
            and other.step_ms == self.step_ms
        )

    def __hash__(self) -> int:
        return (self.start_ms, self.step_ms).__hash__()

    def __repr__(self) -> str:
        return f"EpochTtlTimeProvider(start_ms={self.start_ms}, step_ms={self.step_ms})"


def ttl_time_provider_from_string(spec: str) -> TtlTimeProvider:
    """``"driver"``, ``"system"`` or ``"epoch[:<start_ms>[:<step_ms>]]"`` (defaults 0, 1000)."""
    if not isinstance(spec, str):
        raise ConfigurationError(f"{TTL_TIME_PROVIDER_KEY} must be a string, got {spec!r}")
    s = spec.strip().lower()
    if s == "system":
        return SystemTtlTimeProvider()
    if s == "driver":
        return DriverTtlTimeProvider()
    parts = s.split(":")
    if parts[0] == "epoch" and len(parts) <= 3:
        try:
            start = int(parts[1]) if len(parts) > 1 else 0
            step = int(parts[2]) if len(parts) > 2 else 1000
        except ValueError:
            pass
        else:
            return EpochTtlTimeProvider(start, step)
    raise ConfigurationError(
        f"{TTL_TIME_PROVIDER_KEY} = {spec!r} is not a TTL clock; accepted: 'driver' (the "
        f"epoch's processing time, the default), 'system' (the worker's wall clock per "
        f"access) or 'epoch:<start_ms>:<step_ms>' (deterministic per-epoch clock)"
    )


def ttl_time_provider_from_configuration(conf: Any) -> TtlTimeProvider:
    """The provider named by ``state.ttl.time-provider`` in ``conf`` (driver if absent)."""
    value = None
    if conf is not None:
        getter = getattr(conf, "get_string", None)
        value = getter(TTL_TIME_PROVIDER_KEY, None) if getter else conf.get(TTL_TIME_PROVIDER_KEY)
    return DriverTtlTimeProvider() if value is None else ttl_time_provider_from_string(value)
