"""Reducing and aggregating tumbling windows folded in bulk, kept out of the state until
they must be there (the window operator's fast path: ``tumbling.py``).

For ``reduce``/``aggregate`` windows the bulk path folds each on-time value into its
(window, key)'s accumulator as it groups the batch (no list of values per (key, window))
and keeps the accumulators here, in :class:`FoldedWindows`, instead of writing them to
the window contents state. A window that fires before anything else looks at the state
(as every window opened and fired within one epoch) then never touches it: firing reads
the accumulator from here and the cleanup drops it. Everything that reads or writes the
contents state otherwise writes the folded windows to it first (:meth:`FoldedWindows.
flush`): the operator's ``snapshot_state`` (so every snapshot, checkpoint and version
holds them), its generic per-element path and processing-time timers. A window that
had contents in the state before it was folded here fires from its accumulators and
the state's it read (``stored``, for keys not folded since), and its cleanup clears
the state's entries too.

Without allowed lateness a window's firing and cleanup are one timer: a fresh folded
window registers its keys' timers only when it is written to the state; one that fires
first (:meth:`FoldedWindows.take_fired`) fires in the timers' order (key group, then
first arrival) without entering the timer queue. Where the queue holds a timer at the
window's time already, its timers are registered and it fires through the queue.

The result is ``add_many``'s: per (window, key) the fold starts from the state's
accumulator and ``add`` (``reduce``) runs per value in arrival order; a ``None`` value
resets it, and a ``None`` accumulator starts anew (``create_accumulator``; a reduce
takes the value). The state's accumulators are read only for the keys that have the
window's firing timer (at its ``max_timestamp``): ``EventTimeTrigger`` registers it with
the first element of every (key, window), and it leaves only when the window fires, so
a window that has not fired (every window folded here) holds contents only for those
keys. A window new to the state reads nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import islice
from operator import itemgetter
from typing import Any, NamedTuple, cast

from streamstate.api.window_base import MAX_LONG_VALUE, TimeWindow
from streamstate.runtime.state.kinds import AccumulatorState

__all__ = ["Fold", "FoldedWindow", "FoldedWindows", "fold_of"]

_first = itemgetter(0)


class Fold(NamedTuple):
    """How a reducing or aggregating window folds its elements (the state's own ``add``):
    ``create``, ``add`` and ``result`` of the ``AggregateFunction``, or ``create`` and
    ``result`` None and ``add`` the ``ReduceFunction``'s ``reduce``."""

    create: Callable[[], Any] | None
    add: Callable[[Any, Any], Any]
    result: Callable[[Any], Any] | None


def fold_of(descriptor: Any, state: Any) -> Fold | None:
    """The fold of a window's contents state, or None (list state, or a handle that does
    not expose its stored object: the bulk path then groups the values and adds them)."""
    if not isinstance(state, AccumulatorState):
        return None
    if descriptor.kind == "aggregating":
        agg = descriptor.get_agg_function()
        return Fold(agg.create_accumulator, agg.add, agg.get_result)
    if descriptor.kind == "reducing":
        return Fold(None, descriptor.get_reduce_function().reduce, None)
    return None


class FoldedWindow:
    """One window's folded accumulators: ``accs`` (key -> accumulator, ``None``: none; keys
    in order of first arrival), ``stored`` (key -> the state's accumulator, for the keys
    whose first value here is still to come), ``fresh`` (the state held no contents of the
    window when it was folded here: firing and cleanup need not look at the state) and
    ``registered`` (how many keys of ``accs`` have their timers)."""

    __slots__ = ("accs", "stored", "fresh", "registered")

    def __init__(self, stored: dict[Any, Any]) -> None:
        self.accs: dict[Any, Any] = {}
        self.stored = stored
        self.fresh = not stored
        self.registered = 0


class FoldedWindows:
    """The folded windows of one window operator (``op``), by window start."""

    def __init__(self, op: Any, fold: Fold) -> None:
        self.op = op
        self.fold = fold
        #: fresh windows defer their timers (module docstring): no allowed lateness
        self.defer = op.allowed_lateness == 0
        self.windows: dict[int, FoldedWindow] = {}
        #: the key group of every key in ``windows``
        self.key_groups: dict[Any, int] = {}

    def add_batch(
        self, timestamps: list[Any], keys: list[Any], values: list[Any], kgs: Sequence[int]
    ) -> None:
        """Fold on-time elements (every window not fired: the caller checked) and register
        the timers of the (key, window)s new here, as the generic path would."""
        op = self.op
        size, offset = op.assigner._size, op.assigner._offset
        create, add, _ = self.fold
        windows, key_groups = self.windows, self.key_groups
        lo, hi = 1, 0
        accs: dict[Any, Any] = {}
        stored: dict[Any, Any] = {}
        # elements come roughly in time order: the window of the last element is tested
        # first (two comparisons); a key's first value in a window (or after a None) takes
        # the slower branch
        if create is not None:
            for ts, key, value, kg in zip(timestamps, keys, values, kgs, strict=True):
                if ts >= hi or ts < lo:
                    lo = ts - (ts - offset + size) % size
                    hi = lo + size
                    window = windows.get(lo)
                    if window is None:
                        window = windows[lo] = FoldedWindow(self._stored(lo, hi))
                    accs, stored = window.accs, window.stored
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
                    window = windows.get(lo)
                    if window is None:
                        window = windows[lo] = FoldedWindow(self._stored(lo, hi))
                    accs, stored = window.accs, window.stored
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
        self._register()

    def _stored(self, start: int, end: int) -> dict[Any, Any]:
        """key -> the state's accumulator in window ``[start, end)``, for the keys with the
        window's firing timer (no other key has contents there: module docstring)."""
        op = self.op
        window = TimeWindow(start, end)
        timer_keys = op.timers.event_time_timer_keys(window, end - 1)
        if not timer_keys:
            return {}
        backend = op.backend
        set_key = backend.set_current_key
        first, n = backend.shuffled_key_slots() or (0, -1)
        current = backend.current
        ws = op.window_state
        ws.set_current_namespace(window)
        get = cast(AccumulatorState, ws).get_internal
        out: dict[Any, Any] = {}
        for key, kg in timer_keys:
            kgi = kg - first
            if 0 <= kgi < n:
                current.key = key
                current.key_group_index = kgi
                current.key_bytes = None
            else:
                set_key(key, kg)
            acc = get()
            if acc is not None:
                out[key] = acc
        return out

    def _register(self) -> None:
        """Register the firing (and cleanup) timers of the keys new in each window, but
        in the fresh windows that defer theirs."""
        defer = self.defer
        for start, window in self.windows.items():
            if not (defer and window.fresh):
                self._register_keys(start, window)

    def _register_keys(self, start: int, window: FoldedWindow) -> None:
        accs = window.accs
        if len(accs) == window.registered:
            return
        op = self.op
        size = op.assigner._size
        register = op.timers.register_event_time_timers
        key_groups = self.key_groups
        keys = [(key, key_groups[key]) for key in islice(accs, window.registered, None)]
        window.registered = len(accs)
        tw = TimeWindow(start, start + size)
        max_ts = start + size - 1
        register(tw, max_ts, keys)
        cleanup = min(max_ts + op.allowed_lateness, MAX_LONG_VALUE)
        if cleanup != max_ts and cleanup < MAX_LONG_VALUE:
            register(tw, cleanup, keys)

    def take_fired(self, watermark: int) -> list[tuple[int, int, FoldedWindow]]:
        """``(max timestamp, start, window)`` of the fresh windows with deferred timers
        that fire at ``watermark``, by time, forgotten here: the caller fires them and
        that is their cleanup. A window whose time has a timer in the queue already has
        its timers registered instead (and fires through the queue)."""
        if not self.defer or not self.windows:
            return []
        size = self.op.assigner._size
        timers = self.op.timers
        fired = []
        for start, window in list(self.windows.items()):
            max_ts = start + size - 1
            if not window.fresh or max_ts > watermark:
                continue
            if timers.has_event_time_timers_at(max_ts):
                self._register_keys(start, window)
                continue
            del self.windows[start]
            fired.append((max_ts, start, window))
        fired.sort(key=_first)
        return fired

    def sorted_keys(self, window: FoldedWindow) -> list[Any]:
        """``window``'s keys in the timers' firing order: key group, then first arrival."""
        return sorted(window.accs, key=self.key_groups.__getitem__)

    def drop(self, start: int) -> None:
        """Forget a window whose cleanup ran (the caller cleared the state's entries)."""
        self.windows.pop(start, None)

    def forget_key_groups(self) -> None:
        """Forget the key groups once no window is left (after firing: windows taken by
        :meth:`take_fired` use them until they are fired)."""
        if not self.windows:
            self.key_groups.clear()

    def flush(self) -> None:
        """Write the folded windows to the state (each key's accumulator, one access) and
        forget them."""
        if not self.windows:
            return
        op = self.op
        size = op.assigner._size
        starts = list(self.windows)
        backend = op.backend
        set_key = backend.set_current_key
        first, n = backend.shuffled_key_slots() or (0, -1)
        current = backend.current
        ws = op.window_state
        update = cast(AccumulatorState, ws).update_internal
        key_groups = self.key_groups
        for start in starts:
            window = self.windows.pop(start)
            self._register_keys(start, window)  # deferred timers
            ws.set_current_namespace(TimeWindow(start, start + size))
            for key, acc in window.accs.items():
                kg = key_groups[key]
                kgi = kg - first
                if 0 <= kgi < n:
                    current.key = key
                    current.key_group_index = kgi
                    current.key_bytes = None
                else:
                    set_key(key, kg)
                update(acc)
        if not self.windows:
            key_groups.clear()
