"""The broadcast state pattern: (Keyed)BroadcastProcessOperator.

Input 0 is the non-broadcast side (``(key_group, key, value)`` triples when
keyed), input 1 the broadcast side (plain values, every record reaches every
subtask). The broadcast side is processed first within an epoch
(``second_input_first``) and gets read-write broadcast state; the other side
gets a read-only view whose writes raise :class:`StateAccessError`. Broadcast
state lives in the subtask's operator state store under the descriptors given
to ``DataStream.broadcast(...)``, so it is versioned every epoch, checkpointed
by every subtask and redistributed on rescale like other operator state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamstate.api.co_functions import KeyedBroadcastProcessFunction
from streamstate.api.time_domain import TimeDomain
from streamstate.errors import StateAccessError
from streamstate.runtime.operators.base import (
    StreamOperator,
    as_callable,
    close_function,
    open_function,
)
from streamstate.runtime.operators.outputs import outputs_not_iterable, split_yielded_side_outputs
from streamstate.runtime.operators.timing import KeyedTimersMixin

__all__ = ["BroadcastProcessOperator", "KeyedBroadcastProcessOperator"]


class _Context(
    KeyedBroadcastProcessFunction.Context, KeyedBroadcastProcessFunction.ReadOnlyContext
):
    """Both contexts in one class; ``read_only`` decides which view of broadcast state
    is returned. Keyed-only methods raise on the non-keyed operator."""

    __slots__ = ("op", "read_only")

    def __init__(self, op: _BroadcastOperator, read_only: bool) -> None:
        self.op = op
        self.read_only = read_only

    def timestamp(self) -> int | None:
        # set per record by StreamOperator.process_batch_ts / process_batch2_ts
        return self.op.current_timestamp

    def current_processing_time(self) -> int:
        assert self.op.ctx is not None
        now = self.op.ctx.processing_time  # the epoch's driver time, set by the task
        if now:
            return int(now)
        import time

        return time.time_ns() // 1_000_000

    def current_watermark(self) -> int:
        assert self.op.ctx is not None
        return int(self.op.ctx.current_watermark)

    def output(self, output_tag: Any, value: Any) -> None:
        self.op.emit_side(output_tag.tag_id, value, self.timestamp())

    def get_broadcast_state(self, state_descriptor: Any) -> Any:
        return self.op.broadcast_state(state_descriptor, self.read_only)

    def get_current_key(self) -> Any:
        return self.op.backend.get_current_key()

    def timer_service(self) -> Any:
        if not self.read_only:
            raise StateAccessError(
                "timers can only be used in process_element() of a KeyedBroadcastProcessFunction "
                "(the broadcast side has no current key)"
            )
        return self.op.timer_service()

    def apply_to_keyed_state(
        self, state_descriptor: Any, function: Callable[[Any, Any], None]
    ) -> None:
        if self.read_only:
            raise StateAccessError(
                "apply_to_keyed_state() is only available in process_broadcast_element()"
            )
        self.op.apply_to_keyed_state(state_descriptor, function)


class _OnTimerContext(_Context, KeyedBroadcastProcessFunction.OnTimerContext):
    __slots__ = ("event_time", "ts")

    def __init__(self, op: _BroadcastOperator, event_time: bool) -> None:
        super().__init__(op, True)
        self.event_time = event_time
        self.ts: int | None = None

    def timestamp(self) -> int | None:
        return self.ts

    def time_domain(self) -> TimeDomain:
        return TimeDomain.EVENT_TIME if self.event_time else TimeDomain.PROCESSING_TIME


class _BroadcastOperator(StreamOperator):
    two_input = True
    second_input_first = True
    allows_broadcast_state = True

    def __init__(self, fn: Any, descriptors: tuple[Any, ...]) -> None:
        super().__init__()
        self.fn = fn
        self.descriptors = {d.name: d for d in descriptors}
        self.call1 = as_callable(fn, "process_element")
        self.call2 = as_callable(fn, "process_broadcast_element")
        #: (id(descriptor), read_only) -> (descriptor, state handle)
        self._handles: dict[tuple[int, bool], tuple[Any, Any]] = {}

    def open(self) -> None:
        assert self.ctx is not None
        # register every broadcast state up front: the state exists (empty) on all subtasks
        for d in self.descriptors.values():
            self.ctx.operator_state_store.get_broadcast_state(d)
        self._ro = _Context(self, True)
        self._rw = _Context(self, False)
        open_function(self.fn, self.ctx)

    def close(self) -> None:
        close_function(self.fn)

    @property
    def backend(self) -> Any:
        if self.ctx is None or self.ctx.keyed_backend is None:
            raise StateAccessError("this broadcast operator is not keyed: there is no current key")
        return self.ctx.keyed_backend

    def broadcast_state(self, descriptor: Any, read_only: bool) -> Any:
        # hot path (once per record): the same descriptor object gets the cached handle
        hit = self._handles.get((id(descriptor), read_only))
        if hit is not None and hit[0] is descriptor:
            return hit[1]
        state = self._resolve(descriptor, read_only)
        self._handles[(id(descriptor), read_only)] = (descriptor, state)
        return state

    def _resolve(self, descriptor: Any, read_only: bool) -> Any:
        assert self.ctx is not None
        name = getattr(descriptor, "name", None)
        if name not in self.descriptors:
            raise StateAccessError(
                f"broadcast state {name!r} was not declared: pass its MapStateDescriptor to "
                f"broadcast() (declared: {sorted(self.descriptors)})"
            )
        store = self.ctx.operator_state_store
        if read_only:
            return store.broadcast_state_read_only(descriptor)
        return store.get_broadcast_state(descriptor)

    def apply_to_keyed_state(self, descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        raise StateAccessError(
            "apply_to_keyed_state() needs a keyed stream (KeyedBroadcastProcessFunction)"
        )

    def process_batch2(self, batch: list[Any]) -> list[Any]:
        f, ctx = self.call2, self._rw
        out: list[Any] = []
        for v in batch:
            r = f(v, ctx)
            if r is not None:
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
        return split_yielded_side_outputs(self, out, None)[0] if self.side_tags else out


class BroadcastProcessOperator(_BroadcastOperator):
    def process_batch(self, batch: list[Any]) -> list[Any]:
        f, ctx = self.call1, self._ro
        out: list[Any] = []
        for v in batch:
            r = f(v, ctx)
            if r is not None:
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
        return split_yielded_side_outputs(self, out, None)[0] if self.side_tags else out


class KeyedBroadcastProcessOperator(KeyedTimersMixin, _BroadcastOperator):
    """Timers (``KeyedTimersMixin``) on the keyed side: ``on_timer`` gets a read-only
    broadcast-state context with ``time_domain()``."""

    keyed = True

    def open(self) -> None:
        super().open()
        self.open_timers()

    def on_timer_context(self, event_time: bool) -> Any:
        return _OnTimerContext(self, event_time)

    def process_batch(self, batch: list[Any]) -> list[Any]:
        f, ctx = self.call1, self._ro
        set_key = self.backend.set_current_key
        out: list[Any] = []
        for kg, key, v in batch:
            set_key(key, kg)
            r = f(v, ctx)
            if r is not None:
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
        return split_yielded_side_outputs(self, out, None)[0] if self.side_tags else out

    def apply_to_keyed_state(self, descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        """Call ``function(key, state)`` for every key of this subtask with state ``descriptor``."""
        assert self.ctx is not None
        backend = self.backend
        state = self.ctx._state(descriptor)  # registers the descriptor (checks its kind/type)
        for key in list(backend.get_keys(descriptor.name)):
            backend.set_current_key(key, backend.key_group_of(key))
            function(key, state)
