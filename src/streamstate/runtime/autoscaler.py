"""Autoscaling: choose each stage's parallelism from busy time and backlog (docs/elastic.md).

Flink's job autoscaler, on the epoch model, with its configuration keys
(``job.autoscaler.*``, off by default). After every epoch the driver hands the
autoscaler one :class:`EpochSample`: per stage its parallelism, the records its
subtasks took in and the seconds they were busy (restore, process and commit, summed
over subtasks), and per source stage the records read and the backlog left (records
available but not yet read, from sources that can tell: ``Source.backlog``). Over the
samples of the metrics window since the last rescale, per stage:

* **true processing rate**: what the stage would process per second if every subtask
  were busy all the time, ``records in / (busy seconds / parallelism)``;
* **target rate**: the sources' input rate over the window (records read plus the
  backlog's growth) plus their backlog caught up within
  ``job.autoscaler.catch-up.duration``, times the stage's records per source record
  (what reaches it of what the sources read);
* **scale**: with ``u = job.autoscaler.target.utilization`` and ``b =
  job.autoscaler.target.utilization.boundary``, a stage whose true rate is below
  ``target / (u + b)`` (too busy) or above ``target / (u - b)`` (idle) gets
  ``ceil(parallelism * target / (true rate * u))`` subtasks, bounded by
  ``job.autoscaler.scale-up.max-factor`` / ``scale-down.max-factor``, by
  ``job.autoscaler.vertex.min-parallelism`` / ``max-parallelism`` (per operator:
  ``job.autoscaler.vertex.<uid>.min-parallelism`` / ``.max-parallelism``) and by the
  stage's max parallelism; otherwise it stays.

Nothing is decided until ``job.autoscaler.stabilization.interval`` passed since the job
started or last rescaled and the samples cover ``job.autoscaler.metrics.window``. Every
evaluation that changes a parallelism is a :class:`ScalingDecision` with its reason, kept
in the job's metrics (REST, dashboard). Pure: no Spark, no threads; time is the clock
handed in (ms), so tests drive it with synthetic samples.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamstate.runtime.config_values import (
    conf_bool,
    conf_duration_ms,
    conf_fraction,
    conf_int,
    conf_positive_float,
)

__all__ = [
    "AutoscalerSettings",
    "Autoscaler",
    "EpochSample",
    "ScalingDecision",
    "StageSample",
    "VertexScaling",
]

PREFIX = "job.autoscaler."


@dataclass(frozen=True)
class AutoscalerSettings:
    """The ``job.autoscaler.*`` keys (Flink's names and defaults)."""

    #: ``job.autoscaler.enabled``: evaluate at all
    enabled: bool = False
    #: ``job.autoscaler.scaling.enabled``: apply decisions (false: only record them)
    scaling: bool = True
    target_utilization: float = 0.7
    utilization_boundary: float = 0.3
    stabilization_ms: int = 5 * 60_000
    metrics_window_ms: int = 15 * 60_000
    catch_up_ms: int = 30 * 60_000
    scale_up_max_factor: float = 100_000.0
    scale_down_max_factor: float = 0.6
    min_parallelism: int = 1
    max_parallelism: int = 200
    #: uid -> (min, max) overriding the vertex bounds for that operator's stage
    per_operator: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)

    @staticmethod
    def from_configuration(conf: Any) -> AutoscalerSettings:
        """From a :class:`~streamstate.common.Configuration` (``None``: the defaults).

        Raises :class:`~streamstate.errors.ConfigurationError` naming a bad value."""
        if conf is None:
            return AutoscalerSettings()
        d = AutoscalerSettings()
        per: dict[str, list[int | None]] = {}
        for key in conf.keys():
            if not key.startswith(PREFIX + "vertex."):
                continue
            rest = key[len(PREFIX + "vertex.") :]
            for bound, slot in (("min-parallelism", 0), ("max-parallelism", 1)):
                if rest.endswith("." + bound):
                    uid = rest[: -len(bound) - 1]
                    per.setdefault(uid, [None, None])[slot] = conf_int(conf, key, 1, minimum=1)
        return AutoscalerSettings(
            enabled=conf_bool(conf, PREFIX + "enabled", default=d.enabled),
            scaling=conf_bool(conf, PREFIX + "scaling.enabled", default=d.scaling),
            target_utilization=conf_fraction(
                conf, PREFIX + "target.utilization", d.target_utilization
            ),
            utilization_boundary=conf_fraction(
                conf, PREFIX + "target.utilization.boundary", d.utilization_boundary
            ),
            stabilization_ms=conf_duration_ms(
                conf, PREFIX + "stabilization.interval", d.stabilization_ms
            ),
            metrics_window_ms=conf_duration_ms(
                conf, PREFIX + "metrics.window", d.metrics_window_ms
            ),
            catch_up_ms=conf_duration_ms(conf, PREFIX + "catch-up.duration", d.catch_up_ms),
            scale_up_max_factor=conf_positive_float(
                conf, PREFIX + "scale-up.max-factor", d.scale_up_max_factor
            ),
            scale_down_max_factor=conf_fraction(
                conf, PREFIX + "scale-down.max-factor", d.scale_down_max_factor
            ),
            min_parallelism=conf_int(
                conf, PREFIX + "vertex.min-parallelism", d.min_parallelism, minimum=1
            ),
            max_parallelism=conf_int(
                conf, PREFIX + "vertex.max-parallelism", d.max_parallelism, minimum=1
            ),
            per_operator={uid: (lo, hi) for uid, (lo, hi) in per.items()},
        )

    def bounds(self, uids: tuple[str, ...]) -> tuple[int, int]:
        """(min, max) parallelism of a stage holding operators ``uids``."""
        lo, hi = self.min_parallelism, self.max_parallelism
        for uid in uids:
            own_lo, own_hi = self.per_operator.get(uid, (None, None))
            lo = own_lo if own_lo is not None else lo
            hi = own_hi if own_hi is not None else hi
        return lo, max(lo, hi)


