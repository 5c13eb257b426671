"""The REST API's documents, built from a running job's own bookkeeping (Flink's shapes
where they fit): the lifecycle, :class:`~streamstate.runtime.job_metrics.JobMetrics`
(records, epochs, failures) and the coordinator's
:class:`~streamstate.runtime.checkpoint.stats.CheckpointStatsTracker`.

Readers run on the server thread while the driver loop writes; they take copies
(``list(deque)``, ``dict(...)``) and never hold the driver up.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = [
    "hide_secrets",
    "checkpoint_details",
    "checkpoints",
    "exceptions",
    "job_details",
    "job_overview",
    "placement",
    "prometheus_metrics",
]

TERMINAL = frozenset({"FINISHED", "CANCELED", "FAILED"})


#: parts of a configuration key whose value is a secret (Flink's sensitive-key markers)
SECRET_MARKERS = ("password", "secret", "token", "apikey", "auth-params", "service-key")
HIDDEN = "******"


def hide_secrets(configuration: Mapping[str, str]) -> dict[str, str]:
    """``configuration`` with the values of secret keys (``rest.token``, ``s3.secret-key``,
    ...) replaced by :data:`HIDDEN`: the configuration view is readable by anyone on the
    machine with a loopback bind, and the token would let them steer the job."""
    return {
        key: HIDDEN if any(m in key.lower() for m in SECRET_MARKERS) else value
        for key, value in configuration.items()
    }


def _times(job: Any) -> tuple[int, int, int]:
    """(start, end or -1, duration) in ms. Start and end are the job clock's; a running
    job's duration is wall time since it was attached: the server never reads the job's
    clock (a test clock such as TickingClock advances at every reading)."""
    ts: dict[str, int] = dict(job.executor.parts.lifecycle.timestamps)
    start = ts.get("CREATED", 0)
    status = job.executor.status.name
    if status in TERMINAL:
        end = ts.get(status, start)
        return start, end, end - start
    return start, -1, int(time.time() * 1000) - job.attached_ms


def job_overview(job: Any) -> dict[str, Any]:
    """One row of ``/jobs/overview``."""
    ex = job.executor
    start, end, duration = _times(job)
    return {
        "jid": ex.job_id,
        "name": ex.job_name,
        "state": ex.status.name,
        "start-time": start,
        "end-time": end,
        "duration": duration,
        "epochs": ex.parts.metrics.stats.get("epochs", 0),
        "restarts": ex.parts.metrics.stats.get("restarts", 0),
        "tasks": {"total": sum(st.parallelism for st in ex.parts.plan.stages)},
    }


def _vertices(ex: Any) -> list[dict[str, Any]]:
    counts = dict(ex.parts.metrics.counts)
    out = []
    for st in ex.parts.plan.stages:
        ops = [
            {
                "uid": n.uid,
                "name": n.name,
                "parallelism": n.parallelism,
                "keyed": n.keyed,
                "records": counts.get(n.uid, 0),
            }
            for n in st.nodes.values()
        ]
        out.append(
            {
                "id": str(st.id),
                "name": " -> ".join(o["name"] for o in ops),
                "parallelism": st.parallelism,
                "max-parallelism": st.max_parallelism,
                "status": ex.status.name,
                "upstream": [str(u) for u in st.upstream],
                "operators": ops,
                "metrics": {
                    "read-records": ops[0]["records"] if ops else 0,
                    "write-records": ops[-1]["records"] if ops else 0,
                },
            }
        )
    return out


def job_details(job: Any) -> dict[str, Any]:
    """``/jobs/<id>``: status, timestamps, vertices (stages with their chained operators,
    parallelism and records), the plan's edges, counters and the recent epochs."""
    ex = job.executor
    start, end, duration = _times(job)
    vertices = _vertices(ex)
    epochs = list(ex.parts.metrics.epochs)
    return {
        "jid": ex.job_id,
        "name": ex.job_name,
        "state": ex.status.name,
        "start-time": start,
        "end-time": end,
        "duration": duration,
        "now": int(time.time() * 1000),
        "timestamps": dict(ex.parts.lifecycle.timestamps),
        "runner": ex.parts.runner.describe(),
        "vertices": vertices,
        "plan": {
            "jid": ex.job_id,
            "name": ex.job_name,
            "nodes": [
                {
                    "id": v["id"],
                    "description": v["name"],
                    "parallelism": v["parallelism"],
                    "inputs": [{"id": u} for u in v["upstream"]],
                }
                for v in vertices
            ],
        },
        "stats": dict(ex.parts.metrics.stats),
        "placement": placement(ex.parts.metrics),
        "autoscaler": {
            "enabled": ex.parts.settings.autoscaler.enabled,
            "decisions": list(ex.parts.metrics.scaling),
        },
        "records": dict(ex.parts.metrics.counts),
        "epochs": [asdict(e) for e in epochs[-job.epochs_shown :]],
    }


