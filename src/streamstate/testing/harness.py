"""A test harness for keyed user functions, on the real runtime (no job, no Spark).

:class:`KeyedFunctionHarness` is Flink's ``KeyedOneInputStreamOperatorTestHarness`` (and
Spark's ``TwsTester``) for streamstate: it wraps a ``KeyedProcessFunction`` (or a keyed
``map``/``flat_map``/``filter``/``reduce`` function) in the operator a job would run it in,
over a real keyed state backend (heap or RocksDB, by name) and the real timer service, and
lets a test feed elements with keys and timestamps, advance the watermark and processing
time, look at the outputs, side outputs, state and timers, and take a snapshot that
restores into a new harness (at another parallelism too, through key groups).

Contract: everything a function sees (``RuntimeContext``, state handles, the timer service,
``ctx.timestamp()``, ``ctx.output``) is what it sees in a job; what differs is that time
moves only when the test moves it and every call is processed at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamstate.api.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from streamstate.errors import ConfigurationError, StateAccessError
from streamstate.runtime.checkpoint.handles import ByteStreamStateHandle, KeyGroupsStateHandle
from streamstate.runtime.keygroups import (
    KeyGroupRange,
    compute_key_group_for_serialized_key,
    compute_key_group_range_for_operator_index,
)
from streamstate.runtime.operators import keyed
from streamstate.runtime.operators.base import OperatorContext
from streamstate.runtime.operators.checkpointing import StateInitializationContext
from streamstate.runtime.serializers.key import default_key_serializer
from streamstate.runtime.serializers.registry import serializer_for
from streamstate.runtime.state.operator import DefaultOperatorStateStore
from streamstate.runtime.state.registry import DEFAULT_BACKEND, create_keyed_backend
from streamstate.runtime.watermarks import MIN_WATERMARK

__all__ = ["HarnessSnapshot", "KeyedFunctionHarness"]


@dataclass(frozen=True)
class HarnessSnapshot:
    """A harness's keyed state (timers included), watermark and processing time."""

    handle: KeyGroupsStateHandle
    max_parallelism: int
    watermark: int
    processing_time: int


_OPERATORS: dict[str, Any] = {
    "process": keyed.KeyedProcessOperator,
    "map": keyed.KeyedMapOperator,
    "flat_map": keyed.KeyedFlatMapOperator,
    "filter": keyed.KeyedFilterOperator,
    "reduce": keyed.StreamGroupedReduceOperator,
}


