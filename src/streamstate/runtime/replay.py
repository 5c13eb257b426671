"""Replays over committed output: when a restore may skip what was already committed.

A restore replays the epochs after its checkpoint. Usually nothing of them was committed
(sinks commit only when a checkpoint covering an epoch completes). Two recovery paths
restore *behind* committed output: the automatic fallback to an older checkpoint (or to
the start) when the newest one is damaged, and a user resuming an older retained
checkpoint. A replay there writes again what was committed unless the sinks skip it.

Skipping is exact only if the replay reproduces the committed run record for record. It
does when (1) the job graph and its parallelism are the same (a sink subtask's input order
is fixed by its upstream subtasks, ``runtime/shuffle.py``) and the epochs are cut by
record counts alone, which the :func:`replay_stamp` of a job captures, and (2) every
replayed epoch was cut by its budget, not by what had arrived yet: an epoch in which an
unbounded source read less than its budget (it caught up with its input) ends wherever the
input ended at that time, and a replay reads more. The driver records the last such epoch
(:class:`ReplayHistory`, stored in every checkpoint's properties), so a restore knows
whether the epochs it replays were all cut by budget.

:class:`ReplayPlan` is the decision for one restore, handed to the sinks' committers and,
as ``EpochSpec.replay_stamp``, to their subtasks (``None``: do not skip).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from streamstate.errors import DuplicateOutputError

__all__ = [
    "ALLOW_DUPLICATES_KEY",
    "NO_REPLAY",
    "PROPERTY",
    "ReplayHistory",
    "ReplayPlan",
    "replay_stamp",
]

#: the checkpoint property holding :meth:`ReplayHistory.to_property`
PROPERTY = "replay"
#: the named option that allows writing committed output again
ALLOW_DUPLICATES_KEY = "execution.state-recovery.allow-duplicate-output"

log = logging.getLogger("streamstate")


def replay_stamp(plan: Any, epoch_records: int, epoch_interval_s: float) -> str | None:
    """What fixes every subtask's input order, as a short hash: each stage's parallelism,
    max parallelism and operator uids, and the records per source subtask and epoch.
    ``None`` when epochs are cut by time (``execution.epoch.interval``): a replay then
    cuts them elsewhere, and nothing can tell which replayed records were committed."""
    if epoch_interval_s > 0:
        return None
    shape = [
        [st.id, st.parallelism, st.max_parallelism, sorted(n.uid for n in st.nodes.values())]
        for st in plan.stages
    ]
    text = json.dumps([shape, epoch_records], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class ReplayHistory:
    """The driver's record of how its epochs were cut (see the module docstring)."""

    #: the job's :func:`replay_stamp`
    stamp: str | None
    #: the last epoch an unbounded source cut short (0: none)
    uncertain_epoch: int = 0

    def epoch_read(self, epoch: int, read: int, full_budget: int, unbounded: bool) -> None:
        """Epoch ``epoch`` read ``read`` records where a full epoch reads ``full_budget``."""
        if unbounded and read < full_budget:
            self.uncertain_epoch = epoch

    def to_property(self) -> dict[str, Any]:
        return {"stamp": self.stamp, "uncertain_epoch": self.uncertain_epoch}

    @staticmethod
    def from_property(saved: Any) -> ReplayHistory | None:
        """The history a checkpoint recorded (``None``: written before it existed)."""
        if not isinstance(saved, dict):
            return None
        stamp = saved.get("stamp")
        return ReplayHistory(
            str(stamp) if stamp is not None else None, int(saved.get("uncertain_epoch", 0))
        )

    def replays_exactly(self, after_epoch: int, stamp: str | None) -> bool:
        """Whether a job with ``stamp`` restored at ``after_epoch`` reproduces this
        history's epochs after it record for record."""
        return stamp is not None and stamp == self.stamp and self.uncertain_epoch <= after_epoch


@dataclass(frozen=True)
class ReplayPlan:
    """How one restore treats output committed after its checkpoint.

    ``stamp``: the job's replay stamp when the replay reproduces the committed epochs (the
    sinks skip what was committed), else ``None`` (nothing is skipped).
    ``allow_duplicates``: the user allowed writing committed output again
    (``execution.state-recovery.allow-duplicate-output``) where it cannot be skipped.
    ``committed_epoch``: the last epoch whose output is known to be committed after the
    restored checkpoint (0: none known).
    """

    stamp: str | None
    allow_duplicates: bool = False
    committed_epoch: int = 0
    #: why the replay is not exact (when ``stamp`` is None), for error messages
    why_not_exact: str = ""

    @property
    def skips_committed(self) -> bool:
        return self.stamp is not None

    def duplicates(self, message: str) -> None:
        """The restore would write committed output again (``message`` says what): raise
        :class:`DuplicateOutputError` naming the option, or warn when it is allowed."""
        if not self.allow_duplicates:
            raise DuplicateOutputError(
                f"{message}. Restore the newest checkpoint, or allow the duplicates with "
                f"{ALLOW_DUPLICATES_KEY}: true (`streamstate run --allow-duplicate-output`)"
            )
        log.warning("%s (allowed by %s)", message, ALLOW_DUPLICATES_KEY)


#: the plan before any restore: nothing committed to skip
NO_REPLAY = ReplayPlan(None, why_not_exact="no restore")
