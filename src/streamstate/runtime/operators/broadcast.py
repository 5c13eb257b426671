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

from streamstate.datastream.functions import KeyedBroadcastProcessFunction
from streamstate.runtime.errors import StateAccessError
from streamstate.runtime.operators.base import (
    StreamOperator,
    as_callable,
    close_function,
    open_function,
)

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
        return None

    def current_processing_time(self) -> int:
        import time

        return time.time_ns() // 1_000_000

    def current_watermark(self) -> int:
        return -(2**63)

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
                out.extend(r)
        return out


class BroadcastProcessOperator(_BroadcastOperator):
    def process_batch(self, batch: list[Any]) -> list[Any]:
        f, ctx = self.call1, self._ro
        out: list[Any] = []
        for v in batch:
            r = f(v, ctx)
            if r is not None:
                out.extend(r)
        return out


class KeyedBroadcastProcessOperator(_BroadcastOperator):
    keyed = True

    def process_batch(self, batch: list[Any]) -> list[Any]:
        f, ctx = self.call1, self._ro
        set_key = self.backend.set_current_key
        out: list[Any] = []
        for kg, key, v in batch:
            set_key(key, kg)
            r = f(v, ctx)
            if r is not None:
                out.extend(r)
        return out

    def apply_to_keyed_state(self, descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        """Call ``function(key, state)`` for every key of this subtask with state ``descriptor``."""
        assert self.ctx is not None
        backend = self.backend
        state = self.ctx._state(descriptor)  # registers the descriptor (checks its kind/type)
        for key in list(backend.get_keys(descriptor.name)):
            backend.set_current_key(key, backend.key_group_of(key))
            function(key, state)
