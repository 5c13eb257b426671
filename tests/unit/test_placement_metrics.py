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
