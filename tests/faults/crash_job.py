"""A keyed job with an exactly-once FileSink, killed with SIGKILL where the test says.

``CRASH_AT=<point>:<n>`` kills this driver process at the ``n``-th occurrence of ``point``:

* ``record``: while epoch work runs (a record in a user function; with the in-process
  runner the driver runs the subtasks);
* ``metadata-write``: while ``_metadata`` is written (half a temp file, no rename);
* ``after-metadata``: after ``_metadata`` was stored, before the sinks commit;
* ``commit``: in the middle of a sink commit (after the first file's rename).

The hooks wrap the real code paths in this process only (fault injection, not mocks).
Run directly (``python crash_job.py OUT CHK``) or with ``streamstate run crash_job.py
--from-checkpoint CHK -- OUT CHK``.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from streamstate.common import Configuration, Encoder, Types
from streamstate.connectors import file_sink
from streamstate.datastream import (
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors import FileSink, RollingPolicy
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.checkpoint import coordinator, storage
from streamstate.testing import TickingClock

RECORDS = 600
KEYS = 13
def hit(point: str) -> None:
    """Count ``point`` in this process; SIGKILL it at the occurrence CRASH_AT names.

    The count lives on the ``sys`` module: user functions of this script travel pickled by
    value (each subtask gets its own copy of this module's globals), ``sys`` does not."""
    target_point, _, n = (os.environ.get("CRASH_AT") or "none:0").partition(":")
    if point != target_point:
        return
    seen = sys.__dict__.setdefault("_streamstate_crash_seen", [0])
    seen[0] += 1
    if seen[0] == int(n):
        os.kill(os.getpid(), signal.SIGKILL)


_atomic_write = storage.atomic_write


def atomic_write(fs: Any, path: str, data: bytes) -> None:
    if path.endswith("/_metadata") and os.environ.get("CRASH_AT", "").startswith("metadata-"):
        # killed while writing: half of a temp file exists, the rename never happens
        tmp = f"{path.rsplit('/', 1)[0]}/._metadata.crash.inprogress"
        with fs.open(tmp, "wb") as f:
            f.write(data[: len(data) // 2])
        hit("metadata-write")
    _atomic_write(fs, path, data)


storage.atomic_write = atomic_write
_complete = coordinator.CheckpointCoordinator.complete


def complete(self: Any, *args: Any, **kwargs: Any) -> Any:
    md = _complete(self, *args, **kwargs)
    hit("after-metadata")
    return md


coordinator.CheckpointCoordinator.complete = complete  # type: ignore[method-assign]
_commit_one = file_sink.FileCommitter._commit_one


def commit_one(tmp: str, final: str, cleanup: Any = ()) -> None:
    _commit_one(tmp, final, cleanup)
    hit("commit")


file_sink.FileCommitter._commit_one = staticmethod(commit_one)  # type: ignore[method-assign]


class RunningSum(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        hit("record")
        t = (self.total.value() or 0) + value[1]
        self.total.update(t)
        yield f"{value[0]},{value[1]},{t}"


def main(out: str, chk: str) -> None:
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", "40")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.set_clock(TickingClock())
    env.enable_checkpointing(2500)  # every 2-3 epochs (the clock ticks 1 s per reading)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(chk)
    cc.set_num_retained_checkpoints(2)
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    data = [(f"k{i % KEYS}", i) for i in range(RECORDS)]
    sink = (
        FileSink.for_row_format(out, Encoder.simple_string_encoder())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    env.from_collection(data).key_by(lambda v: v[0]).process(RunningSum()).sink_to(sink)
    env.execute("crash-job")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
