"""K1's floor: a bare PySpark job of K1's shape next to streamstate's K1, in one run.

Issue 32 asks for K1 (the keyed running count, 1M records over 10k keys, parallelism 2,
a checkpoint every epoch, one epoch) at 10x Spark's ``transformWithState``. Everything
streamstate does per record runs in CPython inside PySpark's workers and the subtask
hosts, and its records cross one Spark shuffle. So the cheapest job on this
architecture is PySpark doing the same shape with nothing of streamstate's:
``parallelize(records, 2) -> partitionBy(2) -> mapPartitions(a dict count per key)`` and a
``collect`` of one small figure per partition (the dict count is the keyed state; no
checkpoint, no key groups, no hosts). That job's time bounds what streamstate's record
path can reach on Spark; the gap between the two is what streamstate's own machinery
costs.

Measured in one run, interleaved, each the best of ``--repeat`` after a warm-up of each:

* the same two-stage PySpark job over 2 records: Spark's fixed cost of a job of this shape;
* the bare PySpark job over K1's records;
* streamstate's K1 (``benchmarks/keyed_count.py``'s job, a checkpoint every epoch, 1 epoch);
* Spark's ``transformWithState`` (Row) in one micro-batch, K1's peer (``--no-peer``: not);
* the dict count alone over the records in this process (CPU seconds): the per-record
  floor of any CPython design.

Each job's wall seconds and the CPU seconds of each kind of process it used: the JVM,
PySpark's Python workers (with their daemon), the subtask hosts (with their zygote) and
the driver's Python. With a writable cgroup-v1 ``cpuacct`` hierarchy (root on Linux) each
kind is put in a cgroup of its own once the warm-up has started it (processes they fork
later stay in it, and exited processes still count); otherwise the per-kind figures are 0.

Run: ``python -m benchmarks.rdd_floor [--records N] [--repeat N] [--result]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

from benchmarks import keyed_count
from benchmarks.process_cpu import KINDS, KindMeter, measured
from benchmarks.results import Sitting, Table, add_result_option, publish


def count_per_key(records: Iterator[tuple[str, int]]) -> Iterator[int]:
    """The bare job's keyed state: a running count per key in a dict (what K1's
    ``CountPerKey`` keeps in ``ValueState``); yields how many records it counted."""
    counts: dict[str, int] = {}
    get = counts.get
    n = 0
    for key, _one in records:
        counts[key] = get(key, 0) + 1
        n += 1
    yield n


def run_bare(spark: Any, data: list[Any], parallelism: int = 2) -> float:
    """The bare PySpark job over ``data``; records/s."""
    sc = spark.sparkContext
    t0 = time.perf_counter()
    counted = (
        sc.parallelize(data, parallelism)
        .partitionBy(parallelism)
        .mapPartitions(count_per_key)
        .collect()
    )
    dt = time.perf_counter() - t0
    assert sum(counted) == len(data), counted
    return len(data) / dt


def run_fixed(spark: Any, parallelism: int = 2) -> float:
    """The same two-stage PySpark job over one record per partition: Spark's fixed cost of
    a job of this shape (scheduling two stages of ``parallelism`` Python tasks). Returns
    jobs/s (the table prints its seconds)."""
    sc = spark.sparkContext
    t0 = time.perf_counter()
    counted = (
        sc.parallelize([(f"k{i}", 1) for i in range(parallelism)], parallelism)
        .partitionBy(parallelism)
        .mapPartitions(count_per_key)
        .collect()
    )
    assert sum(counted) == parallelism, counted
    return 1 / (time.perf_counter() - t0)


def in_process_count(data: list[Any]) -> float:
    """CPU seconds of the dict count alone over ``data`` in this process: the per-record
    floor of any CPython design (no reading, no shuffle)."""
    t0 = time.process_time()
    for _ in count_per_key(iter(data)):
        pass
    return time.process_time() - t0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-peer", action="store_true", help="skip transformWithState")
    p.add_argument("--json", help="also write the figures to this file")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.rdd_floor", argv)

    from benchmarks.peers import spark_stateful as peers

    spark = peers.build_spark("streamstate-rdd-floor")
    spark.sparkContext.setLogLevel("ERROR")
    data = keyed_count.workload(args.records, args.keys)
    records = len(data)
    jobs: dict[str, Any] = {
        "PySpark, same two stages, 2 records (Spark's fixed cost)": lambda: run_fixed(spark),
        "bare PySpark (parallelize, partitionBy, dict count)": lambda: run_bare(spark, data),
        "streamstate K1 (checkpoint every epoch, 1 epoch)": lambda: keyed_count.run_streamstate(
            spark, data, 1, True
        )[0],
    }
    if not args.no_peer:
        jobs["Spark transformWithState (Row), 1 batch"] = lambda: peers.run_transform_with_state(
            spark, records, 1, args.keys
        )
    meter = KindMeter("rdd-floor")
    try:
        for name, fn in jobs.items():  # warm-up: the JVM, the workers, the hosts' zygote
            if name.startswith("Spark transformWithState"):
                peers.run_transform_with_state(spark, 20_000, 1, min(args.keys, 20_000))
            else:
                fn()
        meter.place()
        best: dict[str, tuple[float, dict[str, float]]] = {}
        for _ in range(args.repeat):
            for name, fn in jobs.items():
                rate, cpu = measured(meter, fn)
                if name not in best or rate > best[name][0]:
                    best[name] = (rate, cpu)
        dict_count_s = min(in_process_count(data) for _ in range(3))
    finally:
        meter.close()
        spark.stop()

    names = list(jobs)
    fixed, bare, ours = (best[n] for n in names[:3])
    tws = best.get(names[3]) if len(names) > 3 else None

    def seconds(name: str, rate: float) -> float:
        return 1 / rate if name == names[0] else records / rate

    print(f"\nK1's shape, {records:,} records, {args.keys:,} keys, parallelism 2")
    print(f"{'job':58s} {'wall s':>7s} " + " ".join(f"{k:>8s}" for k in KINDS) + "  (CPU s)")
    rows = []
    for name, (rate, cpu) in best.items():
        cells = [f"{seconds(name, rate):.3f}", *(f"{cpu.get(k, 0):.2f}" for k in KINDS)]
        rows.append((name, *cells))
        print(f"{name:58s} {cells[0]:>7s} " + " ".join(f"{c:>8s}" for c in cells[1:]))
    ratios = {
        "streamstate / bare PySpark, records/s": f"{ours[0] / bare[0]:.2f}",
        "dict count alone, CPU s": f"{dict_count_s:.3f}",
    }
    if tws is not None:
        ratios["bare PySpark / transformWithState, 1 batch"] = f"{bare[0] / tws[0]:.1f}"
        ratios["streamstate / transformWithState, 1 batch"] = f"{ours[0] / tws[0]:.1f}"
        ratios["10x transformWithState needs, wall s"] = f"{records / (10 * tws[0]):.3f}"
    for k, v in ratios.items():
        print(f"{k}: {v}")
    table = Table(
        columns=("job", "wall s", *(f"{k} CPU s" for k in KINDS)),
        rows=tuple(rows),
        caption=f"K1's shape, {records:,} records, {args.keys:,} keys, parallelism 2; best of "
        f"{args.repeat}; " + "; ".join(f"{k} {v}" for k, v in ratios.items()),
    )
    publish(
        "rdd_floor",
        lambda: sitting.run([table]),
        args.result,
        args.json,
        {"best": best, "ratios": ratios},
    )


if __name__ == "__main__":
    main()
