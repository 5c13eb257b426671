"""Broadcast state: the Flink docs' colour/shape rule matching, with a failure, on Spark.

Items ``(colour, shape)`` are keyed by colour; rules ``(name, first shape, second shape)``
are broadcast to every subtask and kept in broadcast state. For each colour, a
``KeyedBroadcastProcessFunction`` remembers items waiting for their second shape in
keyed ``MapState`` and emits ``MATCH`` when a rule's first shape is followed by its
second one::

    items  -> key_by(colour) ----------------\\
                                              connect -> KeyedBroadcastProcessFunction -> CollectSink
    rules  -> broadcast(MapStateDescriptor) -/

A ``CheckpointedFunction`` map in front of the matcher counts the items per subtask in
operator list state. The job runs twice on one SparkSession: failure-free, then with a
failure injected in epoch 3; it prints both results and exits 1 unless they are equal
(exactly-once) and equal to a single-threaded evaluation.

    python examples/rule_matching.py [--items 300] [--master local[2]] [--runner local]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from collections import Counter
from typing import Any

from streamstate.common import Configuration, Types
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import (
    CheckpointedFunction,
    KeyedBroadcastProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import ListStateDescriptor, MapStateDescriptor
from streamstate.testing import FailOnce

RULES = MapStateDescriptor("RulesBroadcastState", Types.STRING(), Types.PICKLED_BYTE_ARRAY())
COLOURS = ["red", "green", "blue", "yellow"]
SHAPES = ["rectangle", "triangle", "circle", "triangle", "rectangle", "circle", "circle"]
RULE_LIST = [("rect-tri", "rectangle", "triangle"), ("tri-circle", "triangle", "circle")]


class CountPerPartition(MapFunction, CheckpointedFunction):
    """Identity map with a per-subtask item count in operator list state."""

    def initialize_state(self, context: Any) -> None:
        self.state = context.get_operator_state_store().get_list_state(
            ListStateDescriptor("items-seen", Types.LONG())
        )
        self.count = sum(self.state.get())

    def snapshot_state(self, context: Any) -> None:
        self.state.update([self.count])

    def map(self, value: Any) -> Any:
        self.count += 1
        return value


class RuleMatcher(KeyedBroadcastProcessFunction):
    def open(self, runtime_context: Any) -> None:
        self.items = runtime_context.get_map_state(
            MapStateDescriptor(
                "items", Types.STRING(), Types.LIST(Types.TUPLE([Types.STRING(), Types.STRING()]))
            )
        )

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        name, first, second = value
        ctx.get_broadcast_state(RULES).put(name, (first, second))

    def process_element(self, value: Any, ctx: Any) -> Any:
        shape = value[1]
        for name, (first, second) in ctx.get_broadcast_state(RULES).immutable_entries():
            stored = list(self.items.get(name) or [])
            if shape == second and stored:
                for item in stored:
                    yield f"MATCH {name}: {tuple(item)} - {value}"
                stored = []
            if shape == first:
                stored.append(value)
            if stored:
                self.items.put(name, stored)
            else:
                self.items.remove(name)


def make_items(n: int) -> list[tuple[str, str]]:
    colours = itertools.cycle(COLOURS)
    shapes = itertools.cycle(SHAPES)
    return [(next(colours), next(shapes)) for _ in range(n)]


def expected(items: list[tuple[str, str]]) -> list[str]:
    out, waiting = [], {}
    for item in items:
        for name, first, second in RULE_LIST:
            stored = waiting.setdefault((item[0], name), [])
            if item[1] == second and stored:
                out += [f"MATCH {name}: {i} - {item}" for i in stored]
                stored.clear()
            if item[1] == first:
                stored.append(item)
    return out


def run(args: argparse.Namespace, items: list[Any], work: str, fail_epoch: int) -> tuple[Any, Any]:
    conf = Configuration()
    conf.set_string("execution.epoch.max-records", str(args.epoch_records))
    conf.set_string("execution.runner", args.runner)
    if args.master:
        conf.set_string("spark.master", args.master)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(f"{work}/chk-{fail_epoch}")
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    fail = FailOnce(work, epoch=fail_epoch, subtask=0, after_records=1)
    keyed = (
        env.from_collection(items)
        .map(fail)
        .set_parallelism(1)  # chained with the source: items keep their order
        .map(CountPerPartition())
        .set_parallelism(1)
        .key_by(lambda v: v[0])
    )
    rules = env.from_collection(RULE_LIST).broadcast(RULES)
    sink = CollectSink()
    keyed.connect(rules).process(RuleMatcher()).uid("matcher").sink_to(sink)
    result = env.execute(f"rule-matching (failure in epoch {fail_epoch})")
    return sink.get_results(), result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=300)
    p.add_argument("--epoch-records", type=int, default=40)
    p.add_argument("--master", default=None, help="Spark master (default local[*])")
    p.add_argument("--runner", default="spark", choices=["spark", "local"])
    args = p.parse_args(argv)
    items = make_items(args.items)
    want = expected(items)
    with tempfile.TemporaryDirectory() as work:
        base, r1 = run(args, items, work, -1)
        failed, r2 = run(args, items, work, 3)
    same = Counter(base) == Counter(failed)
    correct = Counter(base) == Counter(want)
    print(f"items: {len(items)}, rules: {len(RULE_LIST)}, matches: {len(base)}")
    for line in base[:5]:
        print(f"  {line}")
    print(
        f"restarts: {r1.get_accumulator_result('restarts')} {r2.get_accumulator_result('restarts')}"
    )
    print(f"matches equal a single-threaded evaluation: {'yes' if correct else 'NO'}")
    print(f"matches identical to the failure-free run: {'yes' if same else 'NO'}")
    return 0 if same and correct else 1


if __name__ == "__main__":
    sys.exit(main())