@dataclass(frozen=True)
class StageSample:
    """One stage in one epoch."""

    parallelism: int
    #: the stage's operators' uids (the first names it in a rescale request)
    uids: tuple[str, ...]
    max_parallelism: int
    #: records its subtasks took in (a source stage: records read)
    records_in: int
    #: seconds its subtasks were busy, summed over subtasks
    busy_s: float
    is_source: bool = False
    #: records available to a source stage but not read yet (None: it cannot tell)
    backlog: int | None = None
    #: whether a rescale may change it (runtime/rescale.rescalable)
    rescalable: bool = True


@dataclass(frozen=True)
class EpochSample:
    """What one epoch did, for the autoscaler. ``period_s``: wall time from the previous
    epoch's end to this one's (its share of the window)."""

    end_ms: int
    period_s: float
    stages: Mapping[int, StageSample]


@dataclass(frozen=True)
class VertexScaling:
    """One stage's evaluation."""

    stage: int
    uid: str
    parallelism: int
    new_parallelism: int
    true_rate: float
    target_rate: float
    utilization: float
    reason: str


@dataclass(frozen=True)
class ScalingDecision:
    """A change the autoscaler chose (applied unless ``job.autoscaler.scaling.enabled``
    is false), with every stage it changes and why."""

    time_ms: int
    vertices: tuple[VertexScaling, ...]
    applied: bool

    def operators(self) -> dict[str, int]:
        """uid -> parallelism: the rescale request."""
        return {v.uid: v.new_parallelism for v in self.vertices}

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp": self.time_ms,
            "applied": self.applied,
            "vertices": [
                {
                    "stage": v.stage,
                    "uid": v.uid,
                    "from": v.parallelism,
                    "to": v.new_parallelism,
                    "trueProcessingRate": round(v.true_rate, 3),
                    "targetRate": round(v.target_rate, 3),
                    "utilization": round(v.utilization, 4),
                    "reason": v.reason,
                }
                for v in self.vertices
            ],
        }


