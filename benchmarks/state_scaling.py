"""Epoch time vs total state size: does an epoch cost what it touches, or the whole state?

Issue 18's measurement, one run per backend and state size, on Spark ``local[2]``:

* the state: ``N`` keys (10^4 ... 10^7) of a ``ValueState[int]``, bootstrapped into a
  savepoint by the State Processor API (a Spark job) and restored by the measured job;
* the work: ``--epochs`` epochs of ``--records`` records each, touching ``--touched``
  distinct keys per epoch (a different set every epoch), parallelism 2;
* a checkpoint every ``--checkpoint-every`` epochs (an epoch-counting clock makes the
  pattern exact, whatever the epochs' speed).

Reported per size: the median epoch time over the epochs after the first (the first
restores the savepoint), split into epochs with and without a checkpoint, the cache
hits/misses (subtask-epochs that found their state in the worker vs rebuilt it), and
the ratio of each median to the smallest size's (the issue's goal: <= 1.5x from 10^4
to 10^7 keys). ``--json F`` writes the figures.

Run: ``python -m benchmarks.state_scaling --backend rocksdb --sizes 10000,1000000``;
``--svg docs/state_scaling_rocksdb.svg`` plots the median and p90 epoch time vs keys.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from benchmarks.results import Image, Sitting, add_result_option, record, rows_table
from streamstate.common import Configuration, Types
from streamstate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from streamstate.datastream.connectors import DiscardingSink
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.job_status import EpochStats, JobObserver
from streamstate.state_processor import (
    KeyedStateBootstrapFunction,
    OperatorTransformation,
    SavepointWriter,
)

COUNT = ValueStateDescriptor("count", Types.LONG())
MAX_PARALLELISM = 128
#: a prime stride spreads an epoch's touched keys over all key groups
STRIDE = 1_000_003


class Preload(KeyedStateBootstrapFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(COUNT)

    def process_element(self, row: Any, ctx: Any) -> None:
        self.count.update(1)


class CountPerKey(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(COUNT)

    def process_element(self, value: Any, ctx: Any) -> Any:
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield value, c


class KeyOf:
    """Record ``i`` -> its key: epoch ``e`` touches keys ``e*touched ... e*touched+touched-1``
    (strided over the key space). With ``preload``, records ``0 .. preload-1`` come first,
    keys ``k0, k1, ...`` in turn (the state built in the stream itself: ``preload`` is a
    whole number of epochs of at least ``keys`` records, see :func:`preload_records`)."""

    def __init__(self, records: int, touched: int, keys: int, preload: int = 0) -> None:
        self.records, self.touched, self.keys = records, touched, keys
        self.preload = preload

    def __call__(self, i: int) -> str:
        if i < self.preload:
            return f"k{i % self.keys}"
        e, j = divmod(i - self.preload, self.records)
        return f"k{((e * self.touched + j % self.touched) * STRIDE) % self.keys}"


def preload_records(keys: int, records: int) -> int:
    """The records that build ``keys`` keys of state: whole epochs of ``records``."""
    return -(-keys // records) * records


class EpochClock:
    """1 s per finished epoch: ``enable_checkpointing(n * 1000)`` checkpoints every n epochs."""

    def __init__(self) -> None:
        self.epochs = 0
        self.base = 1_700_000_000_000

    def __call__(self) -> int:
        return self.base + self.epochs * 1000


class Recorder(JobObserver):
    def __init__(self, clock: EpochClock) -> None:
        self.clock = clock
        self.epochs: list[EpochStats] = []

    def on_status_change(self, job_id: str, status: Any, timestamp_ms: int) -> None:
        pass

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        self.epochs.append(stats)
        self.clock.epochs += 1

    def on_failure(self, job_id: str, failure: Any) -> None:
        pass


def backend_conf(backend: str, local_dir: str | None) -> dict[str, str]:
    """``local_dir``: RocksDB's directory (``None``: the default, the executor's own)."""
    if backend == "rocksdb":
        return {
            "state.backend.type": "rocksdb",
            "state.backend.incremental": "true",
            **({"state.backend.rocksdb.localdir": local_dir} if local_dir else {}),
        }
    return {"state.backend.type": "hashmap"}


def bootstrap(spark: Any, keys: int, path: str) -> str:
    df = spark.range(keys).selectExpr("concat('k', cast(id as string)) as key")
    transformation = (
        OperatorTransformation.bootstrap_with(df).key_by(lambda r: r.key).transform(Preload())
    )
    return str(
        SavepointWriter.new_savepoint(spark, max_parallelism=MAX_PARALLELISM)
        .with_operator("count", transformation)
        .write(path)
    )


def run(
    spark: Any,
    args: Any,
    keys: int,
    savepoint: str | None,
    work: str,
    parallelism: int = 2,
    checkpoints: str | None = None,
) -> dict[str, Any]:
    """One measured job. ``savepoint``: the state to restore; ``None``: the job builds it
    first, in epochs of ``args.records`` records read by one source subtask (one record
    per key), and only the ``args.epochs`` epochs after those are measured. ``checkpoints``:
    the checkpoint directory (default: ``<work>/checkpoints``, RocksDB's files in ``work``
    too)."""
    preload = preload_records(keys, args.records) if savepoint is None else 0
    readers = 1 if preload else 2
    conf = Configuration()
    for k, v in {
        # per source subtask
        "execution.epoch.max-records": str(args.records // readers),
        **({"execution.state-recovery.path": savepoint} if savepoint else {}),
        "execution.checkpointing.dir": checkpoints or f"file://{work}/checkpoints",
        **backend_conf(args.backend, None if checkpoints else f"{work}/rocksdb"),
        **({"state.changelog.enabled": "true"} if args.changelog else {}),
    }.items():
        conf.set_string(k, v)
    env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
    clock = EpochClock()
    recorder = Recorder(clock)
    env.set_clock(clock).add_job_observer(recorder)
    env.set_parallelism(parallelism).set_max_parallelism(MAX_PARALLELISM)
    if args.checkpoint_every:  # 0: no checkpoints (the overhead's baseline)
        env.enable_checkpointing(args.checkpoint_every * 1000)
    total = preload + args.epochs * args.records
    key_of = KeyOf(args.records, args.touched, keys, preload)
    (
        env.from_sequence(0, total - 1)
        .set_parallelism(readers)
        .map(key_of, output_type=Types.STRING())
        .key_by(lambda k: k)
        .process(CountPerKey())
        .uid("count")
        .add_sink(DiscardingSink())
    )
    t0 = time.perf_counter()
    result = env.execute("state-scaling")
    wall = time.perf_counter() - t0
    acc = result.get_all_accumulator_results()
    assert acc["records-in.count"] == total, acc
    # the first epoch restores the savepoint; with a preload, the epochs after it count
    later = recorder.epochs[-args.epochs :] if preload else recorder.epochs[1:]
    with_cp = [s.duration_ms for s in later if s.checkpoint_id is not None]
    without = [s.duration_ms for s in later if s.checkpoint_id is None]
    durations = sorted(s.duration_ms for s in later)
    restore = [sum(st.restore_s for st in s.stages) for s in later]
    commit = [sum(st.commit_s for st in s.stages) for s in later]
    return {
        "keys": keys,
        "mean_epoch_ms": statistics.fmean(durations),
        "p90_epoch_ms": durations[int(0.9 * (len(durations) - 1))],
        "restore_s_per_epoch": statistics.fmean(restore),
        "commit_s_per_epoch": statistics.fmean(commit),
        "wall_s": wall,
        "epochs": len(recorder.epochs),
        "median_epoch_ms": statistics.median(s.duration_ms for s in later),
        "median_checkpoint_epoch_ms": statistics.median(with_cp) if with_cp else None,
        "median_plain_epoch_ms": statistics.median(without) if without else None,
        "first_epoch_ms": recorder.epochs[0].duration_ms,
        "cache_hits": sum(s.cache_hits for s in later),
        "cache_misses": sum(s.cache_misses for s in later),
        "restore_s": acc.get("subtask-seconds.restore"),
        "commit_s": acc.get("subtask-seconds.commit"),
    }


def write_svg(rows: list[dict[str, Any]], path: str, title: str) -> None:
    """A line chart of the median and p90 epoch time vs the number of keys (log scale),
    written by hand (no plotting dependency), atomically."""
    import math
    import os

    w, h, left, right, top, bottom = 680, 380, 70, 60, 50, 50
    xs = [math.log10(r["keys"]) for r in rows]
    x0, x1 = math.floor(min(xs)), math.ceil(max(xs))
    x1 = x1 if x1 > x0 else x0 + 1
    ymax = max(max(r["p90_epoch_ms"], r["median_epoch_ms"]) for r in rows) * 1.15
    base = 10 ** math.floor(math.log10(ymax / 5)) if ymax > 0 else 1
    step = next(m * base for m in (1, 2, 5, 10) if ymax / (m * base) <= 6)

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (w - left - right)

    def py(y: float) -> float:
        return h - bottom - y / ymax * (h - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>',
    ]
    y = 0.0
    while y <= ymax:
        out.append(
            f'<line x1="{left}" y1="{py(y):.1f}" x2="{w - right}" y2="{py(y):.1f}" '
            f'stroke="#ddd"/><text x="{left - 6}" y="{py(y) + 4:.1f}" '
            f'text-anchor="end">{y:g}</text>'
        )
        y += step
    for e in range(x0, x1 + 1):
        out.append(
            f'<line x1="{px(e):.1f}" y1="{top}" x2="{px(e):.1f}" y2="{h - bottom}" '
            f'stroke="#eee"/><text x="{px(e):.1f}" y="{h - bottom + 18}" '
            f'text-anchor="middle">10^{e}</text>'
        )
    out.append(
        f'<text x="{(left + w - right) / 2}" y="{h - 10}" text-anchor="middle">'
        f"keys of state</text>"
        f'<text x="16" y="{(top + h - bottom) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(top + h - bottom) / 2})">epoch time (ms)</text>'
    )
    for key, colour, label in (
        ("median_epoch_ms", "#1f77b4", "median"),
        ("p90_epoch_ms", "#ff7f0e", "p90"),
    ):
        pts = " ".join(f"{px(x):.1f},{py(r[key]):.1f}" for x, r in zip(xs, rows, strict=True))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, r in zip(xs, rows, strict=True):
            out.append(
                f'<circle cx="{px(x):.1f}" cy="{py(r[key]):.1f}" r="3" fill="{colour}"/>'
                f'<text x="{px(x) + 5:.1f}" y="{py(r[key]) - 6:.1f}" fill="{colour}">'
                f"{r[key]:.0f}</text>"
            )
        lx = left + 10 + (0 if label == "median" else 90)
        out.append(
            f'<line x1="{lx}" y1="{top - 12}" x2="{lx + 20}" y2="{top - 12}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<text x="{lx + 25}" y="{top - 8}">{label} (ms)</text>'
        )
    out.append("</svg>")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("heap", "rocksdb"), default="rocksdb")
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--records", type=int, default=50_000)
    p.add_argument("--touched", type=int, default=5_000)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--changelog", action="store_true", help="state.changelog.enabled: true")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--svg", help="also plot the epoch times vs keys into this SVG file")
    p.add_argument("--from-json", help="only plot (--svg) the figures of an earlier --json")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.state_scaling", argv)
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        write_svg(saved["rows"], args.svg, _title(argparse.Namespace(**saved["args"])))
        return

    from benchmarks.peers import spark_stateful as peers

    spark = peers.build_spark("streamstate-state-scaling")
    spark.sparkContext.setLogLevel("ERROR")
    rows = []
    warm = tempfile.mkdtemp(prefix="ss-scaling-warmup-")
    try:  # untimed: the JVM, Python workers and imports warm up before the first size
        run(
            spark,
            argparse.Namespace(**{**vars(args), "epochs": 3}),
            1000,
            bootstrap(spark, 1000, f"{warm}/sp"),
            warm,
        )
    finally:
        shutil.rmtree(warm, ignore_errors=True)
    for keys in (int(s) for s in args.sizes.split(",")):
        work = tempfile.mkdtemp(prefix=f"ss-scaling-{keys}-")
        try:
            t0 = time.perf_counter()
            savepoint = bootstrap(spark, keys, f"{work}/savepoint")
            boot = time.perf_counter() - t0
            row = run(spark, args, keys, savepoint, work)
            row["bootstrap_s"] = boot
            rows.append(row)
            print(json.dumps(row), flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    base = rows[0]
    print(f"\nbackend {args.backend}, {args.records} records/epoch, {args.touched} keys touched")
    print(
        f"{'keys':>10s} {'median ms':>10s} {'ratio':>6s} {'mean ms':>8s} {'p90 ms':>7s} "
        f"{'cp ms':>6s} {'plain ms':>9s} {'restore s':>10s} {'commit s':>9s} hits/miss"
    )
    for r in rows:
        print(
            f"{r['keys']:>10d} {r['median_epoch_ms']:>10.0f} "
            f"{r['median_epoch_ms'] / base['median_epoch_ms']:>6.2f} "
            f"{r['mean_epoch_ms']:>8.0f} {r['p90_epoch_ms']:>7.0f} "
            f"{r['median_checkpoint_epoch_ms'] or 0:>6.0f} {r['median_plain_epoch_ms'] or 0:>9.0f} "
            f"{r['restore_s_per_epoch']:>10.3f} {r['commit_s_per_epoch']:>9.3f} "
            f"{r['cache_hits']}/{r['cache_misses']}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=2)
    if args.svg:
        write_svg(rows, args.svg, _title(args))
    if args.result:
        images = []
        if args.svg and os.path.abspath(args.svg).startswith(os.path.abspath("docs") + os.sep):
            images.append(Image(os.path.relpath(args.svg, "docs"), _title(args)))
        record("state_scaling", sitting.run([rows_table(rows)], images=images))


def _title(args: Any) -> str:
    return (
        f"{args.backend}: epoch time vs state ({args.records} records/epoch, "
        f"{args.touched} keys touched, checkpoint every {args.checkpoint_every})"
    )


if __name__ == "__main__":
    main()
