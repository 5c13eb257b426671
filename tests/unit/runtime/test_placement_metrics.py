"""Job metrics count, per subtask-epoch, whether a subtask ran on the executor of its
previous epoch (the one its Spark task prefers) or moved."""

from __future__ import annotations

from streamstate.runtime.job_metrics import JobMetrics
from streamstate.runtime.protocol import SubtaskAck


def ack(subtask: int, executor: str | None, hit: bool) -> SubtaskAck:
    return SubtaskAck(stage=1, subtask=subtask, token=(0, 1), cache_hit=hit, executor=executor)


def test_same_executor_and_moves_are_counted_per_subtask_epoch():
    m = JobMetrics()
    for a in [
        ack(0, "executor_h1_0", False),  # first epoch: nothing to compare with
        ack(1, "executor_h2_1", False),
        ack(0, "executor_h1_0", True),
        ack(1, "executor_h1_0", False),  # moved: rebuilt on the other executor
        ack(0, "executor_h1_0", True),
        ack(1, "executor_h1_0", True),
    ]:
        m.absorb(1, a)
    assert m.stats["executor_kept"] == 3 and m.stats["executor_moved"] == 1
    assert m.stats["cache_hits"] == 3 and m.stats["cache_misses"] == 3
    acc = m.accumulators("job", None)
    assert acc["subtask-executors"] == {"1/0": "executor_h1_0", "1/1": "executor_h1_0"}


def test_without_executors_nothing_is_counted():
    m = JobMetrics()
    m.absorb(1, ack(0, None, False))
    m.absorb(1, ack(0, None, True))
    assert "executor_kept" not in m.stats and "executor_moved" not in m.stats
    assert "subtask-executors" not in m.accumulators("job", None)


def test_a_worker_finds_its_executor_on_its_ancestors_command_line():
    import subprocess
    import sys

    # a parent started as an executor JVM is (CoarseGrainedExecutorBackend's flags), and a
    # child process of it (as pyspark.daemon's workers are) asking where it runs
    child = (
        "import subprocess, sys; print(subprocess.run([sys.executable, '-c', "
        "'from streamstate.spark.placement import executor_location; "
        "print(executor_location())'], capture_output=True, text=True).stdout.strip())"
    )
    out = subprocess.run(
        [sys.executable, "-c", child, "--executor-id", "7", "--hostname", "10.0.0.5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "executor_10.0.0.5_7", out.stderr
    # outside an executor (local mode, the driver, this test): no location
    from streamstate.spark.placement import executor_location

    assert executor_location() is None