class Autoscaler:
    """Collects :class:`EpochSample` s and decides (see the module docstring).

    ``started_ms``: when the job started (the first stabilization interval counts from
    it). Not thread-safe: the driver loop owns it."""

    def __init__(self, settings: AutoscalerSettings, started_ms: int) -> None:
        self.settings = settings
        self.samples: deque[EpochSample] = deque()
        self.stable_since_ms = started_ms

    def observe(self, sample: EpochSample) -> None:
        self.samples.append(sample)
        horizon = sample.end_ms - self.settings.metrics_window_ms
        while len(self.samples) > 1 and self.samples[1].end_ms <= horizon:
            self.samples.popleft()

    def rescaled(self, now_ms: int) -> None:
        """The job's parallelism changed (by this autoscaler or by a request): what was
        measured before no longer describes it."""
        self.samples.clear()
        self.stable_since_ms = now_ms

    def evaluate(self, now_ms: int) -> ScalingDecision | None:
        """The change the samples call for, or None (too early, no data, within bounds)."""
        s = self.settings
        if not s.enabled or not self.samples:
            return None
        if now_ms - self.stable_since_ms < s.stabilization_ms:
            return None
        covered_from = self.samples[0].end_ms - self.samples[0].period_s * 1000
        if now_ms - covered_from < s.metrics_window_ms:
            return None
        window = list(self.samples)
        period = sum(x.period_s for x in window)
        if period <= 0:
            return None
        source_rate, backlog = 0.0, 0
        source_records = 0
        stage_ids = sorted(window[-1].stages)
        between = period - window[0].period_s  # from the first sample's end to the last's
        for sid in stage_ids:
            last = window[-1].stages[sid]
            if not last.is_source:
                continue
            n = sum(x.stages[sid].records_in for x in window if sid in x.stages)
            source_records += n
            source_rate += n / period
            backlog += last.backlog or 0
            first = window[0].stages.get(sid)
            if between > 0 and first is not None and None not in (first.backlog, last.backlog):
                # what arrived beyond what was read: the input rate is read + growth
                source_rate += max(0, (last.backlog or 0) - (first.backlog or 0)) / between
        if source_records == 0 and backlog == 0:
            return None
        target_source_rate = source_rate + backlog / (s.catch_up_ms / 1000)
        changes = []
        for sid in stage_ids:
            v = self._vertex(sid, window, period, source_records, target_source_rate)
            if v is not None:
                changes.append(v)
        if not changes:
            return None
        return ScalingDecision(now_ms, tuple(changes), applied=s.scaling)

    def _vertex(
        self,
        sid: int,
        window: list[EpochSample],
        period: float,
        source_records: int,
        target_source_rate: float,
    ) -> VertexScaling | None:
        s = self.settings
        last = window[-1].stages[sid]
        if not last.rescalable:
            return None
        same = [x.stages[sid] for x in window if sid in x.stages]
        records = sum(x.records_in for x in same)
        busy = sum(x.busy_s for x in same)
        p = last.parallelism
        if records == 0 or busy <= 0:
            return None
        true_rate = records * p / busy
        share = records / source_records if source_records else 1.0
        target = target_source_rate * share
        utilization = (records / period) / true_rate
        u, b = s.target_utilization, s.utilization_boundary
        too_busy = true_rate < target / (u + b)
        idle = u - b > 0 and true_rate > target / (u - b)
        if not (too_busy or idle):
            return None
        factor = target / (true_rate * u)
        factor = min(factor, 1 + s.scale_up_max_factor) if too_busy else factor
        if idle:
            factor = max(factor, 1 - s.scale_down_max_factor)
        lo, hi = s.bounds(last.uids)
        new_p = max(lo, min(hi, last.max_parallelism, math.ceil(p * factor - 1e-9)))
        if new_p == p:
            return None
        why = "busy" if too_busy else "idle"
        reason = (
            f"{why}: true processing rate {true_rate:,.0f} rec/s at parallelism {p} "
            f"(utilization {utilization:.2f}) against a target rate of {target:,.0f} rec/s "
            f"(sources {target_source_rate:,.0f} rec/s with backlog caught up within "
            f"{s.catch_up_ms / 1000:g} s, x{share:.2f} reaching this stage); target "
            f"utilization {u:g} +- {b:g}: parallelism {p} -> {new_p}"
            + (
                f" (bounded to [{lo}, {min(hi, last.max_parallelism)}])"
                if new_p in (lo, hi)
                else ""
            )
        )
        return VertexScaling(sid, last.uids[0], p, new_p, true_rate, target, utilization, reason)
