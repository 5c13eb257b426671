"""Host kill suite (issue 27 item 7): subtasks run in subtask hosts, processes of their own
outside the Spark worker's process group, so killing "the workers" never kills a host.
Here the hosts (and their application's zygote) are SIGKILLed at chosen phases of an
epoch of a keyed running sum into a FileSink that commits on checkpoints:

* ``before``: between two epochs (from the driver, after the previous epoch was
  absorbed): every host of the job and the zygote; the next epoch finds none and the
  subtasks are rebuilt from their lineage (no failure);
* ``processing``: a host kills itself in the middle of an epoch's records, and also the
  zygote (``processing+zygote``): the task fails with SubtaskHostCrashed and the restart
  strategy restores the last checkpoint;
* ``commit``: a host kills itself while the epoch's state is committed (its operator
  state snapshot at a checkpoint);
* ``after-ack``: a host kills itself, and the zygote, right after it sent the epoch's
  outputs and acks (its epoch lock released), before the driver completed the epoch.

Every run's committed output equals the failure-free run's (the same job on the in-process
runner: no loss, no duplicate, the same order of each key's records), and
no host of the job outlives it: every host that ran one of its subtasks has ended once the
job's end stopped them.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from streamstate.datastream import CheckpointedFunction, KeyedProcessFunction, MapFunction
from streamstate.runtime.host_owner import running, start_time
from streamstate.runtime.job_status import JobObserver
from streamstate.spark.runner import join_host_stoppers
from streamstate.testing import TickingClock
from tests.faults import crash_job
from tests.support import envs
from tests.support.files import committed_lines
from tests.support.waits import wait_until

pytestmark = pytest.mark.spark

HOST_MODULE = "streamstate.runtime.host_process"
RECORDS = 240
KILL_EPOCH = 3
#: bounds how long a stopped host takes to end (a hang, not a speed)
END_WAIT_S = 60.0


def _once(marker_dir: str, name: str) -> bool:
    try:
        os.close(os.open(os.path.join(marker_dir, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _record_host(marker_dir: str) -> None:
    """Leave ``host-<pid>`` in ``marker_dir``: this host (and its zygote) ran the job."""
    pid, parent = os.getpid(), os.getppid()
    mark = {"pid": pid, "start": start_time(pid), "zygote": parent}
    tmp = os.path.join(marker_dir, f".{pid}.tmp")
    with open(tmp, "w") as f:
        json.dump(mark, f)
    os.replace(tmp, os.path.join(marker_dir, f"host-{pid}"))


def _kill_zygote() -> None:
    parent = os.getppid()  # a host forked by the zygote is its child
    with open(f"/proc/{parent}/cmdline", "rb") as f:
        assert b"zygote" in f.read(), "this host was not forked by a zygote"
    os.kill(parent, signal.SIGKILL)


class KillsItsHost(MapFunction, CheckpointedFunction):
    """Subtask 0 of the source stage: SIGKILLs its host once, at ``phase`` of epoch
    ``KILL_EPOCH`` (or later, for ``commit``: the first checkpoint from then on)."""

    def __init__(self, marker_dir: str, phase: str) -> None:
        self.marker_dir, self.phase = marker_dir, phase
        self.ctx: Any = None
        self.seen = 0

    def open(self, runtime_context: Any) -> None:
        self.ctx = runtime_context
        _record_host(self.marker_dir)

    def _mine(self) -> bool:
        return self.ctx.get_index_of_this_subtask() == 0 and self.ctx.epoch >= KILL_EPOCH

    def map(self, value: Any) -> Any:
        self.seen += 1
        if self.phase.startswith("processing") and self._mine() and self.seen % 7 == 3:
            if _once(self.marker_dir, "killed"):
                if self.phase == "processing+zygote":
                    _kill_zygote()
                os.kill(os.getpid(), signal.SIGKILL)
        return value

    def snapshot_state(self, context: Any) -> None:
        if not self._mine():
            return
        if self.phase == "commit" and context.get_checkpoint_id() is not None:
            if _once(self.marker_dir, "killed"):
                os.kill(os.getpid(), signal.SIGKILL)
        if self.phase == "after-ack" and _once(self.marker_dir, "killed"):
            threading.Thread(target=_kill_after_the_reply, daemon=True).start()

    def initialize_state(self, context: Any) -> None:
        pass


def _kill_after_the_reply() -> None:
    """Wait until this host's epoch is over (its outputs and acks sent: the host releases
    its epoch lock after the reply), then SIGKILL the zygote and this host."""
    # the zygote runs host_process as __main__: its _Host class is found by name
    host = next(
        o
        for o in gc.get_objects()
        if type(o).__name__ == "_Host" and type(o).__module__ in ("__main__", HOST_MODULE)
    )
    with host.lock:
        _kill_zygote()
        os.kill(os.getpid(), signal.SIGKILL)


class Line(MapFunction):
    """``crash_job.as_line`` in the keyed stage, recording that stage's hosts."""

    def __init__(self, marker_dir: str) -> None:
        self.marker_dir = marker_dir

    def open(self, runtime_context: Any) -> None:
        _record_host(self.marker_dir)

    def map(self, value: Any) -> Any:
        return crash_job.as_line(value)


