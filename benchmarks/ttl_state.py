"""Cost of state TTL on value state access, as ratios to no TTL measured in the same run.

Two levels:

* **access**: the heap backend driven directly, the hot path of a keyed
  function: per record ``set_current_key`` + ``value()`` + ``update()``
  over ``--keys`` keys, for ValueState without TTL and with TTL under several
  configurations (default background cleanup = incremental, 5 entries per
  access; cleanup disabled; ``OnReadAndWrite``; incremental per record).
* **job**: the keyed running count (``benchmarks/keyed_count.py``'s function)
  as a whole job on the in-process local runner (no Spark: the task code is
  the same, the figure isolates the state work), without and with TTL.

Run: ``python -m benchmarks.ttl_state [--records N] [--keys K] [--repeat R] [--json out.json]``.
Each figure is the best of ``--repeat`` runs after a warm-up; the configurations are
interleaved round-robin so that load changes hit them alike.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from benchmarks.results import Sitting, Table, add_result_option, record
from streamstate.common import Configuration, Types
from streamstate.common.time import Time
from streamstate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from streamstate.datastream.connectors import DiscardingSink
from streamstate.datastream.state import StateTtlConfig, ValueStateDescriptor
from streamstate.runtime.keygroups import KeyGroupRange, compute_key_group_for_serialized_key
from streamstate.runtime.serializers.key import default_key_serializer
from streamstate.runtime.state.heap.backend import HeapKeyedStateBackend
from streamstate.runtime.state.ttl_clock import EpochTtlTimeProvider, SystemTtlTimeProvider

MAX_P = 128
TTL = Time.hours(1)

#: name -> StateTtlConfig (None: no TTL)
CONFIGS: dict[str, StateTtlConfig | None] = {
    "no TTL": None,
    "TTL, default (incremental cleanup 5/access)": StateTtlConfig.new_builder(TTL).build(),
    "TTL, background cleanup disabled": StateTtlConfig.new_builder(TTL)
    .disable_cleanup_in_background()
    .build(),
    "TTL, OnReadAndWrite, cleanup disabled": StateTtlConfig.new_builder(TTL)
    .update_ttl_on_read_and_write()
    .disable_cleanup_in_background()
    .build(),
    "TTL, incremental 5/access + per record": StateTtlConfig.new_builder(TTL)
    .cleanup_incrementally(5, True)
    .build(),
}
#: the access benchmark also runs this configuration with the per-access wall clock
SYSTEM_CLOCK_ROW = "TTL, default, `system` clock (wall clock per access)"


def descriptor(cfg: StateTtlConfig | None) -> ValueStateDescriptor:
    d = ValueStateDescriptor("count", Types.LONG())
    if cfg is not None:
        d.enable_time_to_live(cfg)
    return d


def bench_access(
    cfg: StateTtlConfig | None, records: int, keys: int, system_clock: bool = False
) -> float:
    """Records/s of set_current_key + value() + update() on the heap backend.

    The TTL clock is a per-epoch one (as the default ``driver`` clock) unless
    ``system_clock`` (a wall-clock read per access). Nothing expires (TTL 1 hour).
    """
    ks = default_key_serializer()
    b = HeapKeyedStateBackend("bench", KeyGroupRange(0, MAX_P - 1), MAX_P, ks)
    b.ttl_time_provider = (
        SystemTtlTimeProvider() if system_clock else EpochTtlTimeProvider(1_000_000, 1000)
    )
    s = b.get_partitioned_state(descriptor(cfg))
    key_list = [f"k{i}" for i in range(keys)]
    kgs = [compute_key_group_for_serialized_key(ks.serialize(k), MAX_P) for k in key_list]
    seq = [(key_list[i % keys], kgs[i % keys]) for i in range(records)]
    set_key, value, update = b.set_current_key, s.value, s.update  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    for k, g in seq:
        set_key(k, g)
        update((value() or 0) + 1)
    dt = time.perf_counter() - t0
    b.dispose()
    return records / dt


class CountPerKey(KeyedProcessFunction):
    def __init__(self, cfg: StateTtlConfig | None) -> None:
        self.cfg = cfg

    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(descriptor(self.cfg))

    def process_element(self, value: Any, ctx: Any) -> Any:
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield value[0], c


def bench_job(cfg: StateTtlConfig | None, records: int, keys: int) -> float:
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", str(records))
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    data = [(f"k{i % keys}", 1) for i in range(records)]
    env.from_collection(data).key_by(lambda v: v[0]).process(CountPerKey(cfg)).add_sink(
        DiscardingSink()
    )
    t0 = time.perf_counter()
    env.execute("ttl-bench")
    return records / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--job-records", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None)
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.ttl_state", argv)
    result: dict[str, Any] = {"records": args.records, "keys": args.keys, "access": {}, "job": {}}
    # Configurations are interleaved round-robin and each keeps its best run, so a change
    # of machine load during the run affects all of them alike.
    default = CONFIGS["TTL, default (incremental cleanup 5/access)"]
    access: dict[str, Callable[[], float]] = {
        name: (lambda c=cfg: bench_access(c, args.records, args.keys))
        for name, cfg in CONFIGS.items()
    }
    access[SYSTEM_CLOCK_ROW] = lambda: bench_access(
        default, args.records, args.keys, system_clock=True
    )
    jobs: dict[str, Callable[[], float]] = {
        name: (lambda c=CONFIGS[name]: bench_job(c, args.job_records, args.keys))
        for name in ("no TTL", "TTL, default (incremental cleanup 5/access)")
    }
    for level, fns in (("access", access), ("job", jobs)):
        for fn in fns.values():
            fn()  # warm-up
        best_of = dict.fromkeys(fns, 0.0)
        for _ in range(args.repeat):
            for name, fn in fns.items():
                best_of[name] = max(best_of[name], fn())
        result[level] = best_of
    for level in ("access", "job"):
        base = result[level]["no TTL"]
        print(f"\n{level} ({'direct backend' if level == 'access' else 'local-runner job'}):")
        for name, rps in result[level].items():
            print(f"  {name:<52} {rps:>12,.0f} rec/s   ratio to no TTL {rps / base:5.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    if args.result:
        heads = {
            "access": ("configuration", "access rec/s", "ratio to no TTL"),
            "job": (
                f"whole job (local runner, {args.job_records:,} records, {args.keys:,} keys)",
                "rec/s",
                "ratio to no TTL",
            ),
        }
        tables = [
            Table(
                heads[level],
                tuple(
                    (name, f"{rps:,.0f}", f"{rps / result[level]['no TTL']:.2f}")
                    for name, rps in result[level].items()
                ),
            )
            for level in ("access", "job")
        ]
        record("ttl_state", sitting.run(tables))
    return result


if __name__ == "__main__":
    main()
