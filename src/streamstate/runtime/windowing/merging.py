"""Flink's ``MergingWindowSet``: the in-flight windows of one key of a merging assigner.

It maps every in-flight window to its *state window*: the namespace that
holds the window's contents. When windows merge, the merge result takes over
the state window of one of the merged windows and the others' state is merged
into it, so contents are never moved more than needed (and the state window
of a merged session stays stable).

The mapping is kept in a ``MapState`` (``merging-window-set``, window ->
state window) of the key, so it is checkpointed, restored and rescaled with
the window contents. A set is loaded for the current key, changed, and
``persist()``-ed back when it changed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import partial
from typing import Any

from streamstate.errors import StateAccessError

__all__ = ["MERGING_WINDOW_SET_STATE_NAME", "MergingWindowSet", "merge_windows", "merging_element"]

MERGING_WINDOW_SET_STATE_NAME = "merging-window-set"

#: merge_function(merge_result, merged_windows, state_window_result, merged_state_windows)
MergeFunction = Callable[[Any, Collection[Any], Any, Collection[Any]], None]


class _Collector:
    """MergeCallback collecting ``(merge_result, windows)`` pairs."""

    def __init__(self) -> None:
        self.results: list[tuple[Any, list[Any]]] = []

    def merge(self, to_be_merged: Any, merge_result: Any) -> None:
        self.results.append((merge_result, list(to_be_merged)))


class MergingWindowSet:
    """The window -> state window mapping of the current key (see the module docstring)."""

    def __init__(self, assigner: Any, state: Any) -> None:
        self.assigner = assigner
        self.state = state
        self.mapping: dict[Any, Any] = dict(state.items())
        self._initial = dict(self.mapping)

    def persist(self) -> None:
        """Write the mapping back to keyed state if it changed."""
        if self.mapping != self._initial:
            self.state.clear()
            if self.mapping:
                self.state.put_all(self.mapping)
            self._initial = dict(self.mapping)

    def get_state_window(self, window: Any) -> Any:
        """The state window of in-flight ``window`` (None if it is not in flight)."""
        return self.mapping.get(window)

    def retire_window(self, window: Any) -> None:
        """Remove ``window`` (it was purged); raises if it is not in flight."""
        if self.mapping.pop(window, None) is None:
            raise KeyError(f"window {window!r} is not in the in-flight window set")

    def add_window(self, new_window: Any, merge_function: MergeFunction) -> Any:
        """Add ``new_window``, merging it with in-flight windows; returns its actual window.

        ``merge_function`` is called for every merge that involves state (before
        the mapping's old entries disappear from keyed state): it must merge
        the contents of ``merged_state_windows`` into ``state_window_result``.
        """
        windows = [*self.mapping, new_window]
        collector = _Collector()
        self.assigner.merge_windows(windows, collector)

        result_window = new_window
        merged_new_window = False
        for merge_result, merged_windows in collector.results:
            if new_window in merged_windows:
                merged_windows.remove(new_window)
                merged_new_window = True
                result_window = merge_result
            # the merge result takes over the state window of any merged window
            merged_state_window = self.mapping[merged_windows[0]]
            merged_state_windows = []
            for w in merged_windows:
                res = self.mapping.pop(w, None)
                if res is not None:
                    merged_state_windows.append(res)
            self.mapping[merge_result] = merged_state_window
            merged_state_windows.remove(merged_state_window)
            # one pre-existing window "merged" into itself without growing: nothing to do
            if not (merge_result in merged_windows and len(merged_windows) == 1):
                merge_function(
                    merge_result, merged_windows, self.mapping[merge_result], merged_state_windows
                )
        if not collector.results or (result_window == new_window and not merged_new_window):
            self.mapping[result_window] = result_window
        return result_window

    def __repr__(self) -> str:
        return f"MergingWindowSet({self.mapping})"


# -- the window operator's merging path (functions of the operator, ``self``)


def merging_element(
    self: Any, key: Any, value: Any, ts: Any, out: list[Any], out_ts: list[Any]
) -> None:
    windows = self.assigner.assign_windows(value, ts, self.assigner_ctx)
    mws = MergingWindowSet(self.assigner, self.merging_sets_state)
    ws = self.window_state
    tctx = self.trigger_ctx
    skipped = True
    for window in windows:
        actual = mws.add_window(window, partial(merge_windows, self))
        if self.event_time and self._is_window_late(actual):
            mws.retire_window(actual)
            continue
        skipped = False
        state_window = mws.get_state_window(actual)
        if state_window is None:
            raise StateAccessError(f"window {actual!r} is not in the in-flight window set")
        ws.set_current_namespace(state_window)
        ws.add(value)
        tctx.window = actual
        result = self.trigger.on_element(value, ts, actual, tctx)
        if result.is_fire():
            self._fire(key, actual, state_window, out, out_ts)
        if result.is_purge():
            ws.set_current_namespace(state_window)
            ws.clear()
        self._register_cleanup_timer(actual)
    mws.persist()
    if skipped:
        self._late(value, ts)


def merge_windows(
    self: Any,
    merge_result: Any,
    merged_windows: Any,
    state_window_result: Any,
    merged_state_windows: Any,
) -> None:
    timers = self.timers
    if self.event_time:
        if self._cleanup_time(merge_result) <= timers.current_watermark():
            raise StateAccessError(
                f"The end timestamp of an event-time window cannot become earlier than the "
                f"current watermark by merging. Current watermark: "
                f"{timers.current_watermark()} window: {merge_result!r}"
            )
    elif merge_result.max_timestamp() <= timers.current_processing_time():
        raise StateAccessError(
            f"The end timestamp of a processing-time window cannot become earlier than the "
            f"current processing time by merging. Current processing time: "
            f"{timers.current_processing_time()} window: {merge_result!r}"
        )
    tctx = self.trigger_ctx
    tctx.window = merge_result
    tctx.merged_windows = merged_windows
    try:
        self.trigger.on_merge(merge_result, tctx)
    finally:
        tctx.merged_windows = None
    for m in merged_windows:
        tctx.window = m
        self.trigger.clear(m, tctx)
        self._delete_cleanup_timer(m)
    self.merging_window_state.merge_namespaces(state_window_result, merged_state_windows)
