"""``assign_timestamps_and_watermarks``: Flink's TimestampsAndWatermarksOperator.

Gives every record its event timestamp (the strategy's TimestampAssigner, or
the record's existing timestamp without one) and generates the watermark the
task forwards at the end of each epoch. Upstream watermarks are dropped, except
the final one (end of input), as in Flink.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

from streamstate.errors import TimestampError
from streamstate.runtime.field_getters import field_getter
from streamstate.runtime.operators.base import StreamOperator
from streamstate.runtime.watermarks import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    BoundedOutOfOrdernessGenerator,
)

__all__ = ["TimestampsAndWatermarksOperator"]

_INT_ONLY = frozenset({int})


class TimestampsAndWatermarksOperator(StreamOperator):
    generates_watermarks = True

    def __init__(self, strategy: Any) -> None:
        super().__init__()
        spec = strategy._spec
        self.assigner = spec.timestamp_assigner
        self.generator = BoundedOutOfOrdernessGenerator(
            spec.out_of_orderness_ms or 0,
            spec.idle_timeout_ms,
            emit=spec.out_of_orderness_ms is not None,
        )
        a = self.assigner
        self.extract = None if a is None else getattr(a, "extract_timestamp", a)
        #: the assigner as an item or attribute getter when all it does is read a field of
        #: the record (``return value[1]``): the same read, without a Python frame
        self.field = None if self.extract is None else field_getter(self.extract, 2)

    def _stamp(self, batch: list[Any], timestamps: list[Any] | None) -> list[Any]:
        ex = self.extract
        if ex is None:
            if timestamps is None:
                return [MIN_WATERMARK] * len(batch)
            return [MIN_WATERMARK if t is None else t for t in timestamps]
        # map() calls the assigner without a Python frame of ours per record
        if self.field is not None:
            if timestamps is not None and len(timestamps) != len(batch):
                raise ValueError(f"{len(batch)} records but {len(timestamps)} timestamps")
            ts = list(map(self.field, batch))  # the record's timestamp is not read
        elif timestamps is None:
            ts = list(map(ex, batch, repeat(MIN_WATERMARK, len(batch))))
        else:
            if len(timestamps) != len(batch):
                raise ValueError(f"{len(batch)} records but {len(timestamps)} timestamps")
            if None in timestamps:
                timestamps = [MIN_WATERMARK if p is None else p for p in timestamps]
            ts = list(map(ex, batch, timestamps))
        if set(map(type, ts)) <= _INT_ONLY:
            return ts
        for t in ts:
            if type(t) is not int:
                raise TimestampError(
                    f"the timestamp assigner of {self.ctx.task_name if self.ctx else 'the job'!r} "
                    f"returned {type(t).__name__} {t!r}; timestamps are int milliseconds since "
                    f"the epoch (e.g. int(dt.timestamp() * 1000))"
                )
        return ts

    def process_batch(self, batch: list[Any]) -> list[Any]:
        # Only called when nothing downstream reads timestamps (e.g. straight into a sink).
        self.generator.on_timestamps(self._stamp(batch, None), self._now())
        return batch

    def process_batch_ts(
        self, batch: list[Any], timestamps: list[Any] | None
    ) -> tuple[list[Any], list[Any]]:
        ts = self._stamp(batch, timestamps)
        self.generator.on_timestamps(ts, self._now())
        return batch, ts

    def _now(self) -> int | None:
        return self.ctx.processing_time if self.ctx is not None else None

    def output_watermark(
        self, input_watermark: int | None, now_ms: int | None
    ) -> tuple[int | None, bool]:
        """``(watermark, idle)`` this operator emits at the end of the epoch."""
        if input_watermark == MAX_WATERMARK:
            return MAX_WATERMARK, False
        return self.generator.current(now_ms)

    def snapshot_watermark_state(self) -> dict[str, Any]:
        return self.generator.snapshot()

    def restore_watermark_state(self, state: dict[str, Any]) -> None:
        self.generator.restore(state)