def placement(metrics: Any) -> dict[str, Any]:
    """Where subtasks ran, per subtask-epoch: ``in-place`` (state and function objects were
    found where the subtask ran) vs ``rebuilt`` (read from its lineage: a first epoch, a
    move, a restart), and on a Spark cluster ``same-executor`` vs ``moved`` (the executor
    of the subtask's previous epoch, which its task prefers) with each subtask's executor;
    and where queryable-state lookups were answered (query hosts vs the driver)."""
    stats = metrics.stats
    hits, misses = stats.get("cache_hits", 0), stats.get("cache_misses", 0)
    return {
        "in-place": hits,
        "rebuilt": misses,
        "in-place-ratio": round(hits / (hits + misses), 4) if hits + misses else None,
        "same-executor": stats.get("executor_kept", 0),
        "moved": stats.get("executor_moved", 0),
        "subtask-executors": dict(metrics.executors),
        # queryable-state keys answered by the query hosts next to the state / by the driver
        "queryable-lookups-on-executors": stats.get("queryable_lookups_remote", 0),
        "queryable-lookups-in-driver": stats.get("queryable_lookups_driver", 0),
    }


def checkpoints(job: Any) -> dict[str, Any]:
    """``/jobs/<id>/checkpoints``: counts, latest completed/savepoint/failed/restored, history."""
    return dict(job.executor.parts.coordinator.stats.summary())


def checkpoint_details(job: Any, checkpoint_id: int) -> dict[str, Any] | None:
    """``/jobs/<id>/checkpoints/details/<n>``; None when the history does not hold it."""
    s = job.executor.parts.coordinator.stats.get(checkpoint_id)
    return None if s is None else s.to_dict()


def exceptions(job: Any) -> dict[str, Any]:
    """``/jobs/<id>/exceptions``: every failure (newest first) with the worker's traceback."""
    failures = list(job.executor.parts.metrics.failures)
    entries = [
        {
            "exceptionName": f.exception_type,
            "message": f.message,
            "stacktrace": f.traceback,
            "timestamp": f.timestamp_ms,
            "epoch": f.epoch,
            "attempt": f.attempt,
            "will_restart": f.will_restart,
        }
        for f in reversed(failures)
    ]
    root = entries[0] if entries else None
    return {
        "root-exception": None if root is None else f"{root['exceptionName']}: {root['message']}",
        "timestamp": None if root is None else root["timestamp"],
        "truncated": False,
        "exceptionHistory": {"entries": entries, "truncated": False},
    }


def prometheus_metrics(jobs: list[Any]) -> list[Metric]:
    """One Prometheus family per metric, a sample per job (label ``job_id``, ``job_name``)."""
    labels = ["job_id", "job_name"]
    epochs = CounterMetricFamily("streamstate_job_epochs", "Epochs completed", labels=labels)
    restarts = CounterMetricFamily("streamstate_job_restarts", "Restarts", labels=labels)
    records = CounterMetricFamily(
        "streamstate_operator_records",
        "Records processed per operator",
        labels=[*labels, "operator"],
    )
    ckpts = CounterMetricFamily(
        "streamstate_job_checkpoints",
        "Checkpoints by final status",
        labels=[*labels, "status"],
    )
    running = GaugeMetricFamily(
        "streamstate_job_running", "1 while the job is RUNNING", labels=labels
    )
    last_dur = GaugeMetricFamily(
        "streamstate_job_last_checkpoint_duration_seconds",
        "Duration of the latest completed checkpoint",
        labels=labels,
    )
    last_size = GaugeMetricFamily(
        "streamstate_job_last_checkpoint_size_bytes",
        "State size of the latest completed checkpoint",
        labels=labels,
    )
    epoch_dur = GaugeMetricFamily(
        "streamstate_job_last_epoch_duration_seconds",
        "Duration of the latest epoch",
        labels=labels,
    )
    user = GaugeMetricFamily(
        "streamstate_user_metric",
        "The functions' metrics (RuntimeContext.get_metrics_group()), summed over subtasks",
        labels=[*labels, "metric"],
    )
    for job in jobs:
        ex = job.executor
        lv = [ex.job_id, ex.job_name]
        for name, value in _user_samples(ex.parts.metrics.user_metrics()):
            user.add_metric([*lv, name], value)
        stats = dict(ex.parts.metrics.stats)
        epochs.add_metric(lv, stats.get("epochs", 0))
        restarts.add_metric(lv, stats.get("restarts", 0))
        for uid, n in sorted(dict(ex.parts.metrics.counts).items()):
            records.add_metric([*lv, uid], n)
        counts = dict(ex.parts.coordinator.stats.counts)
        for status in ("completed", "failed"):
            ckpts.add_metric([*lv, status], counts.get(status, 0))
        running.add_metric(lv, 1 if ex.status.name == "RUNNING" else 0)
        latest = ex.parts.coordinator.stats.latest_completed
        if latest is not None and latest.duration_ms is not None:
            last_dur.add_metric(lv, latest.duration_ms / 1000.0)
            last_size.add_metric(lv, latest.state_size)
        recent = list(ex.parts.metrics.epochs)[-1:]
        if recent:
            epoch_dur.add_metric(lv, recent[0].duration_ms / 1000.0)
    return [epochs, restarts, records, ckpts, running, last_dur, last_size, epoch_dur, user]


def _user_samples(values: dict[str, Any]) -> list[tuple[str, float]]:
    """Numeric samples: a counter, meter or gauge as is; a distribution as
    ``<name>.count`` / ``.sum`` / ``.min`` / ``.max`` / ``.mean``; other gauges skipped."""
    out: list[tuple[str, float]] = []
    for name, value in values.items():
        parts = value.items() if isinstance(value, dict) else [("", value)]
        for suffix, v in parts:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.append((f"{name}.{suffix}" if suffix else name, float(v)))
    return out
