"""Two-input and broadcast functions (re-exported by ``streamstate.api.functions``).

Mirrors PyFlink's ``CoMapFunction``, ``CoFlatMapFunction``, ``CoProcessFunction``,
``KeyedCoProcessFunction``, ``BroadcastProcessFunction`` and
``KeyedBroadcastProcessFunction``. Within one epoch a two-input operator
processes all records of its first input, then all of its second input;
broadcast operators process the broadcast side first, so that rules that arrive
in an epoch apply to that epoch's elements (see ``docs/architecture.md``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from streamstate.api.functions import Function

if TYPE_CHECKING:
    from streamstate.api.state import (
        BroadcastState,
        MapStateDescriptor,
        ReadOnlyBroadcastState,
        StateDescriptor,
    )
    from streamstate.api.time_domain import TimeDomain

__all__ = [
    "BaseBroadcastProcessFunction",
    "BroadcastProcessFunction",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
]


class CoMapFunction(Function):
    """``map1`` for the first input, ``map2`` for the second; one output each."""

    @abstractmethod
    def map1(self, value: Any) -> Any: ...

    @abstractmethod
    def map2(self, value: Any) -> Any: ...


class CoFlatMapFunction(Function):
    """``flat_map1`` / ``flat_map2``: yield (or return an iterable of) outputs."""

    @abstractmethod
    def flat_map1(self, value: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def flat_map2(self, value: Any) -> Iterable[Any] | None: ...


class CoProcessFunction(Function):
    """Per-record processing of two connected (non-keyed) streams."""

    class Context(ABC):
        @abstractmethod
        def timestamp(self) -> int | None: ...

        @abstractmethod
        def timer_service(self) -> Any: ...

    @abstractmethod
    def process_element1(
        self, value: Any, ctx: CoProcessFunction.Context
    ) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_element2(
        self, value: Any, ctx: CoProcessFunction.Context
    ) -> Iterable[Any] | None: ...


class KeyedCoProcessFunction(Function):
    """Per-record processing of two keyed connected streams.

    Keyed state (from ``open``'s runtime context) is shared by both inputs: a
    record of either input with key ``k`` sees the state of ``k``.
    """

    class Context(ABC):
        @abstractmethod
        def timestamp(self) -> int | None: ...

        @abstractmethod
        def get_current_key(self) -> Any: ...

        @abstractmethod
        def timer_service(self) -> Any: ...

    class OnTimerContext(Context):
        def time_domain(self) -> TimeDomain:
            """The TimeDomain of the firing timer."""
            raise NotImplementedError("the runtime's timer context answers this")

    @abstractmethod
    def process_element1(
        self, value: Any, ctx: KeyedCoProcessFunction.Context
    ) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_element2(
        self, value: Any, ctx: KeyedCoProcessFunction.Context
    ) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        """Called when a timer fires (timers come with the event-time work)."""
        return None


class BaseBroadcastProcessFunction(Function):
    """Contexts shared by the broadcast process functions."""

    class BaseContext(ABC):
        @abstractmethod
        def timestamp(self) -> int | None: ...

        @abstractmethod
        def current_processing_time(self) -> int: ...

        @abstractmethod
        def current_watermark(self) -> int: ...

    class Context(BaseContext):
        """The broadcast side's context: read-write broadcast state."""

        @abstractmethod
        def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> BroadcastState: ...

    class ReadOnlyContext(BaseContext):
        """The non-broadcast side's context: read-only broadcast state."""

        @abstractmethod
        def get_broadcast_state(
            self, state_descriptor: MapStateDescriptor
        ) -> ReadOnlyBroadcastState: ...


class BroadcastProcessFunction(BaseBroadcastProcessFunction):
    """A non-keyed stream connected with a :class:`BroadcastStream`."""

    @abstractmethod
    def process_element(
        self, value: Any, ctx: BaseBroadcastProcessFunction.ReadOnlyContext
    ) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_broadcast_element(
        self, value: Any, ctx: BaseBroadcastProcessFunction.Context
    ) -> Iterable[Any] | None: ...


class KeyedBroadcastProcessFunction(BaseBroadcastProcessFunction):
    """A keyed stream connected with a :class:`BroadcastStream`.

    ``process_broadcast_element``'s context can visit the keyed state of every
    key with ``apply_to_keyed_state(descriptor, function)``; ``function(key, state)``
    is called once per key that has that state on this subtask.
    """

    class Context(BaseBroadcastProcessFunction.Context):
        @abstractmethod
        def apply_to_keyed_state(
            self, state_descriptor: StateDescriptor, function: Callable[[Any, Any], None]
        ) -> None: ...

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext):
        @abstractmethod
        def timer_service(self) -> Any: ...

        @abstractmethod
        def get_current_key(self) -> Any: ...

    class OnTimerContext(ReadOnlyContext):
        def time_domain(self) -> TimeDomain:
            """The TimeDomain of the firing timer."""
            raise NotImplementedError("the runtime's timer context answers this")

    @abstractmethod
    def process_element(
        self, value: Any, ctx: KeyedBroadcastProcessFunction.ReadOnlyContext
    ) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_broadcast_element(
        self, value: Any, ctx: KeyedBroadcastProcessFunction.Context
    ) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        """Called when a timer fires (timers come with the event-time work)."""
        return None
