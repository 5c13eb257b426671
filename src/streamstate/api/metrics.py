"""User metrics, as ``pyflink.metrics``: ``RuntimeContext.get_metrics_group()``.

A function registers counters, meters, distributions and gauges in its operator's
:class:`MetricGroup` (in ``open``) and updates them per record. At the end of every epoch
each subtask reports what changed (counter and meter increments, distribution summaries,
gauge values) in its ack; the driver adds them up over subtasks and epochs
(``runtime/job_metrics.py``). They are the ``metrics.<operator>.<group>.<name>``
entries of ``JobClient.get_accumulators()`` and of the ``JobExecutionResult``'s
accumulators. As in Flink, metrics are not exactly-once: an epoch replayed after a
restore counts again.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable
from typing import Any

from streamstate.errors import ConfigurationError

__all__ = ["Counter", "Distribution", "Meter", "Metric", "MetricGroup", "MetricRegistry"]


class Metric(ABC):  # noqa: B024 - a marker base, as PyFlink's
    """Base of every metric."""


class Counter(Metric):
    """A count that goes up (``inc``) and down (``dec``)."""

    def __init__(self) -> None:
        self._count = 0
        self._reported = 0

    def inc(self, n: int = 1) -> None:
        self._count += n

    def dec(self, n: int = 1) -> None:
        self._count -= n

    def get_count(self) -> int:
        """This subtask's count (the job's total is in the accumulators)."""
        return self._count

    def _report(self) -> int:
        delta, self._reported = self._count - self._reported, self._count
        return delta


class Meter(Metric):
    """Events over time: ``mark_event(n)``; the driver reports the total and the rate."""

    def __init__(self, time_span_in_seconds: int = 60) -> None:
        self.time_span_in_seconds = time_span_in_seconds
        self._count = 0
        self._reported = 0

    def mark_event(self, value: int = 1) -> None:
        self._count += value

    def get_count(self) -> int:
        return self._count

    def _report(self) -> int:
        delta, self._reported = self._count - self._reported, self._count
        return delta


class Distribution(Metric):
    """Values seen (``update``): count, sum, min, max (and so the mean)."""

    def __init__(self) -> None:
        self._summary: list[float] | None = None  # [count, sum, min, max] since last report

    def update(self, value: int) -> None:
        s = self._summary
        if s is None:
            self._summary = [1, value, value, value]
        else:
            s[0] += 1
            s[1] += value
            s[2] = min(s[2], value)
            s[3] = max(s[3], value)

    def _report(self) -> list[float] | None:
        s, self._summary = self._summary, None
        return s


class _Gauge(Metric):
    def __init__(self, obj: Callable[[], Any]) -> None:
        self.obj = obj


class MetricRegistry:
    """The metrics of one operator in one subtask, by identifier."""

    def __init__(self) -> None:
        self.metrics: dict[str, Metric] = {}

    def register(self, identifier: str, factory: Callable[[], Metric], kind: type) -> Any:
        existing = self.metrics.get(identifier)
        if existing is not None:
            if not isinstance(existing, kind):
                raise ConfigurationError(
                    f"metric {identifier!r} is already a {type(existing).__name__.lstrip('_')}"
                )
            return existing
        metric = factory()
        self.metrics[identifier] = metric
        return metric

    def report(self) -> dict[str, tuple[str, Any]]:
        """identifier -> (kind, value) of what changed since the last report."""
        out: dict[str, tuple[str, Any]] = {}
        for ident, m in self.metrics.items():
            report = _REPORTERS[type(m)](m)
            if report is not None:
                out[ident] = report
        return out


def _gauge_value(g: Metric) -> tuple[str, Any] | None:
    assert isinstance(g, _Gauge)
    return ("gauge", g.obj())


def _counter_value(c: Metric) -> tuple[str, Any] | None:
    assert isinstance(c, Counter)
    d = c._report()
    return ("counter", d) if d else None


def _meter_value(m: Metric) -> tuple[str, Any] | None:
    assert isinstance(m, Meter)
    d = m._report()
    return ("meter", d) if d else None


def _distribution_value(m: Metric) -> tuple[str, Any] | None:
    assert isinstance(m, Distribution)
    s = m._report()
    return ("distribution", s) if s is not None else None


#: metric class -> what it reports (registry by type, no isinstance chain)
_REPORTERS: dict[type, Callable[[Metric], tuple[str, Any] | None]] = {
    Counter: _counter_value,
    Meter: _meter_value,
    Distribution: _distribution_value,
    _Gauge: _gauge_value,
}


class MetricGroup:
    """A named scope of metrics; ``add_group`` nests (``add_group("k", "v")`` is a
    key-value group, named ``k.v``)."""

    def __init__(self, registry: MetricRegistry, scope: tuple[str, ...] = ()) -> None:
        self._registry = registry
        self._scope = scope

    def add_group(self, name: str, extra: str | None = None) -> MetricGroup:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"a metric group needs a non-empty name, got {name!r}")
        more = (name,) if extra is None else (name, str(extra))
        return MetricGroup(self._registry, self._scope + more)

    def _id(self, name: str) -> str:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"a metric needs a non-empty name, got {name!r}")
        return ".".join((*self._scope, name))

    def counter(self, name: str) -> Counter:
        c: Counter = self._registry.register(self._id(name), Counter, Counter)
        return c

    def gauge(self, name: str, obj: Callable[[], int]) -> None:
        if not callable(obj):
            raise ConfigurationError(f"gauge {name!r} needs a callable returning its value")
        self._registry.register(self._id(name), lambda: _Gauge(obj), _Gauge)

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        m: Meter = self._registry.register(
            self._id(name), lambda: Meter(time_span_in_seconds), Meter
        )
        return m

    def distribution(self, name: str) -> Distribution:
        d: Distribution = self._registry.register(self._id(name), Distribution, Distribution)
        return d

    def get_metric_identifier(self, name: str) -> str:
        return self._id(name)
