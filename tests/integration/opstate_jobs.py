"""The seeds' operator-state examples in Python, shared by unit and integration tests
(importable by Spark workers through cloudpickle)."""

from __future__ import annotations

import json
import os
from typing import Any

from streamstate.common import Types
from streamstate.datastream import (
    CheckpointedFunction,
    CheckpointListener,
    KeyedBroadcastProcessFunction,
    ListCheckpointed,
    MapFunction,
    ParallelSourceFunction,
    SinkFunction,
    SourceFunction,
)
from streamstate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
)


def _write_json(path: str, value: Any) -> None:
    # atomic and idempotent: a replay rewrites the same file with the same content
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


class BufferingSink(SinkFunction, CheckpointedFunction):
    """The seed's BufferingSink: buffers in operator list state, flushes at ``threshold``.

    "Send it to the sink" writes flush number ``n`` of subtask ``i`` to
    ``<out_dir>/flush-<i>-<n>.json`` (``n`` is part of the state, so a replay rewrites
    the same file); ``snapshot_state`` also publishes the current buffer to
    ``<out_dir>/buffer-<i>.json`` so a test can see what is still buffered at the end.
    """

    def __init__(self, out_dir: str, threshold: int = 3) -> None:
        self.out_dir = out_dir
        self.threshold = threshold
        self.buffered_elements: list[Any] = []
        self.flushes = 0

    def open(self, runtime_context: Any) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def invoke(self, value: Any, context: Any) -> None:
        self.buffered_elements.append(value)
        if len(self.buffered_elements) == self.threshold:
            path = os.path.join(self.out_dir, f"flush-{self.subtask}-{self.flushes}.json")
            _write_json(path, self.buffered_elements)
            self.flushes += 1
            self.buffered_elements = []

    def snapshot_state(self, context: Any) -> None:
        self.checkpointed_state.clear()
        for element in self.buffered_elements:
            self.checkpointed_state.add(element)
        self.flush_count.update([self.flushes])
        _write_json(
            os.path.join(self.out_dir, f"buffer-{self.subtask}.json"), self.buffered_elements
        )

    def initialize_state(self, context: Any) -> None:
        descriptor = ListStateDescriptor(
            "buffered-elements", Types.TUPLE([Types.STRING(), Types.INT()])
        )
        store = context.get_operator_state_store()
        self.checkpointed_state = store.get_list_state(descriptor)
        self.flush_count = store.get_list_state(ListStateDescriptor("flushes", Types.LONG()))
        if context.is_restored():
            for element in self.checkpointed_state.get():
                self.buffered_elements.append(tuple(element))
            self.flushes = sum(self.flush_count.get())


def read_buffering_output(out_dir: str) -> tuple[list[Any], dict[str, list[Any]]]:
    """(all flushed records, {flush file: records}) plus the final buffers (as flushes)."""
    files: dict[str, list[Any]] = {}
    for name in sorted(os.listdir(out_dir)):
        if name.endswith(".json") and (name.startswith("flush-") or name.startswith("buffer-")):
            with open(os.path.join(out_dir, name)) as f:
                files[name] = [tuple(x) for x in json.load(f)]
    return [r for v in files.values() for r in v], files


