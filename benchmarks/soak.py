"""Soak: a long keyed job with a checkpoint every epoch; resources must stay flat.

Issue 17: 200 epochs, 10^5 keys, checkpoint every epoch, ``num-retained`` 2. Every
``--every`` epochs it prints the driver's resident memory (VmRSS; with the in-process
runner the workers' state lives in the same process), the checkpoint directory's size
and file count, and the number of per-epoch version files. Flat means: RSS within 10%
after warm-up, the directory bounded, no files of failed attempts (``--fail-at`` injects a
failure and a restart). ``tests/faults/test_soak.py`` runs a short version with checks.

Run: ``python -m benchmarks.soak [--epochs 200] [--keys 100000] [--fail-at 100]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
from typing import Any

from benchmarks.results import Sitting, Table, add_result_option, record
from streamstate.common import Configuration, RestartStrategies, Types
from streamstate.datastream import (
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors import DiscardingSink
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.clock import TickingClock
from streamstate.runtime.job_status import EpochStats, JobObserver
from streamstate.testing import FailOnce


class Count(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.count.update((self.count.value() or 0) + 1)
        yield value


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def dir_stats(path: str) -> tuple[int, int, int, int]:
    """(bytes, files, epoch-version files, epoch files of attempt 0 after a restart)."""
    size = files = epoch_files = attempt0 = 0
    for root, _, names in os.walk(path):
        for n in names:
            files += 1
            size += os.path.getsize(os.path.join(root, n))
            if "/epochs" in root:
                epoch_files += 1
                if re.match(r"^\.?a0-", n):
                    attempt0 += 1
    return size, files, epoch_files, attempt0


class Curves(JobObserver):
    def __init__(self, path: str, every: int) -> None:
        self.path = path
        self.every = every
        self.rows: list[tuple[int, int, float, int, int, int, int]] = []

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        if stats.epoch % self.every == 0:
            size, files, epoch_files, attempt0 = dir_stats(self.path)
            self.rows.append(
                (stats.epoch, stats.attempt, rss_mb(), size, files, epoch_files, attempt0)
            )


def run(
    epochs: int,
    keys: int,
    records: int,
    fail_at: int,
    every: int,
    work: str,
    interval_ms: int = 1,
) -> Curves:
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", str(records))
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.set_clock(TickingClock())
    env.enable_checkpointing(interval_ms)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(os.path.join(work, "chk"))
    cc.set_num_retained_checkpoints(2)
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    curves = Curves(os.path.join(work, "chk"), every)
    env.add_job_observer(curves)
    data = [(f"k{i % keys}", i) for i in range(epochs * records)]
    ds = env.from_collection(data)
    if fail_at > 0:
        ds = ds.map(FailOnce(work, epoch=fail_at, subtask=0))
    ds.key_by(lambda v: v[0]).process(Count()).sink_to(DiscardingSink())
    env.execute("soak")
    return curves


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--records", type=int, default=5_000, help="records per epoch")
    p.add_argument(
        "--fail-at", type=int, default=100, help="epoch of an injected failure (0: none)"
    )
    p.add_argument("--every", type=int, default=10)
    p.add_argument(
        "--interval-ms", type=int, default=1, help="checkpoint interval (clock: 1 s per reading)"
    )
    add_result_option(p)
    a = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.soak", argv)
    work = tempfile.mkdtemp(prefix="streamstate-soak-")
    try:
        curves = run(a.epochs, a.keys, a.records, a.fail_at, a.every, work, a.interval_ms)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"soak: {a.epochs} epochs x {a.records} records, {a.keys} keys, checkpoint every "
        f"epoch, 2 retained, failure at epoch {a.fail_at or '-'}"
    )
    print(
        f"{'epoch':>6} {'attempt':>7} {'rss MB':>8} {'chk MB':>8} {'files':>6} "
        f"{'epoch files':>11} {'attempt-0 files':>15}"
    )
    for e, att, rss, size, files, ef, a0 in curves.rows:
        print(f"{e:>6} {att:>7} {rss:>8.1f} {size / 2**20:>8.2f} {files:>6} {ef:>11} {a0:>15}")
    warm = [r for r in curves.rows if r[0] >= a.epochs // 4]
    if warm:
        rss = [r[2] for r in warm]
        print(
            f"RSS after warm-up: min {min(rss):.1f} MB, max {max(rss):.1f} MB "
            f"(growth {100 * (max(rss) / min(rss) - 1):.1f}%)"
        )
    if a.result:
        table = Table(
            (
                "epoch",
                "attempt",
                "RSS MB",
                "checkpoint dir MB",
                "files",
                "epoch-version files",
                "files of attempt 0",
            ),
            tuple(
                (
                    str(e),
                    str(att),
                    f"{rss:.1f}",
                    f"{size / 2**20:.2f}",
                    str(files),
                    str(ef),
                    str(a0),
                )
                for e, att, rss, size, files, ef, a0 in curves.rows
            ),
        )
        notes = []
        if warm:
            rss = [r[2] for r in warm]
            notes.append(f"RSS after warm-up grows {100 * (max(rss) / min(rss) - 1):.1f} %.")
        record("soak", sitting.run([table], notes))


if __name__ == "__main__":
    main()
