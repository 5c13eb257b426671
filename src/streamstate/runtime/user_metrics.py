"""User metrics (``api/metrics.py``) between the subtasks and the driver.

Worker side: :func:`report_user_metrics` collects what every operator's metrics changed in
the epoch, for the ack. Driver side: :class:`UserMetrics` adds the reports up over
subtasks and epochs: counters and meters are sums of increments, distributions merge
their (count, sum, min, max), a gauge is its latest value per subtask, summed over
subtasks when numeric.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["UserMetrics", "report_user_metrics"]


def report_user_metrics(contexts: Iterable[Any]) -> dict[str, tuple[str, Any]]:
    out: dict[str, tuple[str, Any]] = {}
    for ctx in contexts:
        registry = getattr(ctx, "metric_registry", None)
        if registry is not None and registry.metrics:
            out.update(registry.report())
    return out


class UserMetrics:
    """The job's user metrics, folded from acks (driver only)."""

    def __init__(self) -> None:
        self.sums: dict[str, int] = {}
        self.kinds: dict[str, str] = {}
        self.distributions: dict[str, list[float]] = {}
        self.gauges: dict[str, dict[tuple[int, int], Any]] = {}

    def absorb(self, stage: int, subtask: int, reports: dict[str, tuple[str, Any]]) -> None:
        for ident, (kind, value) in reports.items():
            self.kinds[ident] = kind
            _FOLD[kind](self, ident, (stage, subtask), value)

    def _sum(self, ident: str, _: tuple[int, int], value: Any) -> None:
        self.sums[ident] = self.sums.get(ident, 0) + int(value)

    def _distribution(self, ident: str, _: tuple[int, int], value: Any) -> None:
        cur = self.distributions.get(ident)
        if cur is None:
            self.distributions[ident] = list(value)
        else:
            cur[0] += value[0]
            cur[1] += value[1]
            cur[2] = min(cur[2], value[2])
            cur[3] = max(cur[3], value[3])

    def _gauge(self, ident: str, where: tuple[int, int], value: Any) -> None:
        self.gauges.setdefault(ident, {})[where] = value

    def values(self) -> dict[str, Any]:
        """identifier -> value: a count, ``{count, sum, min, max, mean}`` or a gauge."""
        out: dict[str, Any] = dict(self.sums)
        for ident, (n, total, lo, hi) in self.distributions.items():
            out[ident] = {"count": n, "sum": total, "min": lo, "max": hi, "mean": total / n}
        for ident, per_subtask in self.gauges.items():
            vals = [per_subtask[k] for k in sorted(per_subtask)]
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
            out[ident] = sum(vals) if numeric else vals
        return dict(sorted(out.items()))


_FOLD: dict[str, Callable[[UserMetrics, str, tuple[int, int], Any], None]] = {
    "counter": UserMetrics._sum,
    "meter": UserMetrics._sum,
    "distribution": UserMetrics._distribution,
    "gauge": UserMetrics._gauge,
}