def hosts_of(marker_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in marker_dir.glob("host-*")]


class KillsEveryHostBetweenEpochs(JobObserver):
    """After epoch ``KILL_EPOCH`` was absorbed (on the driver): SIGKILL every host of the job
    and the zygote."""

    def __init__(self, marker_dir: Path) -> None:
        self.marker_dir = marker_dir
        self.killed: list[int] = []

    def on_epoch(self, job_id: str, stats: Any) -> None:
        if stats.epoch != KILL_EPOCH:
            return
        marks = hosts_of(self.marker_dir)
        for pid in {m["zygote"] for m in marks} | {m["pid"] for m in marks}:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
                self.killed.append(pid)


def run(spark: Any, tmp_path: Path, phase: str) -> tuple[Any, Path, Path]:
    markers, out = tmp_path / "markers", tmp_path / "out"
    markers.mkdir()
    env = envs.make_env(2, spark=spark, max_records=20, restarts=2)
    env.set_clock(TickingClock())
    env.enable_checkpointing(2500)  # every 2-3 epochs
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    observer = KillsEveryHostBetweenEpochs(markers)
    if phase == "before":
        env.add_job_observer(observer)
    sums: Any = (
        env.from_collection(crash_job.data("files", RECORDS))
        .map(KillsItsHost(str(markers), phase))
        .uid("kill")
        .key_by(lambda v: v[0])
        .process(RunningSum())
        .uid("sum")
    )
    sums.map(Line(str(markers))).uid("line").sink_to(crash_job.file_sink_for(str(out))).uid("files")
    result = env.execute(f"host-kill-{phase}")
    if phase == "before":
        assert observer.killed, "no host was running after the kill epoch"
    elif phase != "none":
        assert (markers / "killed").exists()
    return result, markers, out


@pytest.fixture(scope="module")
def failure_free(tmp_path_factory):
    """The committed output of the same job without kills, on the in-process runner."""
    _, _, out = run(None, tmp_path_factory.mktemp("failure-free"), "none")
    lines = committed_lines(out)
    assert len(lines) == RECORDS
    return lines


class RunningSum(KeyedProcessFunction):
    """``crash_job.RunningSum`` without its driver-crash hook."""

    def open(self, ctx: Any) -> None:
        from streamstate.common import Types
        from streamstate.datastream.state import ValueStateDescriptor

        self.total = ctx.get_state(ValueStateDescriptor("total", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        t = (self.total.value() or 0) + value[1]
        self.total.update(t)
        yield value[1], value[0], t


@pytest.mark.parametrize(
    "phase", ["before", "processing", "processing+zygote", "commit", "after-ack"]
)
def test_a_host_killed_at_any_phase_of_an_epoch_changes_no_output(
    spark, failure_free, tmp_path, phase
):
    result, markers, out = run(spark, tmp_path, phase)
    assert committed_lines(out) == failure_free
    assert not [f for f in out.rglob(".*") if f.is_file()]  # nothing pending left
    restarts = result.get_accumulator_result("restarts")
    # a host gone between epochs is rebuilt from its lineage; one gone mid-epoch fails it
    assert restarts == (1 if phase in ("processing", "processing+zygote", "commit") else 0)
    # the job's end stops every host that ran one of its subtasks
    join_host_stoppers()
    hosts = [(m["pid"], m["start"]) for m in hosts_of(markers)]
    assert len(hosts) > 4  # the killed ones and their replacements

    def alive() -> list[int]:
        return [p for p, s in hosts if running(p) and start_time(p) == s]

    wait_until(
        lambda: not alive(), END_WAIT_S, lambda: f"hosts of the finished job alive: {alive()}"
    )
