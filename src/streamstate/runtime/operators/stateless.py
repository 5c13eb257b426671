"""Operators of non-keyed streams: map, flat_map, filter, process."""

from __future__ import annotations

from typing import Any

from streamstate.api.functions import ProcessFunction
from streamstate.runtime.operators.base import (
    StreamOperator,
    as_callable,
    close_function,
    open_function,
)
from streamstate.runtime.operators.outputs import outputs_not_iterable, split_yielded_side_outputs

__all__ = ["FilterOperator", "FlatMapOperator", "MapOperator", "ProcessOperator"]


class KeyedValuesOperator(StreamOperator):
    """The records of a keyed stream without their key (what a sink after ``key_by`` sees,
    as in Flink: the stream stays partitioned by key)."""

    def process_batch(self, batch: list[Any]) -> list[Any]:
        return [v for _, _, v in batch]

    def process_batch_ts(
        self, batch: list[Any], timestamps: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        return [v for _, _, v in batch], timestamps


class _FunctionOperator(StreamOperator):
    method = ""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn
        self.call = as_callable(fn, self.method)

    def open(self) -> None:
        assert self.ctx is not None
        open_function(self.fn, self.ctx)

    def close(self) -> None:
        close_function(self.fn)


class MapOperator(_FunctionOperator):
    method = "map"

    def process_batch(self, batch: list[Any]) -> list[Any]:
        f = self.call
        return [f(v) for v in batch]

    def process_batch_ts(
        self, batch: list[Any], timestamps: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        return self.process_batch(batch), timestamps


class FlatMapOperator(_FunctionOperator):
    method = "flat_map"

    def process_batch(self, batch: list[Any]) -> list[Any]:
        f = self.call
        out: list[Any] = []
        extend = out.extend
        for v in batch:
            r = f(v)
            if r is not None:
                try:
                    extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
        return out

    def process_batch_ts(
        self, batch: list[Any], timestamps: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        f = self.call
        out: list[Any] = []
        out_ts: list[Any] = []
        for v, t in zip(batch, timestamps, strict=True):
            r = f(v)
            if r is not None:
                n = len(out)
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
                out_ts.extend([t] * (len(out) - n))
        return out, out_ts


class FilterOperator(_FunctionOperator):
    method = "filter"

    def process_batch(self, batch: list[Any]) -> list[Any]:
        f = self.call
        return [v for v in batch if f(v)]

    def process_batch_ts(
        self, batch: list[Any], timestamps: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        f = self.call
        keep = [f(v) for v in batch]
        return (
            [v for v, k in zip(batch, keep, strict=True) if k],
            [t for t, k in zip(timestamps, keep, strict=True) if k],
        )


class _ProcessContext(ProcessFunction.Context):
    __slots__ = ("op", "ts")

    def __init__(self, op: StreamOperator) -> None:
        self.op = op
        self.ts: int | None = None

    def timestamp(self) -> int | None:
        return self.ts

    def timer_service(self) -> Any:
        from streamstate.runtime.operators.timing import QueryOnlyTimerService

        assert self.op.ctx is not None
        return QueryOnlyTimerService(self.op.ctx)

    def output(self, output_tag: Any, value: Any) -> None:
        self.op.emit_side(output_tag.tag_id, value, self.ts)


class ProcessOperator(_FunctionOperator):
    method = "process_element"

    def process_batch(self, batch: list[Any]) -> list[Any]:
        f = self.call
        ctx = _ProcessContext(self)
        out: list[Any] = []
        extend = out.extend
        for v in batch:
            r = f(v, ctx)
            if r is not None:
                try:
                    extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
        if self.side_tags:
            return split_yielded_side_outputs(self, out, None)[0]
        return out

    def process_batch_ts(
        self, batch: list[Any], timestamps: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        f = self.call
        ctx = _ProcessContext(self)
        out: list[Any] = []
        out_ts: list[Any] = []
        for v, t in zip(batch, timestamps, strict=True):
            ctx.ts = t
            r = f(v, ctx)
            if r is not None:
                n = len(out)
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
                out_ts.extend([t] * (len(out) - n))
        if self.side_tags:
            return split_yielded_side_outputs(self, out, out_ts)
        return out, out_ts
