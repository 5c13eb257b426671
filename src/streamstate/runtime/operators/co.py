"""Two-input operators of connected streams (``DataStream.connect``).

``process_batch`` takes the first input, ``process_batch2`` the second. In the
keyed variants both inputs arrive as ``(key_group, key, value)`` triples and
share one keyed backend: the current key is set before every user call, so a
record of either input sees the state of its key.

The contexts hold their operator, and ``timer_service()`` asks the operator
(``StreamOperator.timer_service``), so the event-time work can provide timers
by overriding one method.
"""

from __future__ import annotations

from typing import Any

from streamstate.api.co_functions import CoProcessFunction, KeyedCoProcessFunction
from streamstate.api.time_domain import TimeDomain
from streamstate.runtime.operators.base import (
    StreamOperator,
    as_callable,
    close_function,
    open_function,
)
from streamstate.runtime.operators.outputs import outputs_not_iterable, split_yielded_side_outputs
from streamstate.runtime.operators.timing import KeyedTimersMixin

__all__ = [
    "CoFlatMapOperator",
    "CoMapOperator",
    "CoProcessOperator",
    "KeyedCoFlatMapOperator",
    "KeyedCoMapOperator",
    "KeyedCoProcessOperator",
]


class _TwoInputFunctionOperator(StreamOperator):
    two_input = True
    methods = ("", "")

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn
        self.call1 = as_callable(fn, self.methods[0])
        self.call2 = as_callable(fn, self.methods[1])

    def open(self) -> None:
        assert self.ctx is not None
        open_function(self.fn, self.ctx)

    def close(self) -> None:
        close_function(self.fn)

    @property
    def backend(self) -> Any:
        assert self.ctx is not None and self.ctx.keyed_backend is not None
        return self.ctx.keyed_backend

    def process_batch(self, batch: list[Any]) -> list[Any]:
        out = self._run(self.call1, batch)
        return split_yielded_side_outputs(self, out, None)[0] if self.side_tags else out

    def process_batch2(self, batch: list[Any]) -> list[Any]:
        out = self._run(self.call2, batch)
        return split_yielded_side_outputs(self, out, None)[0] if self.side_tags else out

    def _run(self, f: Any, batch: list[Any]) -> list[Any]:
        raise NotImplementedError


class CoMapOperator(_TwoInputFunctionOperator):
    methods = ("map1", "map2")

    def _run(self, f: Any, batch: list[Any]) -> list[Any]:
        return [f(v) for v in batch]


class CoFlatMapOperator(_TwoInputFunctionOperator):
    methods = ("flat_map1", "flat_map2")

    def _run(self, f: Any, batch: list[Any]) -> list[Any]:
        out: list[Any] = []
        for v in batch:
            r = f(v)
            if r is not None:
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
        return out


class _CoProcessContext(CoProcessFunction.Context):
    __slots__ = ("op",)

    def __init__(self, op: StreamOperator) -> None:
        self.op = op

    def timestamp(self) -> int | None:
        # set per record by StreamOperator.process_batch_ts / process_batch2_ts
        return self.op.current_timestamp

    def timer_service(self) -> Any:
        return self.op.timer_service()

    def output(self, output_tag: Any, value: Any) -> None:
        self.op.emit_side(output_tag.tag_id, value, self.op.current_timestamp)


class CoProcessOperator(_TwoInputFunctionOperator):
    methods = ("process_element1", "process_element2")

    def _run(self, f: Any, batch: list[Any]) -> list[Any]:
        ctx = _CoProcessContext(self)
        out: list[Any] = []
        for v in batch:
            r = f(v, ctx)
            if r is not None:
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
        return out


class KeyedCoMapOperator(_TwoInputFunctionOperator):
    keyed = True
    methods = ("map1", "map2")

    def _run(self, f: Any, batch: list[Any]) -> list[Any]:
        set_key = self.backend.set_current_key
        out: list[Any] = []
        for kg, key, v in batch:
            set_key(key, kg)
            out.append(f(v))
        return out


class KeyedCoFlatMapOperator(_TwoInputFunctionOperator):
    keyed = True
    methods = ("flat_map1", "flat_map2")

    def _run(self, f: Any, batch: list[Any]) -> list[Any]:
        set_key = self.backend.set_current_key
        out: list[Any] = []
        for kg, key, v in batch:
            set_key(key, kg)
            r = f(v)
            if r is not None:
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
        return out


class _KeyedCoProcessContext(KeyedCoProcessFunction.OnTimerContext):
    __slots__ = ("op",)

    def __init__(self, op: StreamOperator) -> None:
        self.op = op

    def timestamp(self) -> int | None:
        # set per record by StreamOperator.process_batch_ts / process_batch2_ts
        return self.op.current_timestamp

    def get_current_key(self) -> Any:
        assert self.op.ctx is not None and self.op.ctx.keyed_backend is not None
        return self.op.ctx.keyed_backend.get_current_key()

    def timer_service(self) -> Any:
        return self.op.timer_service()

    def output(self, output_tag: Any, value: Any) -> None:
        self.op.emit_side(output_tag.tag_id, value, self.timestamp())


class _KeyedCoOnTimerContext(_KeyedCoProcessContext):
    __slots__ = ("event_time", "ts")

    def __init__(self, op: StreamOperator, event_time: bool) -> None:
        super().__init__(op)
        self.event_time = event_time
        self.ts: int | None = None

    def timestamp(self) -> int | None:
        return self.ts

    def time_domain(self) -> TimeDomain:
        return TimeDomain.EVENT_TIME if self.event_time else TimeDomain.PROCESSING_TIME


class KeyedCoProcessOperator(KeyedTimersMixin, _TwoInputFunctionOperator):
    keyed = True
    methods = ("process_element1", "process_element2")

    def open(self) -> None:
        super().open()
        self.open_timers()

    def on_timer_context(self, event_time: bool) -> Any:
        return _KeyedCoOnTimerContext(self, event_time)

    def _run(self, f: Any, batch: list[Any]) -> list[Any]:
        set_key = self.backend.set_current_key
        ctx = _KeyedCoProcessContext(self)
        out: list[Any] = []
        for kg, key, v in batch:
            set_key(key, kg)
            r = f(v, ctx)
            if r is not None:
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
        return out
