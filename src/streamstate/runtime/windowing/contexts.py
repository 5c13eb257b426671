"""The contexts a window operator hands to assigners, triggers and window functions.

State scoping: the trigger context and the per-window state store return the
operator's keyed state handles with their namespace set to the window, so
trigger state (e.g. CountTrigger's count) and ``window_state()`` live under
(key, window) and are checkpointed and rescaled with the key. ``global_state()``
returns handles reset to the void namespace (per-key state shared by windows).
"""

from __future__ import annotations

from typing import Any

from streamstate.api.window_base import Trigger, WindowAssigner
from streamstate.api.window_functions import (
    ProcessAllWindowFunction,
    ProcessWindowFunction,
)
from streamstate.errors import StateAccessError
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.kinds import merging_state

__all__ = [
    "AssignerContext",
    "GlobalStateStore",
    "PerWindowStateStore",
    "TriggerContext",
    "WindowProcessContext",
]

_GETTERS = {
    "ValueStateDescriptor": "get_state",
    "ListStateDescriptor": "get_list_state",
    "MapStateDescriptor": "get_map_state",
    "ReducingStateDescriptor": "get_reducing_state",
    "AggregatingStateDescriptor": "get_aggregating_state",
}


def keyed_state(runtime_context: Any, descriptor: Any) -> Any:
    """The keyed state handle of ``descriptor`` (any kind) from an operator context."""
    getter = _GETTERS.get(type(descriptor).__name__)
    if getter is None:
        raise StateAccessError(f"unsupported state descriptor {descriptor!r}")
    return getattr(runtime_context, getter)(descriptor)


def _scoped(state: Any, namespace: Any) -> Any:
    state.set_current_namespace(namespace)
    return state


class _StateStore:
    """A ``KeyedStateStore`` whose handles are scoped to ``self.namespace``."""

    def __init__(self, runtime_context: Any) -> None:
        self._rc = runtime_context
        self.namespace: Any = VOID_NAMESPACE

    def get_state(self, state_descriptor: Any) -> Any:
        return _scoped(self._rc.get_state(state_descriptor), self.namespace)

    def get_list_state(self, state_descriptor: Any) -> Any:
        return _scoped(self._rc.get_list_state(state_descriptor), self.namespace)

    def get_map_state(self, state_descriptor: Any) -> Any:
        return _scoped(self._rc.get_map_state(state_descriptor), self.namespace)

    def get_reducing_state(self, state_descriptor: Any) -> Any:
        return _scoped(self._rc.get_reducing_state(state_descriptor), self.namespace)

    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        return _scoped(self._rc.get_aggregating_state(state_descriptor), self.namespace)


class PerWindowStateStore(_StateStore):
    """``window_state()``: state of the current key and window."""


class GlobalStateStore(_StateStore):
    """``global_state()``: state of the current key (void namespace)."""


class _MergingWindowStateStore:
    """``window_state()`` of merging windows: not allowed (as in Flink)."""

    def _fail(self, *_: Any) -> Any:
        raise StateAccessError(
            "Per-window state is not allowed when using merging windows (session windows): "
            "use global_state() or the window contents instead"
        )

    get_state = get_list_state = get_map_state = _fail
    get_reducing_state = get_aggregating_state = _fail


class AssignerContext(WindowAssigner.WindowAssignerContext):
    def __init__(self, timers: Any, runtime_context: Any) -> None:
        self._timers = timers
        self._rc = runtime_context

    def get_current_processing_time(self) -> int:
        return self._timers.current_processing_time()

    def get_runtime_context(self) -> Any:
        return self._rc


class TriggerContext(Trigger.OnMergeContext):
    """Trigger callbacks' context: timers and state of (current key, ``self.window``)."""

    def __init__(self, runtime_context: Any, timers: Any) -> None:
        self._rc = runtime_context
        self._timers = timers
        self.window: Any = None
        self.merged_windows: Any = None

    def get_current_processing_time(self) -> int:
        return self._timers.current_processing_time()

    def get_metric_group(self) -> Any:
        raise StateAccessError("metrics are not supported (see docs/limitations.md)")

    def get_current_watermark(self) -> int:
        return self._timers.current_watermark()

    def register_processing_time_timer(self, time: int) -> None:
        self._timers.register_processing_time_timer(self.window, time)

    def register_event_time_timer(self, time: int) -> None:
        self._timers.register_event_time_timer(self.window, time)

    def delete_processing_time_timer(self, time: int) -> None:
        self._timers.delete_processing_time_timer(self.window, time)

    def delete_event_time_timer(self, time: int) -> None:
        self._timers.delete_event_time_timer(self.window, time)

    def get_partitioned_state(self, state_descriptor: Any) -> Any:
        return _scoped(keyed_state(self._rc, state_descriptor), self.window)

    def merge_partitioned_state(self, state_descriptor: Any) -> None:
        if not self.merged_windows:
            return
        state = keyed_state(self._rc, state_descriptor)
        # value and map state cannot merge: StateAccessError naming the kinds that can
        merging_state(state, state_descriptor).merge_namespaces(self.window, self.merged_windows)


class WindowProcessContext(ProcessWindowFunction.Context, ProcessAllWindowFunction.Context):
    """The context of ``ProcessWindowFunction`` / ``ProcessAllWindowFunction`` calls."""

    def __init__(self, op: Any, runtime_context: Any, timers: Any, merging: bool) -> None:
        self._op = op
        self._timers = timers
        self._window: Any = None
        self._window_store: Any = (
            _MergingWindowStateStore() if merging else PerWindowStateStore(runtime_context)
        )
        self._global_store = GlobalStateStore(runtime_context)

    def window(self) -> Any:
        return self._window

    def current_processing_time(self) -> int:
        return self._timers.current_processing_time()

    def current_watermark(self) -> int:
        return self._timers.current_watermark()

    def window_state(self) -> Any:
        store = self._window_store
        if isinstance(store, PerWindowStateStore):
            store.namespace = self._window
        return store

    def global_state(self) -> Any:
        return self._global_store

    def output(self, output_tag: Any, value: Any) -> None:
        self._op.side_output(output_tag, value, self._window.max_timestamp())
