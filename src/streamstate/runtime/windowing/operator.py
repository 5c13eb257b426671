"""The window operator (Flink's ``WindowOperator``) for keyed streams and ``window_all``.

Per element: the assigner gives its windows; for each window that is not late
the element is added to the window contents (keyed state named
``window-contents`` in the window's namespace: a list for ``apply``/``process``,
a reducing or aggregating state for ``reduce``/``aggregate``), the trigger is
asked, and on FIRE the window function runs over the contents; on PURGE the
contents are cleared. A cleanup timer at ``window.max_timestamp() +
allowed_lateness`` (event time) or ``max_timestamp()`` (processing time)
removes the window's contents, trigger state and per-window state.

Merging assigners (sessions) keep a :class:`MergingWindowSet` per key in keyed
state; merged windows merge their contents with the state's
``merge_namespaces`` and their trigger state with ``Trigger.on_merge``.

An element is *late* when every window it belongs to is past its cleanup time
(``cleanup_time <= watermark``); then, if its own ``timestamp + allowed_lateness
<= watermark``, it goes to the late-data side output (or is counted as dropped).

Window results carry the timestamp ``window.max_timestamp()``. Timers come from
the operator's :class:`InternalTimerService` named ``window-timers``, so all
of this lives in keyed state: it is checkpointed, restored and rescaled by key
group like any state.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from streamstate.api.state import MapStateDescriptor
from streamstate.api.window_base import (
    MAX_LONG_VALUE,
    MergingWindowAssigner,
)
from streamstate.errors import ConfigurationError, StateAccessError
from streamstate.runtime.operators.base import StreamOperator
from streamstate.runtime.operators.outputs import outputs_not_iterable, split_yielded_side_outputs
from streamstate.runtime.state.kinds import MERGING_KINDS, merging_state
from streamstate.runtime.timers import InternalTimerService
from streamstate.runtime.windowing.contexts import (
    AssignerContext,
    TriggerContext,
    WindowProcessContext,
    keyed_state,
)
from streamstate.runtime.windowing.folding import FoldedWindows, fold_of
from streamstate.runtime.windowing.merging import (
    MERGING_WINDOW_SET_STATE_NAME,
    MergingWindowSet,
    merging_element,
)
from streamstate.runtime.windowing.tumbling import fire_tumbling, tumbling_batch

__all__ = ["WINDOW_STATE_NAME", "WindowOperator"]

#: PyFlink's name of the window contents state
WINDOW_STATE_NAME = "window-contents"
TIMER_SERVICE_NAME = "window-timers"


class WindowOperator(StreamOperator):
    """Windows of a keyed stream (``window_all`` uses a constant key)."""

    keyed = True

    def __init__(
        self,
        assigner: Any,
        trigger: Any,
        allowed_lateness: int,
        late_data_output_tag: Any,
        window_state_descriptor: Any,
        window_function: Any,
    ) -> None:
        super().__init__()
        if allowed_lateness < 0:
            raise ConfigurationError(f"allowed lateness must be >= 0 ms, got {allowed_lateness}")
        if allowed_lateness and not assigner.is_event_time():
            raise ConfigurationError(
                f"allowed_lateness() is only valid for event-time windows, not for {assigner!r}"
            )
        if window_state_descriptor.kind not in MERGING_KINDS:
            raise ConfigurationError(
                f"a window's contents are kept in list, reducing or aggregating state, not in "
                f"{window_state_descriptor.kind} state ({window_state_descriptor.name!r})"
            )
        self.assigner = assigner
        self.trigger = trigger
        self.allowed_lateness = allowed_lateness
        self.late_data_output_tag = late_data_output_tag
        self.window_state_descriptor = window_state_descriptor
        self.window_function = window_function
        self.merging = isinstance(assigner, MergingWindowAssigner)
        if self.merging and not trigger.can_merge():
            raise ConfigurationError(
                f"A merging window assigner ({assigner!r}) cannot be used with a trigger that "
                f"does not support merging ({trigger!r}): its can_merge() returns False"
            )
        self.event_time = bool(assigner.is_event_time())
        from streamstate.api.window import TumblingEventTimeWindows
        from streamstate.api.window_triggers import EventTimeTrigger

        #: the bulk path for the most common windows (exact types: subclasses may override)
        self._fast_tumbling = (
            type(assigner) is TumblingEventTimeWindows and type(trigger) is EventTimeTrigger
        )
        #: late elements dropped (no late-data side output): Flink's numLateRecordsDropped
        self.num_late_records_dropped = 0

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        ctx = self.ctx
        assert ctx is not None
        if ctx.keyed_backend is None:
            raise StateAccessError("the window operator runs on a keyed stream only")
        self.backend = ctx.keyed_backend
        self.timers = InternalTimerService.for_operator(ctx, TIMER_SERVICE_NAME)
        self.window_function.open(ctx)
        self.window_state = keyed_state(ctx, self.window_state_descriptor)
        self.is_list = self.window_state_descriptor.kind == "list"
        #: the bulk path folds reducing/aggregating contents as it groups them and keeps
        #: them out of the state until something else needs them there (folding.py)
        fold = fold_of(self.window_state_descriptor, self.window_state)
        self.folded = FoldedWindows(self, fold) if self._fast_tumbling and fold else None
        self.trigger_ctx = TriggerContext(ctx, self.timers)
        self.process_ctx = WindowProcessContext(self, ctx, self.timers, self.merging)
        self.assigner_ctx = AssignerContext(self.timers, ctx)
        if self.merging:
            # the window's contents merge with its windows (session windows)
            self.merging_window_state = merging_state(
                self.window_state, self.window_state_descriptor
            )
            self.merging_sets_state = ctx.get_map_state(
                MapStateDescriptor(MERGING_WINDOW_SET_STATE_NAME)
            )

    def close(self) -> None:
        self.window_function.close()

    def snapshot_state(self, checkpoint_id: int | None, timestamp_ms: int) -> None:
        # the tumbling path registers timers in bulk and folds windows out of the state:
        # both reach the keyed state here
        if self.folded is not None:
            self.folded.flush()
        self.timers.flush()
        super().snapshot_state(checkpoint_id, timestamp_ms)

    # ------------------------------------------------------------------ elements
    def process_batch(self, batch: list[Any]) -> list[Any]:
        return self.process_batch_ts(batch, [None] * len(batch))[0]

    def process_batch_ts(
        self, batch: list[Any], timestamps: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        out: list[Any] = []
        out_ts: list[Any] = []
        set_key = self.backend.set_current_key
        if self._fast_tumbling:
            batch, timestamps = tumbling_batch(self, batch, timestamps)
        element = partial(merging_element, self) if self.merging else self._element
        for (kg, key, value), ts in zip(batch, timestamps, strict=True):
            set_key(key, kg)
            element(key, value, ts, out, out_ts)
        return self._split_side(out, out_ts)

    def _element(self, key: Any, value: Any, ts: Any, out: list[Any], out_ts: list[Any]) -> None:
        windows = self.assigner.assign_windows(value, ts, self.assigner_ctx)
        ws = self.window_state
        tctx = self.trigger_ctx
        trigger = self.trigger
        skipped = True
        for window in windows:
            if self.event_time and self._is_window_late(window):
                continue
            skipped = False
            ws.set_current_namespace(window)
            ws.add(value)
            tctx.window = window
            result = trigger.on_element(value, ts, window, tctx)
            if result.value[0]:  # fire
                self._fire(key, window, window, out, out_ts)
            if result.value[1]:  # purge
                ws.set_current_namespace(window)
                ws.clear()
            self._register_cleanup_timer(window)
        if skipped:
            self._late(value, ts)

    def _late(self, value: Any, ts: Any) -> None:
        if not (self.event_time and ts + self.allowed_lateness <= self.timers.current_watermark()):
            return
        if self.late_data_output_tag is not None:
            self.side_output(self.late_data_output_tag, value, ts)
        else:
            self.num_late_records_dropped += 1

    # ------------------------------------------------------------------ timers
    def process_watermark(self, watermark_ms: int) -> list[Any]:
        out: list[Any] = []
        out_ts: list[Any] = []
        if self._fast_tumbling:
            fire_tumbling(self, watermark_ms, out, out_ts)
        else:
            for timer in self.timers.advance_watermark(watermark_ms):
                self._on_timer(timer, True, out, out_ts)
        out, out_ts = self._split_side(out, out_ts)
        self.hook_timestamps = out_ts
        return out

    def on_processing_time(self, now_ms: int) -> list[Any]:
        out: list[Any] = []
        out_ts: list[Any] = []
        if self.folded is not None and self.timers.num_processing_time_timers():
            self.folded.flush()  # the timers' handling reads the state
        for timer in self.timers.advance_processing_time(now_ms):
            self._on_timer(timer, False, out, out_ts)
        out, out_ts = self._split_side(out, out_ts)
        self.hook_timestamps = out_ts
        return out

    def _on_timer(self, timer: Any, event: bool, out: list[Any], out_ts: list[Any]) -> None:
        # the timer service set the backend's current key to timer.key
        window = timer.namespace
        tctx = self.trigger_ctx
        tctx.window = window
        ws = self.window_state
        mws = None
        state_window = window
        if self.merging:
            mws = MergingWindowSet(self.assigner, self.merging_sets_state)
            state_window = mws.get_state_window(window)
            if state_window is None:
                # a timer of a window that was merged away or purged whose trigger did not
                # delete it: its state is gone already, nothing to do (as in Flink)
                return
        ws.set_current_namespace(state_window)
        if event:
            result = self.trigger.on_event_time(timer.timestamp, window, tctx)
        else:
            result = self.trigger.on_processing_time(timer.timestamp, window, tctx)
        if result.is_fire():
            self._fire(timer.key, window, state_window, out, out_ts)
        if result.is_purge():
            ws.set_current_namespace(state_window)
            ws.clear()
        if event == self.event_time and timer.timestamp == self._cleanup_time(window):
            self._clear_all_state(window, state_window, mws)
        if mws is not None:
            mws.persist()

    def _fire(
        self, key: Any, window: Any, state_window: Any, out: list[Any], out_ts: list[Any]
    ) -> None:
        ws = self.window_state
        ws.set_current_namespace(state_window)
        contents = ws.get()
        if self.is_list:
            if not contents:
                return
            contents = list(contents)
        elif contents is None:
            return
        self.process_ctx._window = window
        r = self.window_function.process(key, window, self.process_ctx, contents)
        if r is not None:
            n = len(out)
            try:
                out.extend(r)
            except TypeError:
                raise outputs_not_iterable(self, r) from None
            out_ts.extend([window.max_timestamp()] * (len(out) - n))

    def _cleanup_time(self, window: Any) -> int:
        if self.event_time:
            return min(window.max_timestamp() + self.allowed_lateness, MAX_LONG_VALUE)
        return int(window.max_timestamp())

    def _is_window_late(self, window: Any) -> bool:
        return self._cleanup_time(window) <= self.timers.current_watermark()

    def _register_cleanup_timer(self, window: Any) -> None:
        t = self._cleanup_time(window)
        if t >= MAX_LONG_VALUE:
            return
        if self.event_time:
            self.timers.register_event_time_timer(window, t)
        else:
            self.timers.register_processing_time_timer(window, t)

    def _delete_cleanup_timer(self, window: Any) -> None:
        t = self._cleanup_time(window)
        if t >= MAX_LONG_VALUE:
            return
        if self.event_time:
            self.timers.delete_event_time_timer(window, t)
        else:
            self.timers.delete_processing_time_timer(window, t)

    def _clear_all_state(self, window: Any, state_window: Any, mws: Any) -> None:
        ws = self.window_state
        ws.set_current_namespace(state_window)
        ws.clear()
        tctx = self.trigger_ctx
        tctx.window = window
        self.trigger.clear(window, tctx)
        self.process_ctx._window = window
        self.window_function.clear(window, self.process_ctx)
        if mws is not None:
            mws.retire_window(window)

    # ------------------------------------------------------------------ side outputs
    def side_output(self, tag: Any, value: Any, timestamp: Any) -> None:
        """Emit ``value`` to the side output ``tag`` (late data, ``Context.output``)."""
        emit = getattr(self, "emit_side", None)
        if emit is None:
            raise StateAccessError("side outputs are not available in this runtime")
        emit(tag.tag_id, value, timestamp)

    def _split_side(self, out: list[Any], out_ts: list[Any]) -> tuple[list[Any], list[Any]]:
        """Yielded ``(OutputTag, value)`` pairs go to side outputs (PyFlink's convention)."""
        if out and getattr(self, "side_tags", None):
            return split_yielded_side_outputs(self, out, out_ts)
        return out, out_ts

    def __repr__(self) -> str:
        return f"WindowOperator({self.assigner!r}, {self.trigger!r})"
