"""Checkpointing consistency mode, as ``pyflink.datastream.checkpointing_mode``."""

from __future__ import annotations

from enum import Enum

__all__ = ["CheckpointingMode"]


class CheckpointingMode(Enum):
    """What consistency a recovery guarantees.

    :data:`EXACTLY_ONCE`: after a recovery every record is reflected exactly once in operator
    state (and, with transactional sinks, in the output). State is restored from the last
    completed checkpoint and the sources are rewound to the offsets stored in it.

    :data:`AT_LEAST_ONCE`: after a recovery some records may be reflected more than once
    (replays are not deduplicated by the sinks). In the epoch model both modes take the same
    aligned snapshot; the mode only tells sinks whether they must commit transactionally.
    """

    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1
