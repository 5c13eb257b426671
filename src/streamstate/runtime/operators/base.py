"""The operator contract the subtask runner drives, and the runtime context it hands out.

Operators work on *batches*: ``process_batch`` takes the list of records a
subtask received for one input in one epoch (or a chunk of it) and returns the
list of outputs, in order. Batching keeps the per-record cost to the user
function call itself. Keyed operators receive ``(key_group, key, value)``
triples (the key group was computed once, by the shuffle) and set the current
key before each call. Operators never mutate their input list (it may be fed
to several chained operators).

Two-input operators (``connect``) set ``two_input`` and get their second
input through ``process_batch2``. Operator state: the task calls
``initialize_state`` once per instance (after ``setup``, before ``open``),
``snapshot_state`` at the end of every epoch, and
``notify_checkpoint_complete`` / ``notify_checkpoint_aborted`` at the start of
the epoch after the driver completed / aborted a checkpoint. The defaults
forward these to the user function (``self.fn``) when it implements
``CheckpointedFunction`` / ``ListCheckpointed`` / ``CheckpointListener``.
"""

from __future__ import annotations

from typing import Any

from streamstate.api.functions import RuntimeContext
from streamstate.api.metrics import MetricGroup, MetricRegistry
from streamstate.errors import StateAccessError
from streamstate.runtime.operators.outputs import outputs_not_iterable
from streamstate.runtime.operators.timing import QueryOnlyTimerService
from streamstate.runtime.watermarks import MIN_WATERMARK

__all__ = ["OperatorContext", "StreamOperator", "as_callable"]

_KEYED_ONLY = (
    "Keyed state can only be used on a 'keyed stream', i.e., after a 'key_by()' operation "
    "(operator {op!r} tried to get state {name!r})"
)


class OperatorContext(RuntimeContext):
    """The :class:`RuntimeContext` of one operator in one subtask.

    ``keyed_backend`` is None for non-keyed operators; asking those for keyed
    state raises :class:`StateAccessError`. ``epoch`` is the epoch being run
    (an internal extra used by test helpers and metrics).
    """

    def __init__(
        self,
        task_name: str,
        subtask_index: int,
        parallelism: int,
        max_parallelism: int,
        attempt: int,
        job_parameters: dict[str, str],
        keyed_backend: Any = None,
        operator_state_store: Any = None,
    ) -> None:
        self.task_name = task_name
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.attempt = attempt
        self.job_parameters = job_parameters
        self.keyed_backend = keyed_backend
        #: the subtask's OperatorStateStore (runtime/state/operator.py)
        self.operator_state_store = operator_state_store
        self.epoch = 0
        #: the operator's current event-time watermark and the epoch's processing time
        #: (the driver's clock), maintained by the task (see runtime/watermarks.py)
        self.current_watermark = MIN_WATERMARK
        self.processing_time = 0
        #: the job runs in BATCH mode (one epoch ending with the final watermark)
        self.batch = False
        #: the job ends after this epoch's checkpoint (EpochSpec.ending)
        self.ending = False
        #: the job's id, and its replay stamp when a restore skips committed output
        #: (EpochSpec.replay_stamp; runtime/replay.py)
        self.job_id = ""
        self.replay_stamp: str | None = None
        #: the user metrics of this operator in this subtask (reported in every ack)
        self.metric_registry = MetricRegistry()

    def get_task_name(self) -> str:
        return self.task_name

    def get_number_of_parallel_subtasks(self) -> int:
        return self.parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self.max_parallelism

    def get_index_of_this_subtask(self) -> int:
        return self.subtask_index

    def get_attempt_number(self) -> int:
        return self.attempt

    def get_task_name_with_subtasks(self) -> str:
        return f"{self.task_name} ({self.subtask_index + 1}/{self.parallelism})"

    def get_job_parameter(self, key: str, default_value: str | None = None) -> str | None:
        return self.job_parameters.get(key, default_value)

    def get_metrics_group(self) -> MetricGroup:
        return MetricGroup(self.metric_registry, (self.task_name,))

    def _state(self, descriptor: Any) -> Any:
        if self.keyed_backend is None:
            raise StateAccessError(_KEYED_ONLY.format(op=self.task_name, name=descriptor.name))
        return self.keyed_backend.get_partitioned_state(descriptor)

    def _checked(self, descriptor: Any, kind: str) -> Any:
        actual = type(descriptor).__name__
        if actual != kind:
            raise StateAccessError(
                f"{kind} expected for this call but got a {actual} for state "
                f"{getattr(descriptor, 'name', descriptor)!r}"
            )
        return self._state(descriptor)

    def get_state(self, state_descriptor: Any) -> Any:
        return self._checked(state_descriptor, "ValueStateDescriptor")

    def get_list_state(self, state_descriptor: Any) -> Any:
        return self._checked(state_descriptor, "ListStateDescriptor")

    def get_map_state(self, state_descriptor: Any) -> Any:
        return self._checked(state_descriptor, "MapStateDescriptor")

    def get_reducing_state(self, state_descriptor: Any) -> Any:
        return self._checked(state_descriptor, "ReducingStateDescriptor")

    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        return self._checked(state_descriptor, "AggregatingStateDescriptor")


