"""``from_sequence`` / ``NumberSequenceSource``: the integers ``[start, end]``, in parallel."""

from __future__ import annotations

from typing import Any

from streamstate.connectors.base import Source
from streamstate.errors import ConfigurationError

__all__ = ["SequenceSource"]


class SequenceSource(Source):
    """Split ``[start, end]`` (inclusive, as Flink) into one contiguous range per reader.

    Each split's position is its next number; on rescale, the unread remainder
    of every split is kept as is (splits move round robin to the new readers).
    """

    bounded = True
    sliced_reads = True
    stateless_reader = True

    def __init__(self, start: int, end: int) -> None:
        if end < start:
            raise ConfigurationError(f"sequence end {end} is before its start {start}")
        self.start, self.end = int(start), int(end)

    def create_enumerator_state(self, parallelism: int) -> Any:
        n = self.end - self.start + 1
        splits = []
        for i in range(parallelism):
            lo = self.start + n * i // parallelism
            hi = self.start + n * (i + 1) // parallelism  # exclusive
            splits.append([lo, hi])
        return {"splits": splits}

    def plan_epoch(self, state: Any, parallelism: int) -> list[Any]:
        per: list[list[Any]] = [[] for _ in range(parallelism)]
        for i, split in enumerate(state["splits"]):
            per[i % parallelism].append([i, split[0], split[1]])
        return per

    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        out: list[int] = []
        progress = []
        for idx, nxt, hi in assignment:
            take = max(0, min(hi - nxt, budget - len(out)))
            out.extend(range(nxt, nxt + take))
            progress.append([idx, nxt + take])
        return out, progress

    def advance(self, assignment: Any, progress: Any) -> Any:
        # read() reports every split of its assignment, in order
        return [[idx, nxt, hi] for (idx, _, hi), (_, nxt) in zip(assignment, progress, strict=True)]

    def apply_progress(self, state: Any, progress: list[Any]) -> Any:
        splits = [list(s) for s in state["splits"]]
        for per in progress:
            for idx, nxt in per or []:
                splits[idx][0] = nxt
        return {"splits": splits}

    def backlog(self, state: Any, now_ms: int) -> int | None:
        """Numbers not read yet: all of the sequence is available at once (the
        autoscaler's backlog, runtime/autoscaling.py)."""
        return sum(max(0, hi - lo) for lo, hi in state["splits"]) if state else None

    def is_finished(self, state: Any) -> bool:
        return all(lo >= hi for lo, hi in state["splits"])

    def finishes_within(self, state: Any, parallelism: int, budget: int) -> bool:
        left = [0] * parallelism
        for i, (lo, hi) in enumerate(state["splits"]):
            left[i % parallelism] += max(0, hi - lo)
        return max(left, default=0) <= budget
