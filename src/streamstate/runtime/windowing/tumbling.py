"""The bulk path of the window operator for its most common case: tumbling event-time
windows with the default trigger (``EventTimeTrigger``). Functions of the operator
(``self``), kept apart from its generic per-element path; the result is the same."""

from __future__ import annotations

from typing import Any, cast

from streamstate.api.window_base import MAX_LONG_VALUE, MIN_LONG_VALUE, TimeWindow
from streamstate.runtime.state.kinds import BulkAddingState

__all__ = ["on_tumbling_timer", "tumbling_batch"]


def tumbling_batch(
    self: Any, batch: list[Any], timestamps: list[Any]
) -> tuple[list[Any], list[Any]]:
    """Tumbling event-time windows with the default trigger, in bulk.

    Elements whose window has not reached the watermark only add to the window
    contents and register the window's timers (deduplicated), exactly what the
    generic path does for them; they are grouped per window so the state's
    namespace is set once per window and each (key, window) registers its
    timers once. Per (key, window) the elements keep their order, and windows
    are independent, so the result is the generic path's. Returns the rest
    (late elements, windows firing at once, missing timestamps) for it.
    """
    size, offset = self.assigner._size, self.assigner._offset
    wm = self.timers.current_watermark()
    #: window start -> key -> [key group, value, value, ...] (arrival order per key)
    groups: dict[int, dict[Any, list[Any]]] = {}
    rest: list[Any] = []
    rest_ts: list[Any] = []
    for rec, ts in zip(batch, timestamps, strict=True):
        if ts is not None and ts > MIN_LONG_VALUE:
            start = ts - (ts - offset + size) % size
            if start + size - 1 > wm:
                g = groups.get(start)
                if g is None:
                    g = groups[start] = {}
                key = rec[1]
                vals = g.get(key)
                if vals is None:
                    g[key] = [rec[0], rec[2]]
                else:
                    vals.append(rec[2])
                continue
        rest.append(rec)
        rest_ts.append(ts)
    if groups:
        set_key = self.backend.set_current_key
        ws = self.window_state
        # one state access per (key, window): a window's state is of a kind that adds many
        # values at once (MERGING_KINDS, checked when the operator is made)
        add_many = cast(BulkAddingState, ws).add_many
        register = self.timers.register_event_time_timer
        lateness = self.allowed_lateness
        for start, per_key in groups.items():
            window = TimeWindow(start, start + size)
            max_ts = start + size - 1
            cleanup = min(max_ts + lateness, MAX_LONG_VALUE)
            ws.set_current_namespace(window)
            for key, vals in per_key.items():
                set_key(key, vals[0])
                add_many(vals[1:])
                register(window, max_ts)
                if cleanup != max_ts and cleanup < MAX_LONG_VALUE:
                    register(window, cleanup)
    return rest, rest_ts


def on_tumbling_timer(
    self: Any, timer: Any, event: bool, out: list[Any], out_ts: list[Any]
) -> None:
    """``_on_timer`` for tumbling event-time windows with the default trigger.

    ``EventTimeTrigger`` registers only the timer at ``max_timestamp`` and fires
    on it; the cleanup timer is ``max_timestamp + allowed_lateness``. At
    cleanup the trigger's only timer has fired already (timers fire in
    order), so clearing the trigger deletes nothing and is skipped.
    """
    window = timer.namespace
    t = timer.timestamp
    max_ts = window.end - 1
    ws = self.window_state
    if t == max_ts:
        self._fire(timer.key, window, window, out, out_ts)
        if self.window_function.kind in ("process", "process_all"):
            ws.set_current_namespace(window)  # the user function may have used state
    else:
        ws.set_current_namespace(window)
    if t == min(max_ts + self.allowed_lateness, MAX_LONG_VALUE):
        ws.clear()
        if self.window_function.kind in ("process", "process_all"):
            self.process_ctx._window = window
            self.window_function.clear(window, self.process_ctx)


# ------------------------------------------------------------------ helpers
