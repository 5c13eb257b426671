"""What event time costs: the keyed running count with and without timestamps and timers.

Same workload as ``keyed_count`` (``(key, 1)`` records over ``--keys`` keys, parallelism 2,
a ``ValueState`` count per key, no checkpoints), in one run on one Spark session:

* ``plain``: no timestamps (the untimestamped path);
* ``timestamped``: ``assign_timestamps_and_watermarks`` (monotonous, timestamp = record
  index) before ``key_by``: a timestamp column travels through the hash shuffle, the
  keyed operator reads ``ctx.timestamp()``, watermarks flow every epoch;
* ``timers``: as ``timestamped``, plus one event-time timer per key (re-registered per
  record at the next 100 000 ms boundary: one registration in ten creates a timer, the
  others are deduplicated), fired by the watermarks.

Reported: records/s and the ratios to ``plain`` measured in the same run.
Run: ``python -m benchmarks.event_time [--records N]``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from benchmarks.results import Sitting, Table, add_result_option, record
from streamstate.common import Configuration, Types, WatermarkStrategy
from streamstate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from streamstate.datastream.connectors import DiscardingSink
from streamstate.datastream.state import ValueStateDescriptor


class CountPerKey(KeyedProcessFunction):
    def __init__(self, timers: bool = False) -> None:
        self.timers = timers

    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        if self.timers:
            ts = ctx.timestamp()
            ctx.timer_service().register_event_time_timer(ts - ts % 100_000 + 100_000)
        yield value[0], c

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield ctx.get_current_key(), -1


def index_timestamp(value: Any, record_timestamp: int) -> int:
    return int(value[1])


def run(spark: Any, data: list[Any], epochs: int, variant: str) -> float:
    conf = Configuration()
    conf.set_string("execution.epoch.max-records", str(-(-len(data) // epochs)))
    env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
    env.set_parallelism(2)
    ds = env.from_collection(data)
    if variant != "plain":
        ds = ds.assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(index_timestamp)
        )
        ds.set_parallelism(1)  # chained to the collection source
    ds.key_by(lambda v: v[0]).process(CountPerKey(variant == "timers")).uid("count").add_sink(
        DiscardingSink()
    )
    t0 = time.perf_counter()
    result = env.execute(f"event-time-bench-{variant}")
    dt = time.perf_counter() - t0
    assert result.get_accumulator_result("records-in.count") == len(data)
    return len(data) / dt


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--json", help="also write the figures to this file")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.event_time", argv)

    from benchmarks.peers import spark_stateful as peers

    spark = peers.build_spark("streamstate-event-time-bench")
    spark.sparkContext.setLogLevel("ERROR")
    data = [(f"k{i % args.keys}", i) for i in range(args.records)]
    run(spark, data[:50_000], 2, "timers")  # warm-up: JVM, workers
    variants = ("plain", "timestamped", "timers")
    best = {v: 0.0 for v in variants}
    for _ in range(args.repeat):  # interleaved, so machine load hits every variant alike
        for v in variants:
            best[v] = max(best[v], run(spark, data, args.epochs, v))
    print(
        f"\nkeyed running count, {args.records:,} records, {args.keys:,} keys, "
        f"{args.epochs} epochs, parallelism 2, best of {args.repeat}"
    )
    for v in variants:
        print(f"  {v:12s} {best[v]:>12,.0f} records/s   {best[v] / best['plain']:.2f}x plain")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"records_per_s": best, "records": args.records}, f, indent=2)
    if args.result:
        rows = tuple((v, f"{best[v]:,.0f}", f"{best[v] / best['plain']:.2f}x") for v in variants)
        record("event_time", sitting.run([Table(("variant", "records/s", "vs plain"), rows)]))
    spark.stop()


if __name__ == "__main__":
    main()
