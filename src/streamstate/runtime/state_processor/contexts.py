"""The contexts the State Processor API hands to reader and bootstrap functions."""

from __future__ import annotations

from typing import Any

from streamstate.api.state import MapStateDescriptor
from streamstate.api.state_processor import (
    BroadcastStateBootstrapFunction,
    Collector,
    KeyedStateBootstrapFunction,
    KeyedStateReaderFunction,
    StateBootstrapFunction,
    WindowReaderFunction,
)
from streamstate.errors import OutputTypeError
from streamstate.runtime.operators.base import OperatorContext
from streamstate.runtime.operators.timing import KeyedTimerService
from streamstate.runtime.timers import InternalTimerService
from streamstate.runtime.windowing.contexts import (
    GlobalStateStore,
    PerWindowStateStore,
    keyed_state,
)

__all__ = [
    "BootstrapContext",
    "BroadcastBootstrapContext",
    "KeyedBootstrapContext",
    "KeyedReaderContext",
    "ListCollector",
    "RecordingRuntimeContext",
    "TimerStateView",
    "WindowReaderContext",
    "collect_outputs",
]


class ListCollector(Collector):
    """Buffers collected records until the task takes them."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: list[Any] = []

    def collect(self, record: Any) -> None:
        self.records.append(record)

    def drain(self) -> list[Any]:
        out, self.records = self.records, []
        return out


def collect_outputs(fn: Any, returned: Any, out: ListCollector) -> None:
    """Add what a reader function returned or yielded (besides ``out.collect``) to ``out``."""
    if returned is None:
        return
    try:
        out.records.extend(returned)
    except TypeError:
        raise OutputTypeError(
            f"{type(fn).__name__} returned {type(returned).__name__} {returned!r:.60}; emit "
            f"records with out.collect(record), or yield them"
        ) from None


class RecordingRuntimeContext(OperatorContext):
    """An operator context that records the keyed states the function registers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registered: dict[str, Any] = {}

    def _state(self, descriptor: Any) -> Any:
        state = super()._state(descriptor)
        self.registered.setdefault(descriptor.name, descriptor)
        return state


class TimerStateView:
    """The registered timers of the current key in one timer service (read-only): the
    ``_timer_state/{event,processing}_<service>`` map states, ``(namespace, ts) -> True``."""

    def __init__(self, backend: Any, service: str) -> None:
        self._backend = backend
        self._service = service
        self._states: dict[str, Any] = {}

    def timestamps(self, domain: str, namespace: Any) -> set[int]:
        state = self._states.get(domain)
        if state is None:
            name = f"_timer_state/{domain}_{self._service}"
            state = self._states[domain] = self._backend.get_partitioned_state(
                MapStateDescriptor(name)
            )
        return {ts for ns, ts in state.keys() if ns == namespace}


class KeyedReaderContext(KeyedStateReaderFunction.Context):
    """Timers of the current key in the void namespace (``ctx.timer_service()`` timers)."""

    def __init__(self, timers: TimerStateView) -> None:
        self._timers = timers

    def registered_event_time_timers(self) -> set[int]:
        return self._timers.timestamps("event", None)

    def registered_processing_time_timers(self) -> set[int]:
        return self._timers.timestamps("processing", None)


class WindowReaderContext(WindowReaderFunction.Context):
    """The current (key, window) of a window operator: its trigger and window state, the
    key's global state and the window's timers."""

    def __init__(self, runtime_context: Any, timers: TimerStateView) -> None:
        self._rc = runtime_context
        self._timers = timers
        self._window: Any = None
        self._window_store = PerWindowStateStore(runtime_context)
        self._global_store = GlobalStateStore(runtime_context)

    def at(self, window: Any) -> WindowReaderContext:
        self._window = window
        self._window_store.namespace = window
        return self

    def window(self) -> Any:
        return self._window

    def trigger_state(self, descriptor: Any) -> Any:
        state = keyed_state(self._rc, descriptor)
        state.set_current_namespace(self._window)
        return state

    def window_state(self) -> Any:
        return self._window_store

    def global_state(self) -> Any:
        return self._global_store

    def registered_event_time_timers(self) -> set[int]:
        return self._timers.timestamps("event", self._window)

    def registered_processing_time_timers(self) -> set[int]:
        return self._timers.timestamps("processing", self._window)


class KeyedBootstrapContext(KeyedStateBootstrapFunction.Context):
    """The current key and a timer service writing ``KeyedProcessFunction`` timers."""

    def __init__(self, runtime_context: OperatorContext) -> None:
        self._rc = runtime_context
        self._timer_service: KeyedTimerService | None = None

    def timer_service(self) -> KeyedTimerService:
        if self._timer_service is None:  # created on demand: no timer states otherwise
            internal = InternalTimerService.for_operator(self._rc, "user-timers")
            self._timer_service = KeyedTimerService(self._rc, internal)
        return self._timer_service

    def get_current_key(self) -> Any:
        return self._rc.keyed_backend.get_current_key()


class BootstrapContext(StateBootstrapFunction.Context):
    def __init__(self, now_ms: int) -> None:
        self._now = now_ms

    def current_processing_time(self) -> int:
        return self._now


class BroadcastBootstrapContext(BroadcastStateBootstrapFunction.Context):
    def __init__(self, store: Any, now_ms: int) -> None:
        self._store = store
        self._now = now_ms

    def current_processing_time(self) -> int:
        return self._now

    def get_broadcast_state(self, descriptor: Any) -> Any:
        return self._store.get_broadcast_state(descriptor)
