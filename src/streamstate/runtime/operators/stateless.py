"""Operators of non-keyed streams: map, flat_map, filter, process."""

from __future__ import annotations

from typing import Any

from streamstate.datastream.functions import ProcessFunction
from streamstate.runtime.operators.base import (
    StreamOperator,
    as_callable,
    close_function,
    open_function,
)

__all__ = ["FilterOperator", "FlatMapOperator", "MapOperator", "ProcessOperator"]


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


class FlatMapOperator(_FunctionOperator):
    method = "flat_map"

    def process_batch(self, batch: list[Any]) -> list[Any]:
        f = self.call
        out: list[Any] = []
        extend = out.extend
        for v in batch:
            r = f(v)
            if r is not None:
                extend(r)
        return out


class FilterOperator(_FunctionOperator):
    method = "filter"

    def process_batch(self, batch: list[Any]) -> list[Any]:
        f = self.call
        return [v for v in batch if f(v)]


class _ProcessContext(ProcessFunction.Context):
    __slots__ = ()

    def timestamp(self) -> int | None:
        return None


class ProcessOperator(_FunctionOperator):
    method = "process_element"

    def process_batch(self, batch: list[Any]) -> list[Any]:
        f = self.call
        ctx = _ProcessContext()
        out: list[Any] = []
        extend = out.extend
        for v in batch:
            r = f(v, ctx)
            if r is not None:
                extend(r)
        return out
