"""``WindowedStream`` and ``AllWindowedStream`` (public via ``data_stream``), as PyFlink's.

``KeyedStream.window(assigner)`` / ``count_window(size, slide)`` and
``DataStream.window_all(assigner)`` build these; ``reduce``, ``aggregate``,
``apply`` and ``process`` turn them into one window operator. ``window_all``
runs with parallelism 1 over a constant key, as Flink's ``NullByteKeySelector``.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from streamstate.api.window_base import MergingWindowAssigner, Trigger, to_milliseconds
from streamstate.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ReducingStateDescriptor,
)
from streamstate.errors import ConfigurationError

if TYPE_CHECKING:
    from streamstate.datastream.data_stream import DataStream, KeyedStream

__all__ = ["AllWindowedStream", "NullByteKeySelector", "WindowedStream"]

WINDOW_STATE_NAME = "window-contents"


class NullByteKeySelector:
    """The key of ``window_all``: every record gets the same key (so one subtask)."""

    def get_key(self, value: Any) -> int:
        return 0

    def __call__(self, value: Any) -> int:
        return 0


def _build_window_operator(
    assigner: Any,
    trigger: Any,
    allowed_lateness: int,
    late_tag: Any,
    state_descriptor: Any,
    window_fn: Any,
) -> Any:
    from streamstate.runtime.windowing.operator import WindowOperator

    return WindowOperator(
        assigner, trigger, allowed_lateness, late_tag, state_descriptor, window_fn
    )


class _WindowedBase:
    _all = False

    def __init__(self, keyed_stream: KeyedStream, window_assigner: Any) -> None:
        self._keyed_stream = keyed_stream
        self._window_assigner = window_assigner
        self._allowed_lateness = 0
        self._late_data_output_tag: Any = None
        self._window_trigger: Any = None

    def get_execution_environment(self) -> Any:
        return self._keyed_stream.get_execution_environment()

    def trigger(self, trigger: Trigger) -> Any:
        """Set the trigger that decides when windows are evaluated (default: the assigner's)."""
        if isinstance(self._window_assigner, MergingWindowAssigner) and not trigger.can_merge():
            raise TypeError(
                "A merging window assigner cannot be used with a trigger that does not support "
                "merging."
            )
        self._window_trigger = trigger
        return self

    def allowed_lateness(self, time_ms: Any) -> Any:
        """How long after a window's end late elements are still added (event time only)."""
        ms = to_milliseconds(time_ms, "allowed lateness")
        if ms < 0:
            raise ConfigurationError(f"allowed lateness must be >= 0, got {ms} ms")
        self._allowed_lateness = ms
        return self

    def side_output_late_data(self, output_tag: Any) -> Any:
        """Send elements that arrive after their windows' allowed lateness to ``output_tag``."""
        if output_tag is None:
            raise ConfigurationError("side_output_late_data() needs an OutputTag")
        self._late_data_output_tag = output_tag
        return self

    # -- window functions -----------------------------------------------------------
    def reduce(
        self, reduce_function: Any, window_function: Any = None, output_type: Any = None
    ) -> DataStream:
        """Incrementally reduce each window; optionally pass the result to ``window_function``."""
        from streamstate.runtime.windowing.functions import internal_window_function

        fn = internal_window_function(window_function, True, self._all)
        desc = ReducingStateDescriptor(WINDOW_STATE_NAME, reduce_function)
        return self._result(fn, desc, "Reduce", output_type, window_function is None)

    def aggregate(
        self,
        aggregate_function: Any,
        window_function: Any = None,
        accumulator_type: Any = None,
        output_type: Any = None,
    ) -> DataStream:
        """Incrementally aggregate each window (AggregateFunction), then ``window_function``."""
        from streamstate.runtime.windowing.functions import internal_window_function

        fn = internal_window_function(window_function, True, self._all)
        desc = AggregatingStateDescriptor(WINDOW_STATE_NAME, aggregate_function, accumulator_type)
        return self._result(fn, desc, "Aggregate", output_type)

    def apply(self, window_function: Any, output_type: Any = None) -> DataStream:
        """Evaluate ``window_function.apply`` over all elements of each window."""
        from streamstate.runtime.windowing.functions import internal_window_function

        fn = internal_window_function(window_function, False, self._all)
        desc = ListStateDescriptor(WINDOW_STATE_NAME, None)
        return self._result(fn, desc, "Apply", output_type)

    def process(self, process_window_function: Any, output_type: Any = None) -> DataStream:
        """Evaluate ``process_window_function.process`` over all elements of each window."""
        from streamstate.runtime.windowing.functions import internal_window_function

        fn = internal_window_function(process_window_function, False, self._all)
        kind = "process_all" if self._all else "process"
        if fn.kind != kind:
            expected = "ProcessAllWindowFunction" if self._all else "ProcessWindowFunction"
            raise TypeError(f"process() takes a {expected}, got {type(process_window_function)}")
        desc = ListStateDescriptor(WINDOW_STATE_NAME, None)
        return self._result(fn, desc, "Process", output_type)

    def _result(
        self,
        window_fn: Any,
        state_descriptor: Any,
        what: str,
        output_type: Any = None,
        preserves_type: bool = False,
    ) -> DataStream:
        trigger = self._window_trigger
        if trigger is None:
            trigger = self._window_assigner.get_default_trigger(self.get_execution_environment())
        factory = partial(
            _build_window_operator,
            self._window_assigner,
            trigger,
            self._allowed_lateness,
            self._late_data_output_tag,
            state_descriptor,
            window_fn,
        )
        factory()  # validate the configuration now, not on a worker
        name = f"{'AllWindow' if self._all else 'Window'}({self._window_assigner!r}, {what})"
        ds = self._keyed_stream._keyed(
            name, factory, output_type, preserves_type and output_type is None
        )
        if self._all:
            ds._t.parallelism = 1
        return ds


class WindowedStream(_WindowedBase):
    """A keyed stream split into windows per key; evaluated per (key, window)."""

    def get_input_type(self) -> Any:
        """The type of the windowed records (``Types.PICKLED_BYTE_ARRAY()`` if undeclared)."""
        return self._keyed_stream._origin.get_type()


class AllWindowedStream(_WindowedBase):
    """A non-keyed stream split into windows (one subtask evaluates them)."""

    _all = True

    def __init__(self, data_stream: DataStream, window_assigner: Any) -> None:
        super().__init__(data_stream.key_by(NullByteKeySelector()), window_assigner)
