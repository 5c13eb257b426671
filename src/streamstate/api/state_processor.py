"""User functions of the State Processor API (Flink's ``org.apache.flink.state.api``).

Readers turn the state of one operator in a savepoint (or a retained checkpoint) into
records; bootstrap functions turn records into the state of one operator of a new
savepoint. Every function runs in Spark tasks, one instance per key-group range (keyed)
or per partition (operator state): ``open(runtime_context)`` first, ``close()`` last, as
for the DataStream functions.

* :class:`KeyedStateReaderFunction` - ``read_key(key, ctx, out)`` once per key of the
  states it registered in ``open()``; ``ctx`` lists the key's registered timers.
* :class:`WindowReaderFunction` - ``read_window(key, ctx, elements, out)`` once per
  (key, window) of a window operator.
* :class:`KeyedStateBootstrapFunction` - ``process_element(value, ctx)`` with keyed state
  (and timers) scoped to the record's key.
* :class:`StateBootstrapFunction` - a :class:`CheckpointedFunction` writing operator list /
  union list state; :class:`BroadcastStateBootstrapFunction` - broadcast state.

``out`` is a :class:`Collector`; a function may also ``yield`` (or return an iterable of)
its records instead.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from streamstate.api.checkpointing import CheckpointedFunction
from streamstate.api.functions import Function
from streamstate.api.timerservice import TimerService

__all__ = [
    "BroadcastStateBootstrapFunction",
    "Collector",
    "KeyedStateBootstrapFunction",
    "KeyedStateReaderFunction",
    "OperatorIdentifier",
    "StateBootstrapFunction",
    "WindowReaderFunction",
]


class Collector(ABC):
    """Receives the records a reader function emits (Flink's ``Collector``)."""

    @abstractmethod
    def collect(self, record: Any) -> None: ...

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        pass


@dataclass(frozen=True)
class OperatorIdentifier:
    """Which operator of a savepoint: its ``uid`` (``.uid(...)`` in the job) or, for jobs
    that set none, the generated uid recorded in the savepoint (``for_uid_hash``; see
    ``streamstate describe`` and ``DataStream.set_uid_hash``). Plain strings are accepted
    wherever an identifier is taken."""

    identifier: str
    is_uid_hash: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.identifier, str) or not self.identifier:
            raise ValueError(f"an operator uid must be a non-empty str, got {self.identifier!r}")

    @staticmethod
    def for_uid(uid: str) -> OperatorIdentifier:
        return OperatorIdentifier(uid)

    @staticmethod
    def for_uid_hash(uid_hash: str) -> OperatorIdentifier:
        return OperatorIdentifier(uid_hash, is_uid_hash=True)

    @staticmethod
    def of(operator: str | OperatorIdentifier) -> OperatorIdentifier:
        """``operator`` as an identifier (a ``str`` is a uid)."""
        if isinstance(operator, OperatorIdentifier):
            return operator
        return OperatorIdentifier(operator)

    def __str__(self) -> str:
        return self.identifier


class KeyedStateReaderFunction(Function):
    """Reads the keyed state of one operator, key by key.

    Register the states to read in ``open(runtime_context)`` (``runtime_context.get_state``,
    ``get_list_state``, ...: the job's descriptors, or untyped ones with the same names).
    ``read_key`` is then called once for every key that has a value in any of them, with
    every registered state scoped to that key.
    """

    class Context(ABC):
        @abstractmethod
        def registered_event_time_timers(self) -> set[int]:
            """The current key's event-time timers (``ctx.timer_service()`` timers)."""

        @abstractmethod
        def registered_processing_time_timers(self) -> set[int]:
            """The current key's processing-time timers."""

    @abstractmethod
    def read_key(
        self, key: Any, ctx: KeyedStateReaderFunction.Context, out: Collector
    ) -> Iterable[Any] | None:
        """Emit the records of ``key`` (``out.collect(...)``, or yield them)."""


class WindowReaderFunction(Function):
    """Reads the windows of a window operator: one call per (key, window) with contents.

    ``elements`` are the window's contents: the buffered elements of a ``process``/``apply``
    window, or the one pre-aggregated value of a ``reduce`` (the reduced value) or an
    ``aggregate`` (``get_result`` of the accumulator) window.
    """

    class Context(ABC):
        @abstractmethod
        def window(self) -> Any:
            """The window being read (a ``TimeWindow`` for tumbling and sliding windows)."""

        @abstractmethod
        def trigger_state(self, descriptor: Any) -> Any:
            """The trigger's state ``descriptor`` of the current key and window."""

        @abstractmethod
        def window_state(self) -> Any:
            """Per-window state (``ProcessWindowFunction.Context.window_state()``)."""

        @abstractmethod
        def global_state(self) -> Any:
            """Per-key state shared by the key's windows."""

        @abstractmethod
        def registered_event_time_timers(self) -> set[int]:
            """The window's event-time timers (its trigger's and its cleanup timer)."""

        @abstractmethod
        def registered_processing_time_timers(self) -> set[int]:
            """The window's processing-time timers."""

    @abstractmethod
    def read_window(
        self,
        key: Any,
        ctx: WindowReaderFunction.Context,
        elements: Iterable[Any],
        out: Collector,
    ) -> Iterable[Any] | None:
        """Emit the records of one window of ``key``."""


class KeyedStateBootstrapFunction(Function):
    """Writes keyed state: ``process_element`` runs with the record's key as current key."""

    class Context(ABC):
        @abstractmethod
        def timer_service(self) -> TimerService:
            """Register timers of the current key (they fire in the job restored from the
            savepoint, as ``KeyedProcessFunction`` timers)."""

        @abstractmethod
        def get_current_key(self) -> Any: ...

    @abstractmethod
    def process_element(self, value: Any, ctx: KeyedStateBootstrapFunction.Context) -> None:
        """Write ``value`` into keyed state."""


class StateBootstrapFunction(Function, CheckpointedFunction):
    """Writes operator (list / union list) state: register it in ``initialize_state``,
    fill it in ``process_element`` or ``snapshot_state`` (called once, at the end)."""

    class Context(ABC):
        @abstractmethod
        def current_processing_time(self) -> int: ...

    @abstractmethod
    def process_element(self, value: Any, ctx: StateBootstrapFunction.Context) -> None: ...


class BroadcastStateBootstrapFunction(Function):
    """Writes broadcast state (one copy, restored on every subtask of the operator)."""

    class Context(ABC):
        @abstractmethod
        def current_processing_time(self) -> int: ...

        @abstractmethod
        def get_broadcast_state(self, descriptor: Any) -> Any:
            """The broadcast state of ``descriptor`` (a ``MapStateDescriptor``)."""

    @abstractmethod
    def process_element(self, value: Any, ctx: BroadcastStateBootstrapFunction.Context) -> None: ...