class StreamOperator:
    """Base operator: lifecycle hooks around ``process_batch``.

    ``sink_result()`` is what a sink hands to its driver-side committer at the
    end of every epoch (None for non-sinks).

    Time (see docs/time.md, "Event time"): on a timestamped stream the
    task calls ``process_batch_ts(batch, timestamps)`` instead of
    ``process_batch``; the timestamps are a list parallel to the batch (an entry
    may be None). At the end of every epoch the task calls
    ``on_processing_time(now_ms)`` and, when the operator's input watermark
    advanced, ``process_watermark(watermark_ms)``; their outputs flow downstream
    like ``process_batch``'s, with the timestamps the operator leaves in
    ``hook_timestamps`` (a list parallel to the returned outputs, or None).
    Side outputs: ``emit_side(tag_id, value, timestamp)``; the task routes them
    to the consumers of ``get_side_output``.
    """

    keyed = False
    #: a two-input operator: the second input arrives through ``process_batch2``
    two_input = False
    #: process the second input's records of an epoch before the first's (broadcast side)
    second_input_first = False
    #: True for operators that generate watermarks (assign_timestamps_and_watermarks)
    generates_watermarks = False
    #: its operator state store may hold broadcast state (the broadcast side of ``connect``)
    allows_broadcast_state = False
    #: class default, never mutated: an operator gets its own dict on its first side output
    side_outputs: dict[str, tuple[list[Any], list[Any]]] = {}
    #: tag ids with a consumer, set by the task: yielded ``(OutputTag, value)`` pairs are
    #: recognised as side outputs only when this is non-empty (checking costs per record)
    side_tags: frozenset[str] = frozenset()
    hook_timestamps: list[Any] | None = None

    def __init__(self) -> None:
        self.ctx: OperatorContext | None = None
        self.records_in = 0
        self.records_out = 0

    def setup(self, ctx: OperatorContext) -> None:
        self.ctx = ctx

    def open(self) -> None:
        pass

    def process_batch(self, batch: list[Any]) -> list[Any]:
        raise NotImplementedError

    def process_batch2(self, batch: list[Any]) -> list[Any]:
        """The second input of a two-input operator (same contract as ``process_batch``)."""
        raise NotImplementedError(f"{type(self).__name__} has no second input")

    def process_batch_ts(
        self, batch: list[Any], timestamps: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        """A timestamped batch: ``(outputs, their timestamps)``.

        The default processes one record at a time and gives every output its
        input's timestamp (Flink's rule for operators that do not set one);
        operators override it with a batch version.
        """
        out: list[Any] = []
        out_ts: list[Any] = []
        for v, t in zip(batch, timestamps, strict=True):
            self.current_timestamp = t
            r = self.process_batch([v])
            if r:
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
                out_ts.extend([t] * len(r))
        self.current_timestamp = None
        return out, out_ts

    def process_batch2_ts(
        self, batch: list[Any], timestamps: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        """``process_batch_ts`` for the second input of a two-input operator."""
        out: list[Any] = []
        out_ts: list[Any] = []
        for v, t in zip(batch, timestamps, strict=True):
            self.current_timestamp = t
            r = self.process_batch2([v])
            if r:
                try:
                    out.extend(r)
                except TypeError:
                    raise outputs_not_iterable(self, r) from None
                out_ts.extend([t] * len(r))
        self.current_timestamp = None
        return out, out_ts

    #: the timestamp of the record being processed by the per-record defaults above
    current_timestamp: Any = None

    def process_watermark(self, watermark_ms: int) -> list[Any]:
        """The operator's input watermark advanced to ``watermark_ms``; returns outputs."""
        return []

    def on_processing_time(self, now_ms: int) -> list[Any]:
        """End of an epoch whose processing time (driver clock) is ``now_ms``; returns outputs."""
        return []

    def emit_side(self, tag_id: str, value: Any, timestamp: Any = None) -> None:
        """Emit ``value`` to side output ``tag_id`` (dropped when nothing consumes it)."""
        so = self.__dict__.get("side_outputs")
        if so is None:
            so = self.side_outputs = {}
        entry = so.get(tag_id)
        if entry is None:
            entry = so[tag_id] = ([], [])
        entry[0].append(value)
        entry[1].append(timestamp)

    def take_side_outputs(self) -> dict[str, tuple[list[Any], list[Any]]]:
        so = self.__dict__.get("side_outputs") or {}
        self.side_outputs = {}
        return so

    def sink_result(self) -> Any:
        return None

    def user_function(self) -> Any:
        """The user function this operator runs (None if none): target of the state hooks."""
        return getattr(self, "fn", None)

    # -- operator state and checkpoint notifications -----------------------------------
    def initialize_state(self, context: Any) -> None:
        """Register/restore operator state: ``context`` is a FunctionInitializationContext."""
        from streamstate.runtime.operators.checkpointing import initialize_function_state

        initialize_function_state(self.user_function(), context)

    def snapshot_state(self, checkpoint_id: int | None, timestamp_ms: int) -> None:
        """Move the function's working data into operator state (every epoch end)."""
        from streamstate.runtime.operators.checkpointing import snapshot_function_state

        snapshot_function_state(self.user_function(), checkpoint_id, timestamp_ms)

    def listens_to_checkpoints(self) -> bool:
        """Whether the notifications matter to this operator (decides the final, input-free
        epoch that delivers the last checkpoint's notification)."""
        fn = self.user_function()
        return (
            fn is not None
            and not isinstance(fn, type)
            and (
                hasattr(fn, "notify_checkpoint_complete")
                or hasattr(fn, "notify_checkpoint_aborted")
            )
        )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        fn = self.user_function()
        hook = getattr(fn, "notify_checkpoint_complete", None)
        if hook is not None and not isinstance(fn, type):
            hook(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        fn = self.user_function()
        hook = getattr(fn, "notify_checkpoint_aborted", None)
        if hook is not None and not isinstance(fn, type):
            hook(checkpoint_id)

    def timer_service(self) -> Any:
        """The timer service a process function's context hands out: query-only here
        (setting timers needs a keyed stream); keyed process operators override it."""
        return QueryOnlyTimerService(self.ctx)

    def close(self) -> None:
        pass


def as_callable(fn: Any, method: str) -> Any:
    """The bound ``method`` of a function object, or ``fn`` itself if it is a plain callable."""
    m = getattr(fn, method, None)
    if m is not None and callable(m):
        return m
    if callable(fn):
        return fn
    raise TypeError(f"expected a callable or an object with a {method}() method, got {fn!r}")


def open_function(fn: Any, ctx: OperatorContext) -> None:
    op = getattr(fn, "open", None)
    if op is not None and callable(op) and not isinstance(fn, type):
        op(ctx)


def close_function(fn: Any) -> None:
    cl = getattr(fn, "close", None)
    if cl is not None and callable(cl) and not isinstance(fn, type):
        cl()
