"""A job's counters, as the driver folds them from the subtasks' acks.

They become the accumulators of the :class:`~streamstate.common.JobExecutionResult`
(``records-in.<uid>``, ``epochs``, ``checkpoints``, ``restarts``, ``cache_hits``,
``cache_misses``, ``executor_kept``, ``executor_moved``, ``state_restores_<path>``,
``key_groups_kept`` / ``key_groups_read`` (and ``.<uid>``: key groups a rebuilt keyed
backend kept in place after a rescale / read from storage),
``state_migrated_entries`` and ``state_migrated_entries.<uid>.<state>`` (schema
migration), ``subtask-seconds.<phase>``, ``subtask-workers``, ``subtask-executors``) and,
while the job runs, what the control plane shows (the last
:data:`EPOCH_HISTORY` epochs and :data:`FAILURE_HISTORY` failures).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from streamstate.runtime.autoscaler import ScalingDecision
from streamstate.runtime.job_status import EpochStats, FailureInfo, StageEpochStats
from streamstate.runtime.protocol import SubtaskAck
from streamstate.runtime.user_metrics import UserMetrics

__all__ = ["EPOCH_HISTORY", "FAILURE_HISTORY", "JobMetrics"]

EPOCH_HISTORY = 1000
FAILURE_HISTORY = 100
SCALING_HISTORY = 100


class JobMetrics:
    """Counters of one job (driver only; readers get copies)."""

    def __init__(self) -> None:
        self.stats: dict[str, int] = {
            "epochs": 0,
            "checkpoints": 0,
            "restarts": 0,
            "cache_hits": 0,
            "cache_misses": 0,
            "checkpoints_failed": 0,
        }
        #: node uid -> records it processed
        self.counts: dict[str, int] = {}
        #: "stage/subtask" -> worker processes ("host:pid") that ran it
        self.workers: dict[str, set[str]] = {}
        #: "stage/subtask" -> the Spark executor (task location) that ran it last
        self.executors: dict[str, str] = {}
        #: seconds spent in subtasks, summed over all subtasks: restore / process / commit
        self.timings: dict[str, float] = {}
        self.epochs: deque[EpochStats] = deque(maxlen=EPOCH_HISTORY)
        self.failures: deque[FailureInfo] = deque(maxlen=FAILURE_HISTORY)
        #: the autoscaler's decisions, newest last (``ScalingDecision.to_json`` + note)
        self.scaling: deque[dict[str, Any]] = deque(maxlen=SCALING_HISTORY)
        #: the functions' own metrics (RuntimeContext.get_metrics_group())
        self.user = UserMetrics()

    def record_scaling(self, decision: ScalingDecision, note: str = "") -> None:
        """An autoscaler decision (runtime/autoscaler.py), with what became of it."""
        self.bump("autoscaler_decisions")
        self.scaling.append({**decision.to_json(), "note": note})

    def bump(self, name: str, n: int = 1) -> None:
        self.stats[name] = self.stats.get(name, 0) + n

    def absorb(self, stage: int, ack: SubtaskAck) -> None:
        """Fold one subtask's counters in."""
        if ack.cache_hit is not None:  # None: no state and no functions to find
            self.bump("cache_hits" if ack.cache_hit else "cache_misses")
        for path, n in ack.state_restores.items():
            self.bump(f"state_restores_{path}", n)
        for uid, (kept, read) in ack.key_groups.items():
            # a rescale in place keeps key groups, every other rebuild reads them all
            self.bump("key_groups_kept", kept)
            self.bump("key_groups_read", read)
            self.bump(f"key_groups_kept.{uid}", kept)
            self.bump(f"key_groups_read.{uid}", read)
        where = f"{stage}/{ack.subtask}"
        self.workers.setdefault(where, set()).add(ack.worker)
        if ack.executor is not None:
            last = self.executors.get(where)
            if last is not None:
                # placement: the subtask ran on the executor of its previous epoch, or moved
                self.bump("executor_kept" if last == ack.executor else "executor_moved")
            self.executors[where] = ack.executor
        t = ack.timings
        for k, v in (("restore", t.restore), ("process", t.process), ("commit", t.commit)):
            self.timings[k] = self.timings.get(k, 0.0) + v
        for uid, n in ack.counts.items():
            self.counts[uid] = self.counts.get(uid, 0) + n
        if ack.user_metrics:
            self.user.absorb(stage, ack.subtask, dict(ack.user_metrics))
        for state, n in ack.migrated.items():  # schema migration at restore
            self.bump("state_migrated_entries", n)
            self.bump(f"state_migrated_entries.{state}", n)

    def user_metrics(self) -> dict[str, Any]:
        """``metrics.<operator>.<group>.<name>`` -> value, summed over subtasks."""
        for _ in range(3):  # readers on other threads (REST, JobClient) copy while we fold
            try:
                return {f"metrics.{k}": v for k, v in self.user.values().items()}
            except RuntimeError:
                continue
        return {}

    def epoch_finished(
        self,
        epoch: int,
        attempt: int,
        start_ms: int,
        duration_ms: float,
        checkpoint_id: int | None,
        acks: Iterable[SubtaskAck],
        source_uids: Iterable[str],
    ) -> EpochStats:
        """Record one epoch's statistics (kept for the last :data:`EPOCH_HISTORY` epochs)."""
        records: dict[str, int] = {}
        per_stage: dict[int, list[float]] = {}
        hits = misses = 0
        for a in acks:
            for uid, n in a.counts.items():
                records[uid] = records.get(uid, 0) + n
            t = a.timings
            s = per_stage.setdefault(a.stage, [0.0, 0.0, 0.0, 0.0])
            s[0] += t.restore
            s[1] += t.process
            s[2] += t.commit
            s[3] = max(s[3], t.restore + t.process + t.commit)
            if a.cache_hit is not None:
                hits += a.cache_hit
                misses += not a.cache_hit
        stats = EpochStats(
            epoch=epoch,
            attempt=attempt,
            start_ms=start_ms,
            duration_ms=duration_ms,
            checkpoint_id=checkpoint_id,
            records=records,
            source_records=sum(records.get(u, 0) for u in source_uids),
            stages=tuple(StageEpochStats(sid, *v) for sid, v in sorted(per_stage.items())),
            cache_hits=hits,
            cache_misses=misses,
        )
        self.epochs.append(stats)
        self.bump("epochs")
        return stats

    def accumulators(self, job_id: str, latest_checkpoint: str | None) -> dict[str, Any]:
        acc: dict[str, Any] = dict(self.stats)
        acc.update({f"records-in.{k}": v for k, v in self.counts.items()})
        acc["job-id"] = job_id
        acc.update({f"subtask-seconds.{k}": round(v, 3) for k, v in self.timings.items()})
        acc["subtask-workers"] = {k: sorted(v) for k, v in self.workers.items()}
        if self.executors:
            acc["subtask-executors"] = dict(self.executors)
        acc["latest-checkpoint"] = latest_checkpoint
        acc.update(self.user_metrics())
        if self.failures:
            first = self.failures[0]
            # the cause of the first restart (later ones are often consequences of it)
            acc["first-failure"] = f"{first.exception_type}: {first.message}"
        return acc
