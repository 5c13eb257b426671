"""The job of the recovery-path suite (``test_recovery_paths.py``): running sums per key into
a FileSink, with retained checkpoints, run as a user runs it::

    python recovery_job.py OUT CHK [--parallelism P] [--rocksdb] [--records N]
                                   [--rolling checkpoint|size] [--epoch-interval S]
    streamstate run --from-checkpoint CHK/<job>/chk-<n> recovery_job.py -- <the same>

Faults it can inject (environment):

* ``DAMAGE_AT=<epoch>`` with ``DAMAGE=newest|all``: in that epoch (once), subtask 0 flips a
  byte in the ``_metadata`` of the newest (or of every) completed checkpoint, then fails:
  the restart falls back to an older checkpoint (or to the start), behind output that was
  committed.
* ``CRASH_AT=<point>:<n>``: SIGKILLs the driver where ``crash_job.py`` says.

Retention: 10 checkpoints, kept when the job ends, so a test can resume an older one.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import Any

from streamstate.common import Configuration, Encoder
from streamstate.datastream import (
    ExternalizedCheckpointCleanup,
    MapFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors import FileSink, RollingPolicy
from streamstate.testing import InjectedFailure, TickingClock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.faults import crash_job  # importable through the path above

KEYS = 13


def data(records: int) -> list[tuple[str, int]]:
    return [(f"k{i % KEYS}", i) for i in range(records)]


def expected_lines(records: int) -> list[str]:
    totals: dict[str, int] = {}
    out = []
    for k, i in data(records):
        totals[k] = totals.get(k, 0) + i
        out.append(f"{k},{i},{totals[k]}")
    return sorted(out)


def _metadata_files(chk: str) -> list[str]:
    return sorted(
        glob.glob(os.path.join(chk, "*", "chk-*", "_metadata")),
        key=lambda p: int(p.rsplit("chk-", 1)[1].split(os.sep)[0]),
    )


class DamageThenFail(MapFunction):
    """Identity; in epoch ``epoch`` (once, subtask 0) damages the newest (``all``: every)
    completed checkpoint's ``_metadata`` and raises, as storage rot followed by a worker
    failure would."""

    def __init__(self, chk: str, epoch: int, which: str) -> None:
        self.chk, self.epoch, self.which = chk, epoch, which
        self.ctx: Any = None

    def open(self, runtime_context: Any) -> None:
        self.ctx = runtime_context

    def map(self, value: Any) -> Any:
        ctx = self.ctx
        if ctx.get_index_of_this_subtask() != 0 or getattr(ctx, "epoch", 0) != self.epoch:
            return value
        try:
            fd = os.open(os.path.join(self.chk, "damaged"), os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return value
        os.close(fd)
        metas = _metadata_files(self.chk)
        assert len(metas) >= (1 if self.which == "all" else 2), metas
        for path in metas if self.which == "all" else metas[-1:]:
            with open(path, "r+b") as f:
                data = bytearray(f.read())
                data[-3] ^= 0x01
                f.seek(0)
                f.write(data)
        raise InjectedFailure(f"damaged {len(metas)} checkpoint(s), then failed")


def sink_for(out: str, rolling: str) -> FileSink:
    policy = (
        RollingPolicy.on_checkpoint_rolling_policy()
        if rolling == "checkpoint"
        else RollingPolicy.default_rolling_policy(part_size=1500, rollover_interval=3_600_000)
    )
    return (
        FileSink.for_row_format(out, Encoder.simple_string_encoder())
        .with_rolling_policy(policy)
        .build()
    )


def build(env: Any, out: str, chk: str, records: int, rolling: str) -> None:
    sums = env.from_collection(data(records)).key_by(lambda v: v[0]).process(crash_job.RunningSum())
    damage_at = os.environ.get("DAMAGE_AT")
    if damage_at:
        sums = sums.map(DamageThenFail(chk, int(damage_at), os.environ.get("DAMAGE", "newest")))
    sums.map(crash_job.as_line).sink_to(sink_for(out, rolling)).uid("files")


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("chk")
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--records", type=int, default=600)
    p.add_argument("--rocksdb", action="store_true")
    p.add_argument("--rolling", choices=["checkpoint", "size"], default="checkpoint")
    p.add_argument("--epoch-interval", default=None)
    args = p.parse_args(argv)
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", "40")
    if args.epoch_interval:
        conf.set_string("execution.epoch.interval", args.epoch_interval)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(args.parallelism)
    env.set_clock(TickingClock())
    if args.rocksdb:
        from streamstate.datastream.state_backend import EmbeddedRocksDBStateBackend

        env.set_state_backend(EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True))
    env.enable_checkpointing(2500)  # every 2-3 epochs (the clock ticks 1 s per reading)
    from streamstate.common import RestartStrategies

    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 0))
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(args.chk)
    cc.set_num_retained_checkpoints(10)
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    build(env, args.out, args.chk, args.records, args.rolling)
    env.execute("recovery-job")


if __name__ == "__main__":
    crash_job.install_crash_hooks()
    main(sys.argv[1:])