class KeyedFunctionHarness:
    """Drives one subtask of a keyed operator running ``function``.

    ``kind`` is the ``KeyedStream`` method the function is applied with: ``"process"``
    (default: a ``KeyedProcessFunction``), ``"map"``, ``"flat_map"``, ``"filter"`` or
    ``"reduce"``. ``key_selector`` extracts the key as ``key_by`` does; ``key_type``
    fixes the key serializer (default: the deterministic default key serializer).
    ``state_backend`` is a registered backend name (``"hashmap"``, ``"rocksdb"``).
    ``parallelism``/``subtask_index``/``max_parallelism`` place the subtask: only keys
    of its key groups may be fed (``ConfigurationError`` otherwise).
    """

    def __init__(
        self,
        function: Any,
        key_selector: Any,
        key_type: Any = None,
        *,
        kind: str = "process",
        state_backend: str = DEFAULT_BACKEND,
        max_parallelism: int = 128,
        parallelism: int = 1,
        subtask_index: int = 0,
        job_parameters: dict[str, str] | None = None,
        operator_name: str = "harness",
        **backend_options: Any,
    ) -> None:
        if kind not in _OPERATORS:
            raise ConfigurationError(
                f"unknown harness kind {kind!r}; accepted: {', '.join(sorted(_OPERATORS))}"
            )
        self.key_selector = getattr(key_selector, "get_key", key_selector)
        self.key_serializer = (
            serializer_for(key_type) if key_type is not None else default_key_serializer()
        )
        self.max_parallelism = max_parallelism
        self.key_group_range: KeyGroupRange = compute_key_group_range_for_operator_index(
            max_parallelism, parallelism, subtask_index
        )
        self.backend = create_keyed_backend(
            state_backend,
            operator_name=operator_name,
            key_group_range=self.key_group_range,
            max_parallelism=max_parallelism,
            key_serializer=self.key_serializer,
            **backend_options,
        )
        self.operator = _OPERATORS[kind](function)
        self.ctx = OperatorContext(
            operator_name,
            subtask_index,
            parallelism,
            max_parallelism,
            0,
            dict(job_parameters or {}),
            self.backend,
            DefaultOperatorStateStore(operator_name),
        )
        self._output: list[tuple[Any, int | None]] = []
        self._side: dict[str, list[tuple[Any, int | None]]] = {}
        self._opened = False
        self._restored = False

    # -- lifecycle ----------------------------------------------------------------------------
    def open(self) -> KeyedFunctionHarness:
        """Set up the operator and call the function's ``open`` (done on first use)."""
        if not self._opened:
            self.operator.setup(self.ctx)
            self.operator.side_tags = frozenset({"*"})  # route yielded (OutputTag, v) pairs
            self.operator.initialize_state(
                StateInitializationContext(self._restored, self.ctx.operator_state_store, self.ctx)
            )
            self.operator.open()
            self._opened = True
        return self

    def close(self) -> None:
        """Call the function's ``close`` and dispose the state backend."""
        if self._opened:
            self.operator.close()
        self.backend.dispose()

    def __enter__(self) -> KeyedFunctionHarness:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- input --------------------------------------------------------------------------------
    def _key_group(self, key: Any) -> int:
        kg = compute_key_group_for_serialized_key(
            self.key_serializer.serialize(key), self.max_parallelism
        )
        if kg not in self.key_group_range:
            raise ConfigurationError(
                f"key {key!r} is in key group {kg}, which subtask "
                f"{self.ctx.subtask_index} of {self.ctx.parallelism} does not own "
                f"({self.key_group_range}); feed it to the harness of the owning subtask"
            )
        return kg

    def process_element(self, value: Any, timestamp: int | None = None) -> list[Any]:
        """Process one element (its key from the key selector); returns its outputs."""
        self.open()
        key = self.key_selector(value)
        out, ts = self.operator.process_batch_ts([(self._key_group(key), key, value)], [timestamp])
        self._collect(out, ts)
        return list(out)

    def process_elements(self, values: list[Any], timestamp: int | None = None) -> list[Any]:
        out: list[Any] = []
        for v in values:
            out.extend(self.process_element(v, timestamp))
        return out

    def process_watermark(self, watermark: int) -> list[Any]:
        """Advance the event-time watermark (fires due event-time timers); returns outputs."""
        self.open()
        if watermark <= self.ctx.current_watermark:
            return []
        self.ctx.current_watermark = watermark
        out = self.operator.process_watermark(watermark)
        self._collect(out, self.operator.hook_timestamps)
        return list(out)

    def set_processing_time(self, now_ms: int) -> list[Any]:
        """Advance processing time (fires due processing-time timers); returns outputs."""
        self.open()
        self.ctx.processing_time = now_ms
        out = self.operator.on_processing_time(now_ms)
        self._collect(out, self.operator.hook_timestamps)
        return list(out)

    def _collect(self, out: list[Any], ts: list[Any] | None) -> None:
        stamps = ts if ts is not None and len(ts) == len(out) else [None] * len(out)
        self._output.extend(zip(out, stamps, strict=True))
        for tag, (vals, tss) in self.operator.take_side_outputs().items():
            self._side.setdefault(tag, []).extend(zip(vals, tss, strict=True))
        self.operator.hook_timestamps = None

    # -- inspection ---------------------------------------------------------------------------
    def get_output(self) -> list[tuple[Any, int | None]]:
        """Every output so far as ``(value, timestamp)`` (timestamp None when there is none)."""
        return list(self._output)

    def extract_output_values(self) -> list[Any]:
        return [v for v, _ in self._output]

    def get_side_output(self, output_tag: Any) -> list[Any]:
        """The values emitted to ``output_tag`` (``ctx.output`` or yielded pairs)."""
        return [v for v, _ in self._side.get(output_tag.tag_id, [])]

    def clear_output(self) -> None:
        self._output.clear()
        self._side.clear()

    def get_state(self, key: Any, descriptor: StateDescriptor) -> Any:
        """The state ``descriptor`` of ``key``: a value, a list, a dict, or the reduced or
        aggregated result; None (value, reducing, aggregating) or empty when absent."""
        self.open()
        self.backend.set_current_key(key, self._key_group(key))
        state = self.backend.get_partitioned_state(descriptor)
        if isinstance(descriptor, ValueStateDescriptor):
            return state.value()
        if isinstance(descriptor, ListStateDescriptor):
            return list(state.get() or [])
        if isinstance(descriptor, MapStateDescriptor):
            return dict(state.items())
        if isinstance(descriptor, (ReducingStateDescriptor, AggregatingStateDescriptor)):
            return state.get()
        raise StateAccessError(f"unknown state descriptor {type(descriptor).__name__}")

    def _timers(self) -> Any:
        return getattr(self.operator, "_internal", None)

    def num_event_time_timers(self) -> int:
        t = self._timers()
        return 0 if t is None else int(t.num_event_time_timers())

    def num_processing_time_timers(self) -> int:
        t = self._timers()
        return 0 if t is None else int(t.num_processing_time_timers())

    def event_time_timers(self) -> list[tuple[Any, int]]:
        """``(key, timestamp)`` of every registered event-time timer, in firing order."""
        t = self._timers()
        return [] if t is None else [(x.key, x.timestamp) for x in t.event_time_timers()]

    def processing_time_timers(self) -> list[tuple[Any, int]]:
        t = self._timers()
        return [] if t is None else [(x.key, x.timestamp) for x in t.processing_time_timers()]

    @property
    def current_watermark(self) -> int:
        return int(self.ctx.current_watermark)

    # -- snapshots ----------------------------------------------------------------------------
    def snapshot(self) -> HarnessSnapshot:
        """The keyed state (timers included) and time of this harness, as a checkpoint
        would take them (the snapshot's bytes are the backends' shared format)."""
        self.open()
        self.operator.snapshot_state(None, 0)
        snap = self.backend.snapshot()
        handle = KeyGroupsStateHandle(
            ByteStreamStateHandle.of(snap.data), self.key_group_range, snap.offsets, snap.meta
        )
        return HarnessSnapshot(
            handle, self.max_parallelism, self.ctx.current_watermark, self.ctx.processing_time
        )

    def restore(self, *snapshots: HarnessSnapshot) -> KeyedFunctionHarness:
        """Restore ``snapshots`` (of harnesses of any parallelism, same max parallelism)
        before the first element: this subtask keeps the key groups it owns."""
        if self._opened:
            raise StateAccessError("restore() must come before the harness's first use")
        for s in snapshots:
            if s.max_parallelism != self.max_parallelism:
                raise ConfigurationError(
                    f"snapshot of max parallelism {s.max_parallelism} cannot restore into a "
                    f"harness of max parallelism {self.max_parallelism}"
                )
        self.backend.restore([s.handle for s in snapshots])
        wms = [s.watermark for s in snapshots if s.watermark > MIN_WATERMARK]
        if wms:
            self.ctx.current_watermark = min(wms)
        self.ctx.processing_time = max((s.processing_time for s in snapshots), default=0)
        self._restored = True
        return self
