"""The bulk path of the window operator for its most common case: tumbling event-time
windows with the default trigger (``EventTimeTrigger``). Functions of the operator
(``self``), kept apart from its generic per-element path; the result is the same."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, NamedTuple, cast

from streamstate.api.window_base import MAX_LONG_VALUE, MIN_LONG_VALUE, TimeWindow
from streamstate.runtime.operators.outputs import outputs_not_iterable
from streamstate.runtime.shuffle import KeyedColumns
from streamstate.runtime.state.kinds import AccumulatorState, BulkAddingState

__all__ = ["Fold", "fire_tumbling", "fold_of", "tumbling_batch"]


class Fold(NamedTuple):
    """How a reducing or aggregating window folds its elements (the state's own ``add``):
    ``create`` and ``add`` of the ``AggregateFunction``, or ``create`` None and ``add``
    the ``ReduceFunction``'s ``reduce``."""

    create: Callable[[], Any] | None
    add: Callable[[Any, Any], Any]


def fold_of(descriptor: Any, state: Any) -> Fold | None:
    """The fold of a window's contents state, or None (list state, or a handle that does
    not expose its stored object: the bulk path then groups the values and adds them)."""
    if not isinstance(state, AccumulatorState):
        return None
    if descriptor.kind == "aggregating":
        agg = descriptor.get_agg_function()
        return Fold(agg.create_accumulator, agg.add)
    if descriptor.kind == "reducing":
        return Fold(None, descriptor.get_reduce_function().reduce)
    return None


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
    if self.fold is not None:  # reduce / aggregate: fold while grouping
        _fold_batch(self, timestamps, keys, values, kgs)
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


def _fold_batch(
    self: Any, timestamps: list[Any], keys: list[Any], values: list[Any], kgs: Sequence[int]
) -> None:
    """:func:`tumbling_batch`'s on-time elements of a reducing or aggregating window: each
    value is folded into its (window, key)'s accumulator as it is grouped (no list of
    values per (key, window)), then each accumulator is written with one access.

    The result is ``add_many``'s: per (window, key) the fold starts from the state's
    accumulator and ``add`` (``reduce``) runs per value in arrival order; ``None`` resets
    it, and a ``None`` accumulator starts anew (``create_accumulator``; a reduce takes the
    value). The state's accumulators are read only for the keys that have the window's
    firing timer (at its ``max_timestamp``): ``EventTimeTrigger`` registers it with the
    first element of every (key, window), and it leaves only when the window fires, so
    a window that has not fired (all of them here) holds contents only for those keys.
    A window new to the state reads nothing."""
    size, offset = self.assigner._size, self.assigner._offset
    create, add = self.fold
    #: window start -> (key -> accumulator, key -> the state's accumulator not yet used)
    groups: dict[int, tuple[dict[Any, Any], dict[Any, Any]]] = {}
    key_groups: dict[Any, int] = {}
    lo, hi = 1, 0
    accs: dict[Any, Any] = {}
    stored: dict[Any, Any] = {}
    # as tumbling_batch: the last element's window is tested first (two comparisons);
    # a key's first value in a window (or after a None) takes the slower branch
    if create is not None:
        for ts, key, value, kg in zip(timestamps, keys, values, kgs, strict=True):
            if ts >= hi or ts < lo:
                lo = ts - (ts - offset + size) % size
                hi = lo + size
                group = groups.get(lo)
                if group is None:
                    group = groups[lo] = ({}, _stored_accumulators(self, lo, hi))
                accs, stored = group
            if value is None:
                key_groups[key] = kg
                stored.pop(key, None)
                accs[key] = None
                continue
            acc = accs.get(key)
            if acc is None:
                key_groups[key] = kg
                acc = stored.pop(key, None)
                if acc is None:
                    acc = create()
            accs[key] = add(value, acc)
    else:
        for ts, key, value, kg in zip(timestamps, keys, values, kgs, strict=True):
            if ts >= hi or ts < lo:
                lo = ts - (ts - offset + size) % size
                hi = lo + size
                group = groups.get(lo)
                if group is None:
                    group = groups[lo] = ({}, _stored_accumulators(self, lo, hi))
                accs, stored = group
            if value is None:
                key_groups[key] = kg
                stored.pop(key, None)
                accs[key] = None
                continue
            acc = accs.get(key)
            if acc is None:
                key_groups[key] = kg
                acc = stored.pop(key, None)
                if acc is None:
                    accs[key] = value
                    continue
            accs[key] = add(acc, value)
    _write_folded(self, groups, key_groups)


def _stored_accumulators(self: Any, start: int, end: int) -> dict[Any, Any]:
    """key -> the state's accumulator in window ``[start, end)``, for the keys with the
    window's firing timer (:func:`_fold_batch`: no other key has contents there)."""
    window = TimeWindow(start, end)
    timer_keys = self.timers.event_time_timer_keys(window, end - 1)
    if not timer_keys:
        return {}
    backend = self.backend
    ws = self.window_state
    ws.set_current_namespace(window)
    get = cast(AccumulatorState, ws).get_internal
    out: dict[Any, Any] = {}
    for key, kg in timer_keys:
        backend.set_current_key(key, kg)
        acc = get()
        if acc is not None:
            out[key] = acc
    return out


def _write_folded(
    self: Any,
    groups: dict[int, tuple[dict[Any, Any], dict[Any, Any]]],
    key_groups: dict[Any, int],
) -> None:
    """Write each (window start, key)'s accumulator and register the window's timers."""
    size = self.assigner._size
    backend = self.backend
    set_key = backend.set_current_key
    first, n = backend.shuffled_key_slots() or (0, -1)
    current = backend.current
    ws = self.window_state
    update = cast(AccumulatorState, ws).update_internal
    register = self.timers.register_event_time_timers
    lateness = self.allowed_lateness
    for start, (accs, _) in groups.items():
        window = TimeWindow(start, start + size)
        max_ts = start + size - 1
        ws.set_current_namespace(window)
        keys = []
        for key, acc in accs.items():
            kg = key_groups[key]
            kgi = kg - first
            if 0 <= kgi < n:
                current.key = key
                current.key_group_index = kgi
                current.key_bytes = None
            else:
                set_key(key, kg)
            update(acc)
            keys.append((key, kg))
        register(window, max_ts, keys)
        cleanup = min(max_ts + lateness, MAX_LONG_VALUE)
        if cleanup != max_ts and cleanup < MAX_LONG_VALUE:
            register(window, cleanup, keys)


def _checked_batch(
    self: Any, batch: Sequence[Any], timestamps: list[Any]
) -> tuple[list[Any], list[Any]]:
    """:func:`tumbling_batch` checking each element: on-time ones in bulk, the rest back."""
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
    trigger's only timer has fired already (timers fire in order), so clearing the
    trigger deletes nothing and is skipped. Per timer what ``_on_timer`` does.
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
    for t, due in self.timers.take_due_event_time_timers(watermark):
        # a bucket holds the timers of few windows (one, where the lateness is 0), in runs
        window = max_ts = fires = cleans = None
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
                set_namespace(window)
                pctx._window = window
            elif uses_state:
                set_namespace(window)
                pctx._window = window
            if fires:
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
                clear()
                if uses_state:
                    wf.clear(window, pctx)
        if max_ts is not None:
            extend_ts(repeat(max_ts, len(out) - len(out_ts)))
