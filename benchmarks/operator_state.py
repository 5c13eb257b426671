"""Cost of operator state and the broadcast pattern, as ratios to baselines of the same run.

* **job**: whole jobs on the in-process local runner (no Spark: the task code is the
  same, the figure isolates the runtime's work), ``--records`` records in epochs of
  ``--epoch`` records, checkpoint every epoch:
  - ``map``: a stateless map (baseline);
  - ``map + per-partition count``: the seeds' MyFunction-shaped map without the keyed
    part (a local counter moved into operator list state by ``snapshot_state`` at every
    epoch end), so the difference is the per-epoch operator-state version;
  - ``BufferingSink``: the seeds' sink buffering up to 500 elements in list state
    (versions of several KiB, some over the 16 KiB inline limit, written as files);
  - ``keyed process``, ``keyed broadcast process``: the same rule check per record,
    rules fixed in the function vs rules in broadcast state read through the read-only
    view (the two-input plumbing plus the state access).
* **snapshot**: ``DefaultOperatorStateStore.snapshot()`` and decoding of a list state of
  ``--elements`` longs (per-epoch version cost as a function of state size).

Run: ``python -m benchmarks.operator_state [--records N] [--epoch E] [--repeat R] [--json f]``.
Each figure is the best of ``--repeat`` runs after a warm-up, configurations interleaved.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks.results import Sitting, Table, add_result_option, record
from streamstate.common import Configuration, Types
from streamstate.datastream import (
    CheckpointedFunction,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    SinkFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors import DiscardingSink
from streamstate.datastream.state import ListStateDescriptor, MapStateDescriptor
from streamstate.runtime.state.operator import DefaultOperatorStateStore, decode_operator_snapshot

RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())
FIXED = {"r1": 3, "r2": 5}


class PerPartitionCount(MapFunction, CheckpointedFunction):
    def initialize_state(self, context: Any) -> None:
        self.state = context.get_operator_state_store().get_list_state(
            ListStateDescriptor("count", Types.LONG())
        )
        self.n = sum(self.state.get())

    def snapshot_state(self, context: Any) -> None:
        self.state.update([self.n])

    def map(self, value: Any) -> Any:
        self.n += 1
        return value


class Buffering(SinkFunction, CheckpointedFunction):
    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.buf: list[Any] = []

    def invoke(self, value: Any, context: Any) -> None:
        self.buf.append(value)
        if len(self.buf) >= self.threshold:
            self.buf = []

    def initialize_state(self, context: Any) -> None:
        self.state = context.get_operator_state_store().get_list_state(
            ListStateDescriptor("buf", Types.TUPLE([Types.STRING(), Types.LONG()]))
        )
        self.buf = list(self.state.get())

    def snapshot_state(self, context: Any) -> None:
        self.state.update(self.buf)


class FixedRules(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        for name, m in FIXED.items():
            if value[1] % m == 0:
                yield name


class BroadcastRules(KeyedBroadcastProcessFunction):
    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put(value[0], value[1])

    def process_element(self, value: Any, ctx: Any) -> Any:
        for name, m in ctx.get_broadcast_state(RULES).items():
            if value[1] % m == 0:
                yield name


def _env(epoch: int, chk: str | None) -> StreamExecutionEnvironment:
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", str(epoch))
    conf.set_string("execution.epoch.state-dir", tempfile.mkdtemp())
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    if chk is not None:
        env.enable_checkpointing(1)
        env.get_checkpoint_config().set_checkpoint_storage_dir(chk)
    return env


def _jobs(data: list[Any]) -> dict[str, Callable[[StreamExecutionEnvironment], None]]:
    def plain(env: StreamExecutionEnvironment) -> None:
        env.from_collection(data).map(lambda v: v).add_sink(DiscardingSink())

    def counted(env: StreamExecutionEnvironment) -> None:
        env.from_collection(data).map(PerPartitionCount()).add_sink(DiscardingSink())

    def buffering(env: StreamExecutionEnvironment) -> None:
        env.from_collection(data).add_sink(Buffering(500))

    def keyed(env: StreamExecutionEnvironment) -> None:
        env.from_collection(data).key_by(lambda v: v[0]).process(FixedRules()).add_sink(
            DiscardingSink()
        )

    def broadcast(env: StreamExecutionEnvironment) -> None:
        rules = env.from_collection(list(FIXED.items())).broadcast(RULES)
        env.from_collection(data).key_by(lambda v: v[0]).connect(rules).process(
            BroadcastRules()
        ).add_sink(DiscardingSink())

    return {
        "map (baseline)": plain,
        "map + per-partition count": counted,
        "BufferingSink (list state, up to 500)": buffering,
        "keyed process, fixed rules (baseline)": keyed,
        "keyed broadcast process, rules in broadcast state": broadcast,
    }


def bench_jobs(records: int, epoch: int, repeat: int, checkpoint: bool) -> dict[str, float]:
    data = [(f"k{i % 1000}", i) for i in range(records)]
    jobs = _jobs(data)
    best: dict[str, float] = {}
    for r in range(repeat + 1):
        for name, build in jobs.items():
            with tempfile.TemporaryDirectory() as d:
                env = _env(epoch, d if checkpoint else None)
                build(env)
                t0 = time.perf_counter()
                env.execute(name)
                dt = time.perf_counter() - t0
            if r > 0:  # the first round warms up
                best[name] = max(best.get(name, 0.0), records / dt)
    return best


def bench_snapshot(elements: int, repeat: int) -> dict[str, float]:
    s = DefaultOperatorStateStore("bench")
    s.get_list_state(ListStateDescriptor("l", Types.LONG())).update(list(range(elements)))
    snap_best, decode_best, size = 0.0, 0.0, 0
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        data = s.snapshot()
        t1 = time.perf_counter()
        decode_operator_snapshot(data)
        t2 = time.perf_counter()
        size = len(data)
        snap_best = max(snap_best, elements / (t1 - t0))
        decode_best = max(decode_best, elements / (t2 - t1))
    return {"snapshot elements/s": snap_best, "decode elements/s": decode_best, "bytes": size}


def bench_small_version(repeat: int, n: int = 20_000) -> float:
    """Microseconds per per-epoch version of a one-element list state (snapshot_state's
    result serialized, CRC'd and wrapped inline: the fixed cost per operator and epoch)."""
    from streamstate.runtime.versions import commit_operator_state

    s = DefaultOperatorStateStore("bench")
    st = s.get_list_state(ListStateDescriptor("count", Types.LONG()))
    stores = {"op": s}
    best = float("inf")
    for _ in range(repeat + 1):
        crcs: dict[str, int | None] = {}
        t0 = time.perf_counter()
        for i in range(n):
            st.update([i])  # changes every epoch: a new version each time
            commit_operator_state(None, stores, crcs, 0, 0, i, None)
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--epoch", type=int, default=10_000)
    ap.add_argument("--elements", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", default=None)
    add_result_option(ap)
    a = ap.parse_args(argv)
    sitting = Sitting.begin("benchmarks.operator_state", argv)
    results: dict[str, Any] = {}
    for checkpoint in (False, True):
        jobs = bench_jobs(a.records, a.epoch, a.repeat, checkpoint)
        mode = "checkpoint every epoch" if checkpoint else "no checkpoints"
        results[mode] = jobs
        base_map = jobs["map (baseline)"]
        base_keyed = jobs["keyed process, fixed rules (baseline)"]
        print(f"jobs: {a.records} records, epochs of {a.epoch}, {mode}, local runner")
        for name, v in jobs.items():
            base = base_keyed if "keyed" in name else base_map
            print(f"  {name:52s} {v:12,.0f} rec/s   ratio {v / base:5.2f}")
    snap = bench_snapshot(a.elements, a.repeat)
    snap["small version us"] = bench_small_version(a.repeat)
    print(f"per-epoch version of a 1-element list state: {snap['small version us']:.1f} us")
    print(f"list state of {a.elements} longs ({snap['bytes']:,} bytes):")
    print(f"  snapshot {snap['snapshot elements/s']:,.0f} elements/s")
    print(f"  decode   {snap['decode elements/s']:,.0f} elements/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"jobs": results, "snapshot": snap}, f, indent=2)
    if a.result:
        rows = []
        for name in results["no checkpoints"]:
            cells = [name]
            for mode in ("no checkpoints", "checkpoint every epoch"):
                jobs = results[mode]
                base = jobs[
                    "keyed process, fixed rules (baseline)" if "keyed" in name else "map (baseline)"
                ]
                cells.append(f"{jobs[name]:,.0f} rec/s ({jobs[name] / base:.2f})")
            rows.append(tuple(cells))
        table = Table(("job", "no checkpoints", "checkpoint every epoch"), tuple(rows))
        notes = [
            f"Per-epoch version of a one-element list state: {snap['small version us']:.1f} us; "
            f"a list state of {a.elements:,} longs ({snap['bytes']:,} bytes) snapshots at "
            f"{snap['snapshot elements/s']:,.0f} and decodes at "
            f"{snap['decode elements/s']:,.0f} elements/s."
        ]
        record("operator_state", sitting.run([table], notes))


if __name__ == "__main__":
    main()
