"""The job of the bed's machine-loss scenarios (tests/cluster/test_machine_loss.py and
benchmarks/cluster_recovery.py): running sums per key into a FileSink on S3, a checkpoint
every epoch on S3, run with ``streamstate run`` on a driver machine::

    streamstate run --master spark://MASTER:7077 -p 3 fault_job.py -- \\
        --out s3://bed/RUN/out --checkpoints s3://bed/RUN/chk --gates s3://bed/RUN/gates \\
        --backend rocksdb --records 720 --gate 240 --gate 480

A **gate** holds the job mid-epoch where the test wants a machine lost: the keyed function,
on the record whose value is a gate, writes ``<gates>/<value>.reached.<hostname>`` and
waits until ``<gates>/<value>.released`` exists (once released, a replay passes at once).
The test reads which machine holds the gate, loses that machine (or another one), then
releases it. Prints one ``REPORT {json}`` line at the end (the job's accumulators).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any

from streamstate.common import Types
from streamstate.datastream import (
    EmbeddedRocksDBStateBackend,
    ExternalizedCheckpointCleanup,
    HashMapStateBackend,
    StreamExecutionEnvironment,
)
from streamstate.datastream.state import ValueStateDescriptor
from tests.faults.crash_job import RunningSum, as_line, data, file_sink_for

#: how long a gate holds at most (the test releases it within seconds; a test that died
#: must not leave a job blocked forever)
GATE_TIMEOUT_S = 600.0


def gate_reached(gates: str, value: int) -> None:
    """Announce that this machine holds gate ``value``; wait for its release."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(f"{gates.rstrip('/')}/{value}.released")
    if fs.exists(root):
        return
    base = root.rsplit("/", 1)[0]
    fs.pipe_file(f"{base}/{value}.reached.{socket.gethostname()}", b"")
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while time.monotonic() < deadline and not fs.exists(root):
        time.sleep(0.2)


class GatedRunningSum(RunningSum):
    """The crash suites' running sum, held at the gate values (see the module docstring);
    with ``value_bytes``, each key also keeps that many random bytes, written once (state
    that is large while each epoch's changes stay small)."""

    def __init__(self, gates: str, values: list[int], value_bytes: int = 0) -> None:
        super().__init__()
        self.gates, self.values, self.value_bytes = gates, frozenset(values), value_bytes

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        if self.value_bytes:
            descriptor = ValueStateDescriptor("payload", Types.PICKLED_BYTE_ARRAY())
            self.payload = ctx.get_state(descriptor)

    def process_element(self, value: Any, ctx: Any) -> Any:
        if value[1] in self.values:
            gate_reached(self.gates, value[1])
        if self.value_bytes and self.payload.value() is None:
            self.payload.update(os.urandom(self.value_bytes))
        yield from super().process_element(value, ctx)


def records(args: argparse.Namespace) -> list[tuple[str, int]]:
    """The crash suites' input, or ``--keys`` keys in turn."""
    if not args.keys:
        return data("files", args.records)
    return [(f"k{i % args.keys}", i) for i in range(args.records)]


def checkpoint_every_epoch(env: StreamExecutionEnvironment, checkpoints: str, backend: str) -> None:
    """A checkpoint every epoch in ``checkpoints`` (kept when the job is cancelled), the
    state on ``backend``: ``hashmap`` (heap) or ``rocksdb`` (incremental checkpoints)."""
    env.enable_checkpointing(1)  # one per epoch
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(checkpoints)
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    env.set_state_backend(
        EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True)
        if backend == "rocksdb"
        else HashMapStateBackend()
    )


def build(env: StreamExecutionEnvironment, args: argparse.Namespace) -> None:
    checkpoint_every_epoch(env, args.checkpoints, args.backend)
    (
        env.from_collection(records(args))
        .key_by(lambda v: v[0])
        .process(GatedRunningSum(args.gates, args.gate, args.value_bytes))
        .uid("sums")
        .map(as_line)
        .sink_to(file_sink_for(args.out))
        .uid("files")
    )


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="fault_job.py")
    p.add_argument("--out", required=True)
    p.add_argument("--checkpoints", required=True)
    p.add_argument("--gates", required=True)
    p.add_argument("--backend", choices=["hashmap", "rocksdb"], default="hashmap")
    p.add_argument("--records", type=int, default=720)
    p.add_argument("--gate", type=int, action="append", default=[])
    p.add_argument("--keys", type=int, default=0, help="0: the crash suites' 13 keys")
    p.add_argument("--value-bytes", type=int, default=0, help="random bytes of state per key")
    args = p.parse_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    build(env, args)
    t0 = time.monotonic()
    result = env.execute(f"bed-faults-{args.backend}")
    acc = result.get_all_accumulator_results()
    report = {"seconds": round(time.monotonic() - t0, 1), "job_id": str(result.get_job_id())}
    report.update({k: v for k, v in acc.items() if _plain(v)})
    print("REPORT " + json.dumps(report, default=str), flush=True)


def _plain(value: Any) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True


if __name__ == "__main__":
    main(sys.argv[1:])