class CounterSource(ParallelSourceFunction, ListCheckpointed):
    """The seed's CounterSource, bounded by ``limit`` for tests: emits offset, offset+1, ..."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.is_running = True
        self.offset = 0

    def run(self, ctx: Any) -> None:
        lock = ctx.get_checkpoint_lock()
        while self.is_running and self.offset < self.limit:
            with lock:  # output and state update are atomic
                ctx.collect(self.offset)
                self.offset += 1

    def cancel(self) -> None:
        self.is_running = False

    def restore_state(self, state: list[Any]) -> None:
        for s in state:
            self.offset = s

    def snapshot_state(self, checkpoint_id: Any, timestamp: int) -> list[Any]:
        return [self.offset]


class MyFunction(MapFunction, CheckpointedFunction):
    """The CheckpointedFunction javadoc's example: a per-key count (ReducingState) and a
    per-partition count (operator ListState) that adds up merged partitions on scale-down.

    Emits ``(value, count of its key, subtask, local count)`` so tests can check both.
    """

    def open(self, runtime_context: Any) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def initialize_state(self, context: Any) -> None:
        self.count_per_key = context.get_keyed_state_store().get_reducing_state(
            ReducingStateDescriptor("perKeyCount", lambda a, b: a + b, Types.LONG())
        )
        self.count_per_partition = context.get_operator_state_store().get_list_state(
            ListStateDescriptor("perPartitionCount", Types.LONG())
        )
        self.local_count = 0
        for c in self.count_per_partition.get():
            self.local_count += c

    def snapshot_state(self, context: Any) -> None:
        self.count_per_partition.clear()
        self.count_per_partition.add(self.local_count)

    def map(self, value: Any) -> Any:
        self.count_per_key.add(1)
        self.local_count += 1
        return value, self.count_per_key.get(), self.subtask, self.local_count


class NotifyRecorder(MapFunction, CheckpointListener):
    """Identity map that records the checkpoint notifications it receives in a file."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def open(self, runtime_context: Any) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def map(self, value: Any) -> Any:
        return value

    def _record(self, what: str, checkpoint_id: int) -> None:
        with open(os.path.join(self.out_dir, f"notify-{self.subtask}.log"), "a") as f:
            f.write(f"{what} {checkpoint_id}\n")

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._record("complete", checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._record("aborted", checkpoint_id)


# -- the seeds' broadcast example: colour/shape rule matching -----------------------------------

RULE_STATE = MapStateDescriptor("RulesBroadcastState", Types.STRING(), Types.PICKLED_BYTE_ARRAY())


class RuleMatcher(KeyedBroadcastProcessFunction):
    """Items ``(colour, shape)`` keyed by colour; rules ``(name, first, second)`` broadcast.

    Emits ``"MATCH: <rule>: <first item> - <second item>"`` for every pair of items of
    one colour where the rule's first shape is followed by its second shape.
    """

    def __init__(self) -> None:
        # partial matches: rule name -> items waiting for their second element
        self.map_state_desc = MapStateDescriptor(
            "items", Types.STRING(), Types.LIST(Types.TUPLE([Types.STRING(), Types.STRING()]))
        )

    def open(self, runtime_context: Any) -> None:
        self.items = runtime_context.get_map_state(self.map_state_desc)

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        name, first, second = value
        ctx.get_broadcast_state(RULE_STATE).put(name, (first, second))
        return None

    def process_element(self, value: Any, ctx: Any) -> Any:
        shape = value[1]
        for rule_name, (first, second) in ctx.get_broadcast_state(RULE_STATE).immutable_entries():
            stored = list(self.items.get(rule_name) or [])
            if shape == second and stored:
                for i in stored:
                    yield f"MATCH: {rule_name}: {tuple(i)} - {value}"
                stored = []
            # there is no else: to cover first == second
            if shape == first:
                stored.append(value)
            if not stored:
                self.items.remove(rule_name)
            else:
                self.items.put(rule_name, stored)


def expected_matches(items: list[tuple[str, str]], rules: list[tuple[str, str, str]]) -> list[str]:
    """The matches a single-threaded evaluation with all rules known up front finds."""
    out = []
    waiting: dict[tuple[str, str], list[Any]] = {}
    for item in items:
        for name, first, second in rules:
            stored = waiting.setdefault((item[0], name), [])
            if item[1] == second and stored:
                out += [f"MATCH: {name}: {i} - {item}" for i in stored]
                stored.clear()
            if item[1] == first:
                stored.append(item)
    return out


class SlowSource(SourceFunction, CheckpointedFunction):
    """Emits ``n`` numbers, sleeping ``pause_s`` outside the checkpoint lock between them:
    epochs are cut by the max wait, not by the record budget."""

    def __init__(self, n: int, pause_s: float) -> None:
        self.n = n
        self.pause_s = pause_s
        self.next = 0
        self.running = True

    def run(self, ctx: Any) -> None:
        import time

        while self.running and self.next < self.n:
            with ctx.get_checkpoint_lock():
                ctx.collect_with_timestamp(self.next, 1000 + self.next)
                self.next += 1
            time.sleep(self.pause_s)

    def cancel(self) -> None:
        self.running = False

    def initialize_state(self, context: Any) -> None:
        self.state = context.get_operator_state_store().get_list_state(
            ListStateDescriptor("next", Types.LONG())
        )
        for v in self.state.get():
            self.next = v

    def snapshot_state(self, context: Any) -> None:
        self.state.update([self.next])


class SubtaskRuleMatcher(RuleMatcher):
    """:class:`RuleMatcher` whose matches carry the subtask that found them:
    ``(match, subtask)``, so a test sees that every subtask had the broadcast rules."""

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self.subtask = runtime_context.get_index_of_this_subtask()

    def process_element(self, value: Any, ctx: Any) -> Any:
        for match in super().process_element(value, ctx):
            yield match, self.subtask


class RescaleProbe(MapFunction, CheckpointedFunction):
    """Keeps every value it maps in operator list state ``held`` (even-split on rescale)
    and in union list state ``seen`` (every subtask gets all old lists on rescale).

    Both lists are kept verbatim: what was restored first (in restore order), then the
    values this subtask mapped since. A test reading two retained checkpoints can so
    tell exactly what each new subtask restored. Emits ``(value, subtask)``.
    """

    def open(self, runtime_context: Any) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def initialize_state(self, context: Any) -> None:
        store = context.get_operator_state_store()
        self.held_state = store.get_list_state(ListStateDescriptor("held", Types.LONG()))
        self.seen_state = store.get_union_list_state(ListStateDescriptor("seen", Types.LONG()))
        self.held = list(self.held_state.get())
        self.seen = list(self.seen_state.get())

    def snapshot_state(self, context: Any) -> None:
        self.held_state.update(self.held)
        self.seen_state.update(self.seen)

    def map(self, value: Any) -> Any:
        self.held.append(value)
        self.seen.append(value)
        return value, self.subtask
