"""Watermarks in the epoch model: generation, combination over input channels, state.

A watermark is an int (milliseconds), as Flink's ``long``: ``MIN_WATERMARK`` is
"no event-time progress yet" and ``MAX_WATERMARK`` (Long.MAX_VALUE) is the final
watermark a finished input emits, so bounded jobs fire every event-time timer.

Per epoch, every subtask ends with one output watermark (or *idle*) per node.
The subtask sends it to every downstream subtask it can send records to; a
downstream subtask's input watermark is the minimum over its non-idle input
channels (all idle: the input is idle and its watermark does not move), and an
operator's watermark only ever advances. Nothing here imports pyspark.

The per-subtask watermark state (see :func:`node_state`) is reported to the
driver in the ack, handed back when a subtask instance is rebuilt and stored in
checkpoints, so watermarks survive failures and restores; :func:`merge_states`
combines several subtasks' states when the parallelism changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "BoundedOutOfOrdernessGenerator",
    "ChannelWatermark",
    "combine_channels",
    "merge_states",
]

MIN_WATERMARK = -(2**63)  # Long.MIN_VALUE: no watermark yet
MAX_WATERMARK = 2**63 - 1  # Long.MAX_VALUE: end of input


@dataclass(frozen=True)
class ChannelWatermark:
    """What one upstream subtask's node told us at the end of an epoch."""

    watermark: int
    idle: bool = False


def combine_channels(channels: Iterable[ChannelWatermark]) -> tuple[int | None, bool]:
    """Combined input watermark over input channels: ``(watermark, idle)``.

    The minimum over the active channels (Flink's StatusWatermarkValve). When
    every channel is idle the input is idle and the watermark is None (the
    operator keeps its current watermark); with no channel at all, likewise.
    """
    wm: int | None = None
    any_channel = False
    for c in channels:
        any_channel = True
        if c.idle:
            continue
        if wm is None or c.watermark < wm:
            wm = c.watermark
    if wm is None:
        return None, any_channel
    return wm, False


class BoundedOutOfOrdernessGenerator:
    """Flink's BoundedOutOfOrdernessWatermarks (+ WatermarksWithIdleness), emitted per epoch.

    ``watermark = max_timestamp - out_of_orderness - 1`` (``for_monotonous_timestamps``
    is ``out_of_orderness = 0``). With ``idle_timeout_ms`` the generator reports
    *idle* once it saw no record for that long in processing time (the driver's
    clock at the epochs' starts), and becomes active again with the next record.
    ``emit`` False is ``no_watermarks()``: never a watermark (only the final one).
    """

    __slots__ = ("emit", "idle_timeout_ms", "last_active_ms", "max_ts", "out_of_orderness_ms")

    def __init__(
        self, out_of_orderness_ms: int, idle_timeout_ms: int | None = None, emit: bool = True
    ) -> None:
        self.out_of_orderness_ms = out_of_orderness_ms
        self.idle_timeout_ms = idle_timeout_ms
        self.emit = emit
        self.max_ts = MIN_WATERMARK + out_of_orderness_ms + 1
        self.last_active_ms: int | None = None

    def on_timestamps(self, timestamps: list[int], now_ms: int | None) -> None:
        if timestamps:
            m = max(timestamps)
            if m > self.max_ts:
                self.max_ts = m
            if now_ms is not None:
                self.last_active_ms = now_ms

    def current(self, now_ms: int | None) -> tuple[int | None, bool]:
        """``(watermark, idle)`` at the end of an epoch (None: no watermark to emit)."""
        if self.idle_timeout_ms is not None and now_ms is not None:
            if self.last_active_ms is None:
                self.last_active_ms = now_ms  # the idle clock starts with the job
            elif now_ms - self.last_active_ms >= self.idle_timeout_ms:
                return None, True
        if not self.emit:
            return None, False
        return self.max_ts - self.out_of_orderness_ms - 1, False

    def snapshot(self) -> dict[str, Any]:
        return {"max": self.max_ts, "active": self.last_active_ms}

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("max") is not None:
            self.max_ts = max(self.max_ts, int(state["max"]))
        if state.get("active") is not None:
            self.last_active_ms = int(state["active"])


def node_state(watermark: int, generator: dict[str, Any] | None) -> dict[str, Any]:
    """The checkpointed watermark state of one node in one subtask (JSON-compatible)."""
    s: dict[str, Any] = {"wm": watermark}
    if generator is not None:
        s["gen"] = generator
    return s


def merge_states(states: list[dict[str, Any]]) -> dict[str, Any]:
    """One node state from several subtasks' states (a restore at another parallelism).

    Conservative: the minimum of the watermarks and of the generators' maximum
    timestamps, so no new subtask starts ahead of any old one.
    """
    if not states:
        return {}
    wm = min(int(s.get("wm", MIN_WATERMARK)) for s in states)
    gens = [s["gen"] for s in states if s.get("gen")]
    out: dict[str, Any] = {"wm": wm}
    if gens:
        maxes = [g["max"] for g in gens if g.get("max") is not None]
        actives = [g["active"] for g in gens if g.get("active") is not None]
        out["gen"] = {
            "max": min(maxes) if maxes else None,
            "active": max(actives) if actives else None,
        }
    return out
