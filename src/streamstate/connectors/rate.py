"""``RateSource``: records generated at a rate, with a backlog (a load generator).

Flink's ``DataGeneratorSource`` with a ``RateLimiterStrategy``, on the epoch model: record
``i`` (``i = 0, 1, ...``) is *due* at the time the rate schedule reaches it, and a reader
reads only records that are due. The schedule starts at the driver's first planning
(``discover``) and is a list of steps ``[at_ms, records per second]``; ``set_rate`` adds
a step at the driver's next planning, so a load can step while the job runs. Time is the
driver's clock handed to ``discover`` / ``backlog`` (``JobSettings.clock``: injectable),
never read here.

The records are a pure function of their index (``generator(index, due_ms)``, by default
the tuple ``(index, due_ms)``), and the schedule is part of the enumerator state, so a
replay from a checkpoint reads the same records with the same due times: exactly-once.
Records are spread over ``splits`` fixed splits (record ``i`` in split ``i % splits``, as
a topic's partitions): a rescale moves splits between readers, never re-splits; readers
beyond ``splits`` read nothing.

``backlog(state, now_ms)``: records due by ``now_ms`` and not read yet (the autoscaler's
backlog, runtime/autoscaling.py), Flink's ``pendingRecords``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from streamstate.connectors.base import Source
from streamstate.errors import ConfigurationError

__all__ = ["RateSource"]


def _check_rate(rate: float) -> float:
    try:
        value = float(rate)
    except (TypeError, ValueError) as e:
        raise ConfigurationError(
            f"a RateSource's rate is records per second (a number >= 0), got {rate!r}"
        ) from e
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(
            f"a RateSource's rate is records per second (a number >= 0), got {rate!r}"
        )
    return value


def due_by(steps: list[list[float]], now_ms: float) -> int:
    """How many records the schedule ``steps`` makes due by ``now_ms``."""
    total = 0.0
    for n, (at_ms, rate) in enumerate(steps):
        if now_ms <= at_ms:
            break
        until = steps[n + 1][0] if n + 1 < len(steps) else now_ms
        total += rate * (min(until, now_ms) - at_ms) / 1000.0
    return int(math.floor(total + 1e-9))


def due_time_ms(steps: list[list[float]], index: int) -> int:
    """When record ``index`` falls due under ``steps`` (ms; the last step goes on)."""
    before = 0.0  # records due at the start of the step
    for n, (at_ms, rate) in enumerate(steps):
        until = steps[n + 1][0] if n + 1 < len(steps) else math.inf
        in_step = rate * (until - at_ms) / 1000.0 if rate > 0 else 0.0
        if rate > 0 and before + in_step >= index + 1 - 1e-9:
            return int(math.ceil(at_ms + (index + 1 - before) * 1000.0 / rate - 1e-6))
        before += in_step
    raise ValueError(f"record {index} is never due under {steps}")


def _default_record(index: int, due_ms: int) -> tuple[int, int]:
    return (index, due_ms)


class RateSource(Source):
    """Records at ``records_per_second`` (changed by :meth:`set_rate`), in ``splits`` splits.

    ``generator(index, due_ms)`` makes record ``index`` (picklable; default: the tuple
    ``(index, due_ms)``, so a job can measure a record's latency from when it was due).
    Unbounded: the job runs until it is cancelled or stopped.
    """

    bounded = False
    stateless_reader = True

    def __init__(
        self,
        records_per_second: float,
        splits: int = 4,
        generator: Callable[[int, int], Any] | None = None,
    ) -> None:
        if not isinstance(splits, int) or splits < 1:
            raise ConfigurationError(f"a RateSource needs splits >= 1, got {splits!r}")
        self.splits = splits
        self.generator = generator
        #: the rate the driver's next planning makes current (driver side)
        self.rate = _check_rate(records_per_second)

    def set_rate(self, records_per_second: float) -> None:
        """Step the rate (driver side: the object handed to ``from_source``): records
        fall due at the new rate from the driver's next epoch planning on."""
        self.rate = _check_rate(records_per_second)

    # -- driver ---------------------------------------------------------------------------

    def create_enumerator_state(self, parallelism: int) -> Any:
        return {"next": [0] * self.splits, "steps": [], "due": 0}

    def restore_enumerator_state(self, state: Any, parallelism: int) -> Any:
        if len(state["next"]) != self.splits:
            raise ConfigurationError(
                f"this RateSource has {self.splits} splits, the checkpoint's has "
                f"{len(state['next'])}: a source's splits cannot change; give it "
                f"splits={len(state['next'])}"
            )
        return state

    def discover(self, state: Any, now_ms: int) -> Any:
        steps = [list(s) for s in state["steps"]]
        if not steps or steps[-1][1] != self.rate:
            if steps and now_ms <= steps[-1][0]:
                steps[-1][1] = self.rate  # two changes within one millisecond: the last
            else:
                steps.append([now_ms, self.rate])
        return {"next": list(state["next"]), "steps": steps, "due": due_by(steps, now_ms)}

    def plan_epoch(self, state: Any, parallelism: int) -> list[Any]:
        per: list[list[Any]] = [[] for _ in range(parallelism)]
        due, n = state["due"], self.splits
        for split, position in enumerate(state["next"]):
            end = max(0, (due - split + n - 1) // n)  # positions of this split that are due
            per[split % parallelism].append([split, position, end])
        return [{"steps": state["steps"], "splits": splits} for splits in per]

    def apply_progress(self, state: Any, progress: list[Any]) -> Any:
        positions = list(state["next"])
        for per in progress:
            for split, position in per or []:
                positions[split] = position
        return {**state, "next": positions}

    def backlog(self, state: Any, now_ms: int) -> int | None:
        """Records due by ``now_ms`` that no reader has read (the autoscaler's backlog)."""
        if state is None or not state["steps"]:
            return None
        return max(0, due_by(state["steps"], now_ms) - sum(state["next"]))

    def is_finished(self, state: Any) -> bool:
        return False

    # -- worker ---------------------------------------------------------------------------

    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        make = self.generator or _default_record
        steps, n = assignment["steps"], self.splits
        out: list[Any] = []
        progress = []
        for split, position, end in assignment["splits"]:
            take = max(0, min(end - position, budget - len(out)))
            for k in range(position, position + take):
                index = k * n + split
                out.append(make(index, due_time_ms(steps, index)))
            progress.append([split, position + take])
        return out, progress
