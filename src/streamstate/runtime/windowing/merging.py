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
from typing import Any

__all__ = ["MERGING_WINDOW_SET_STATE_NAME", "MergingWindowSet"]

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
