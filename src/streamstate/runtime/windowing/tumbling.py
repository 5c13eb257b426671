"""The bulk path of the window operator for its most common case: tumbling event-time
windows with the default trigger (``EventTimeTrigger``). Functions of the operator
(``self``), kept apart from its generic per-element path; the result is the same."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import repeat
from typing import Any, cast

from streamstate.api.window_base import MAX_LONG_VALUE, MIN_LONG_VALUE, TimeWindow
from streamstate.runtime.operators.outputs import outputs_not_iterable
from streamstate.runtime.shuffle import KeyedColumns
from streamstate.runtime.state.kinds import BulkAddingState

__all__ = ["fire_tumbling", "tumbling_batch"]

_MISSING: Any = object()


def tumbling_batch(
    self: Any, batch: Sequence[Any], timestamps: list[Any]
) -> tuple[list[Any], list[Any]]:
    """Tumbling event-time windows with the default trigger, in bulk.

    Elements whose window has not reached the watermark only add to the window
    contents and register the window's timers (deduplicated), exactly what the
    generic path does for them; they are grouped per window so the state's
    namespace is set once per window and each (key, window) adds its elements
    (the user's ``add`` per element, in arrival order) and registers its timers
    once. Windows are independent, so the result is the generic path's. Returns
    the rest (late elements, windows firing at once, missing timestamps) for it.
    """
    size, offset = self.assigner._size, self.assigner._offset
    wm = self.timers.current_watermark()
    try:
        earliest = min(timestamps)
    except (TypeError, ValueError):  # a missing timestamp (None), or no element
        earliest = None
    if (
        earliest is None
        or earliest <= MIN_LONG_VALUE
        or earliest - (earliest - offset + size) % size + size - 1 <= wm
    ):
        return _checked_batch(self, batch, timestamps)
    # every element is on time (the common case): no check per element
    if isinstance(batch, KeyedColumns):
        kgs, keys, values = batch.kgs, batch.keys, batch.values
    else:
        kgs, keys, values = (list(c) for c in zip(*batch, strict=True)) if batch else ([], [], [])
    if self.folded is not None:  # reduce / aggregate: fold while grouping (folding.py)
        self.folded.add_batch(timestamps, keys, values, kgs)
        return [], []
    #: window start -> key -> its values (arrival order); windows and keys in order of
    #: first arrival, as the per-element path registers their timers
    groups: dict[int, defaultdict[Any, list[Any]]] = {}
    # elements come roughly in time order: the window of the last element is tested
    # first (two comparisons), its start computed only when an element leaves it
    lo, hi = 1, 0
    per_key: defaultdict[Any, list[Any]] = defaultdict(list)
    for ts, key, value in zip(timestamps, keys, values, strict=True):
        if ts >= hi or ts < lo:
            lo = ts - (ts - offset + size) % size
            hi = lo + size
            found = groups.get(lo)
            if found is None:
                per_key = groups[lo] = defaultdict(list)
            else:
                per_key = found
        per_key[key].append(value)
    _add_groups(self, groups, dict(zip(keys, kgs, strict=True)))
    return [], []


def _checked_batch(
    self: Any, batch: Sequence[Any], timestamps: list[Any]
) -> tuple[list[Any], list[Any]]:
    """:func:`tumbling_batch` checking each element: on-time ones in bulk, the rest back
    (the generic path, which uses the state: folded windows are written to it first)."""
    if self.folded is not None:
        self.folded.flush()
    size, offset = self.assigner._size, self.assigner._offset
    wm = self.timers.current_watermark()
    groups: dict[int, defaultdict[Any, list[Any]]] = {}
    key_groups: dict[Any, int] = {}
    rest: list[Any] = []
    rest_ts: list[Any] = []
    for rec, ts in zip(batch, timestamps, strict=True):
        if ts is not None and ts > MIN_LONG_VALUE:
            start = ts - (ts - offset + size) % size
            if start + size - 1 > wm:
                per_key = groups.get(start)
                if per_key is None:
                    per_key = groups[start] = defaultdict(list)
                key = rec[1]
                per_key[key].append(rec[2])
                key_groups[key] = rec[0]
                continue
        rest.append(rec)
        rest_ts.append(ts)
    _add_groups(self, groups, key_groups)
    return rest, rest_ts


def _add_groups(
    self: Any, groups: dict[int, defaultdict[Any, list[Any]]], key_groups: dict[Any, int]
) -> None:
    """Add each (window start, key)'s values to its window and register its timers.

    ``key_groups``: the key group of every key in ``groups``."""
    if not groups:
        return
    size = self.assigner._size
    backend = self.backend
    set_key = backend.set_current_key
    # the key is set without a call per (key, window) where the backend allows it
    first, n = backend.shuffled_key_slots() or (0, -1)
    current = backend.current
    ws = self.window_state
    # one state access per (key, window): a window's state is of a kind that adds many
    # values at once (MERGING_KINDS, checked when the operator is made)
    add_many = cast(BulkAddingState, ws).add_many
    register = self.timers.register_event_time_timers
    lateness = self.allowed_lateness
    for start, per_key in groups.items():
        window = TimeWindow(start, start + size)
        max_ts = start + size - 1
        ws.set_current_namespace(window)
        keys = []
        for key, vals in per_key.items():
            kg = key_groups[key]
            kgi = kg - first
            if 0 <= kgi < n:
                current.key = key
                current.key_group_index = kgi
                current.key_bytes = None
            else:
                set_key(key, kg)
            add_many(vals)
            keys.append((key, kg))
        register(window, max_ts, keys)
        cleanup = min(max_ts + lateness, MAX_LONG_VALUE)
        if cleanup != max_ts and cleanup < MAX_LONG_VALUE:
            register(window, cleanup, keys)


def fire_tumbling(self: Any, watermark: int, out: list[Any], out_ts: list[Any]) -> None:
    """``process_watermark``'s timers for tumbling event-time windows with the default
    trigger, a timestamp's timers at a time (their handling registers no timer).

    ``EventTimeTrigger`` registers only the timer at ``max_timestamp`` and fires on
    it; the cleanup timer is ``max_timestamp + allowed_lateness``. At cleanup the
    trigger deletes nothing and is skipped. Per timer what ``_on_timer`` does. A window
    folded out of the state (``folding.py``) fires from its accumulators (and, for keys
    folded nothing since, the state's it read when it was folded), and its cleanup
    forgets them (clearing the state's entries where it held some).
    """
    backend = self.backend
    set_key = backend.set_current_key
    first, n = backend.shuffled_key_slots() or (0, -1)
    current = backend.current
    ws = self.window_state
    get, clear = ws.get, ws.clear
    set_namespace = ws.set_current_namespace
    wf = self.window_function
    uses_state = wf.kind in ("process", "process_all")
    is_list = self.is_list
    process = wf.caller()
    pctx = self.process_ctx
    lateness = self.allowed_lateness
    extend, extend_ts = out.extend, out_ts.extend
    folded = self.folded
    result = None
    fired: list[Any] = []  # folded windows firing without timers, by time
    if folded is not None:
        result = folded.fold.result
        fired = folded.take_fired(watermark)
    for t, due in self.timers.take_due_event_time_timers(watermark):
        while fired and fired[0][0] < t:
            _fire_folded(self, fired.pop(0), out, out_ts)
        # a bucket holds the timers of few windows (one, where the lateness is 0), in runs
        window = max_ts = fires = cleans = accs = None
        stored: Any = None
        in_state = True
        cleaned: list[int] = []
        for key, kg, ns in due:
            kgi = kg - first
            if 0 <= kgi < n:
                current.key = key
                current.key_group_index = kgi
                current.key_bytes = None
            else:
                set_key(key, kg)
            if ns is not window:
                if max_ts is not None:  # the outputs of the last window carry its time
                    extend_ts(repeat(max_ts, len(out) - len(out_ts)))
                window = ns
                max_ts = window.end - 1
                fires = t == max_ts
                cleans = t == max_ts + lateness or t == MAX_LONG_VALUE  # the cleanup timer
                folded_window = None if folded is None else folded.windows.get(window.start)
                if folded_window is None:
                    accs = stored = None
                    in_state = True
                else:
                    accs, stored = folded_window.accs, folded_window.stored
                    in_state = not folded_window.fresh
                    if cleans:
                        cleaned.append(window.start)
                if in_state or uses_state:  # a fresh folded window has no namespace yet
                    set_namespace(window)
                pctx._window = window
            elif uses_state:
                set_namespace(window)
                pctx._window = window
            if fires:
                if accs is not None:  # folded: the newest accumulators are here
                    contents = accs.get(key, _MISSING)
                    if contents is _MISSING:  # none folded: the state's, or none
                        contents = stored.get(key)
                    if contents is not None and result is not None:
                        contents = result(contents)
                else:
                    contents = get()
                    if is_list:  # list state: no elements, no call (as _fire)
                        contents = list(contents) if contents else None
                if contents is not None:
                    r = process(key, window, pctx, contents)
                    if r is not None:
                        try:
                            extend(r)
                        except TypeError:
                            raise outputs_not_iterable(self, r) from None
                    if uses_state:  # the user function may have used state
                        set_namespace(window)
                        pctx._window = window
            if cleans:
                if in_state:
                    clear()
                if uses_state:
                    wf.clear(window, pctx)
        if max_ts is not None:
            extend_ts(repeat(max_ts, len(out) - len(out_ts)))
        if folded is not None:
            for start in cleaned:
                folded.drop(start)
    for window in fired:
        _fire_folded(self, window, out, out_ts)
    if folded is not None:
        folded.forget_key_groups()


def _fire_folded(self: Any, fired: Any, out: list[Any], out_ts: list[Any]) -> None:
    """Fire a folded window whose timers were deferred (``FoldedWindows.take_fired``):
    per key, in the timers' order, what the timer loop does for a window fired and
    cleaned at once from its accumulators."""
    max_ts, start, window = fired
    folded = self.folded
    backend = self.backend
    set_key = backend.set_current_key
    first, n = backend.shuffled_key_slots() or (0, -1)
    current = backend.current
    wf = self.window_function
    uses_state = wf.kind in ("process", "process_all")
    process = wf.caller()
    pctx = self.process_ctx
    result = folded.fold.result
    tw = TimeWindow(start, max_ts + 1)
    pctx._window = tw
    if uses_state:
        self.window_state.set_current_namespace(tw)
    extend = out.extend
    accs, key_groups = window.accs, folded.key_groups
    for key in folded.sorted_keys(window):
        kg = key_groups[key]
        kgi = kg - first
        if 0 <= kgi < n:
            current.key = key
            current.key_group_index = kgi
            current.key_bytes = None
        else:
            set_key(key, kg)
        contents = accs[key]
        if contents is not None:
            r = process(key, tw, pctx, contents if result is None else result(contents))
            if r is not None:
                try:
                    extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
        if uses_state:
            self.window_state.set_current_namespace(tw)
            pctx._window = tw
            wf.clear(tw, pctx)
    out_ts.extend(repeat(max_ts, len(out) - len(out_ts)))
