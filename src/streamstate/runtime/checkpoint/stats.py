"""Checkpoint statistics: counts, the latest checkpoints and a bounded history.

Flink's ``CheckpointStatsTracker``: the coordinator reports every lifecycle step of every
checkpoint here; the REST API and the CLI read snapshots of it (:meth:`summary`,
:meth:`history`). Sizes are the bytes of the state files a checkpoint references, per
operator and subtask (shared RocksDB files count in every checkpoint that references them).
Thread-safe: the driver loop writes, server threads read.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["CheckpointStats", "CheckpointStatsTracker"]

#: how many checkpoints the history keeps (Flink's ``web.checkpoints.history``: 10)
DEFAULT_HISTORY_SIZE = 1000


@dataclass(frozen=True)
class CheckpointStats:
    """One checkpoint as the statistics see it (a value; updates replace it)."""

    checkpoint_id: int
    status: str
    trigger_ms: int
    is_savepoint: bool = False
    #: completion or abort time (ms); None while pending
    end_ms: int | None = None
    #: the epoch whose barrier it is
    epoch: int | None = None
    failure_reason: str | None = None
    #: operator uid -> state bytes per subtask
    subtask_sizes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    external_path: str | None = None

    @property
    def duration_ms(self) -> int | None:
        return None if self.end_ms is None else self.end_ms - self.trigger_ms

    @property
    def state_size(self) -> int:
        return sum(sum(v) for v in self.subtask_sizes.values())

    def to_dict(self) -> dict[str, Any]:
        """Flink's REST shape for one checkpoint (``/jobs/<id>/checkpoints`` history)."""
        return {
            "id": self.checkpoint_id,
            "status": self.status,
            "is_savepoint": self.is_savepoint,
            "trigger_timestamp": self.trigger_ms,
            "latest_ack_timestamp": self.end_ms,
            "end_to_end_duration": self.duration_ms,
            "state_size": self.state_size,
            "epoch": self.epoch,
            "failure_message": self.failure_reason,
            "external_path": self.external_path,
            "tasks": {
                uid: {"state_size": sum(sizes), "subtasks": list(sizes)}
                for uid, sizes in self.subtask_sizes.items()
            },
        }


class CheckpointStatsTracker:
    """Counts and history of one job's checkpoints (bounded: ``history_size`` newest)."""

    def __init__(self, history_size: int = DEFAULT_HISTORY_SIZE) -> None:
        self._lock = threading.Lock()
        self._history: deque[CheckpointStats] = deque(maxlen=history_size)
        self._by_id: dict[int, CheckpointStats] = {}
        self.counts = {"restored": 0, "total": 0, "in_progress": 0, "completed": 0, "failed": 0}
        self.latest_completed: CheckpointStats | None = None
        self.latest_savepoint: CheckpointStats | None = None
        self.latest_failed: CheckpointStats | None = None
        #: ``{"id", "path", "restore_timestamp", "is_savepoint"}`` of the last restore
        self.latest_restored: dict[str, Any] | None = None

    def _put(self, stats: CheckpointStats) -> None:
        old = self._by_id.get(stats.checkpoint_id)
        if old is not None:
            # replace in place: the history keeps trigger order
            idx = next(i for i, s in enumerate(self._history) if s is old)
            self._history[idx] = stats
        else:
            if len(self._history) == self._history.maxlen:
                self._by_id.pop(self._history[0].checkpoint_id, None)
            self._history.append(stats)
        self._by_id[stats.checkpoint_id] = stats

    def reported_pending(self, checkpoint_id: int, trigger_ms: int, is_savepoint: bool) -> None:
        with self._lock:
            self.counts["total"] += 1
            self.counts["in_progress"] += 1
            self._put(CheckpointStats(checkpoint_id, "IN_PROGRESS", trigger_ms, is_savepoint))

    def reported_completed(
        self,
        checkpoint_id: int,
        end_ms: int,
        epoch: int | None,
        subtask_sizes: Mapping[str, tuple[int, ...]],
        external_path: str | None,
    ) -> None:
        with self._lock:
            old = self._by_id.get(checkpoint_id)
            if old is None:
                return
            self.counts["in_progress"] -= 1
            self.counts["completed"] += 1
            new = replace(
                old,
                status="COMPLETED",
                end_ms=end_ms,
                epoch=epoch,
                subtask_sizes=dict(subtask_sizes),
                external_path=external_path,
            )
            self._put(new)
            if new.is_savepoint:
                self.latest_savepoint = new
            else:
                self.latest_completed = new

    def reported_failed(self, checkpoint_id: int, end_ms: int, reason: str) -> None:
        with self._lock:
            old = self._by_id.get(checkpoint_id)
            if old is None:
                return
            self.counts["in_progress"] -= 1
            self.counts["failed"] += 1
            new = replace(old, status="FAILED", end_ms=end_ms, failure_reason=reason)
            self._put(new)
            self.latest_failed = new

    def reported_subsumed(self, checkpoint_id: int) -> None:
        """A retained checkpoint was dropped by retention (it stays in the history)."""
        with self._lock:
            old = self._by_id.get(checkpoint_id)
            if old is not None and old.status == "COMPLETED":
                self._put(replace(old, status="SUBSUMED"))

    def reported_restored(
        self, checkpoint_id: int, path: str, restore_ms: int, is_savepoint: bool
    ) -> None:
        with self._lock:
            self.counts["restored"] += 1
            self.latest_restored = {
                "id": checkpoint_id,
                "external_path": path,
                "restore_timestamp": restore_ms,
                "is_savepoint": is_savepoint,
            }

    def get(self, checkpoint_id: int) -> CheckpointStats | None:
        with self._lock:
            return self._by_id.get(checkpoint_id)

    def history(self) -> list[CheckpointStats]:
        """Newest first."""
        with self._lock:
            return list(reversed(self._history))

    def summary(self) -> dict[str, Any]:
        """Flink's ``/jobs/<id>/checkpoints`` document (counts, latest, history)."""
        with self._lock:
            latest = {
                "completed": self.latest_completed.to_dict() if self.latest_completed else None,
                "savepoint": self.latest_savepoint.to_dict() if self.latest_savepoint else None,
                "failed": self.latest_failed.to_dict() if self.latest_failed else None,
                "restored": dict(self.latest_restored) if self.latest_restored else None,
            }
            return {
                "counts": dict(self.counts),
                "latest": latest,
                "history": [s.to_dict() for s in reversed(self._history)],
            }
