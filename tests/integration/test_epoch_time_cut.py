"""``execution.epoch.interval`` cuts epochs by time: a reader stops reading at the earlier of
its record budget and the interval (runtime/sliced_read.py).

No timing assertion: the chained map sleeps so that one slice of
``execution.epoch.slice-records`` records takes longer than the interval, so every reader
MUST stop after one slice per epoch, whatever the machine's speed, while the record budget
alone would read everything in one epoch. The outputs are compared with a run cut by
records only, and with a run that fails mid-way (exactly-once: equal outputs).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from streamstate.datastream import MapFunction
from streamstate.datastream.connectors import CollectSink
from streamstate.runtime.job_status import JobObserver
from streamstate.testing import FailOnce
from tests.integration.jobs import CountPerKey
from tests.support import envs

N = 40  # 20 per reader subtask
SLICE = 4  # one slice sleeps 4 x 15 ms = 60 ms > the 40 ms interval: a cut after every slice
INTERVAL = "40 ms"
HUGE = 10**9


class Slow(MapFunction):
    def map(self, value: int) -> tuple[str, int]:
        time.sleep(0.015)
        return f"k{value % 3}", value


class SourceRecords(JobObserver):
    def __init__(self) -> None:
        self.per_epoch: list[int] = []

    def on_epoch(self, job_id: str, stats: Any) -> None:
        self.per_epoch.append(stats.source_records)


def run(
    spark: Any, tmp_path: Any, name: str, interval: str | None, failure: Any = None
) -> tuple[Counter, list[int]]:
    conf = {"execution.epoch.slice-records": str(SLICE)}
    if interval is not None:
        conf["execution.epoch.interval"] = interval
    env = envs.make_env(2, spark=spark, max_records=HUGE, restarts=2, conf=conf)
    envs.checkpoint_every_epoch(env, tmp_path / name)
    seen = SourceRecords()
    env.add_job_observer(seen)
    ds = env.from_sequence(1, N).map(Slow())
    if failure is not None:
        ds = ds.map(failure).name("fail-once")
    sink = CollectSink()
    ds.key_by(lambda v: v[0]).process(CountPerKey()).uid("counter").sink_to(sink)
    env.execute(name)
    return Counter(sink.get_results()), seen.per_epoch


def expected() -> Counter:
    per_key = Counter(f"k{v % 3}" for v in range(1, N + 1))
    return Counter((k, c) for k, n in per_key.items() for c in range(1, n + 1))


@pytest.fixture(params=["local", "spark"])
def runner(request: Any) -> Any:
    return request.getfixturevalue("spark") if request.param == "spark" else None


def test_epochs_by_records_only_without_an_interval(tmp_path):
    out, per_epoch = run(None, tmp_path, "records", None)
    assert out == expected()
    assert per_epoch[0] == N  # the budget covers everything: one epoch reads it all


def test_the_interval_cuts_a_fast_source_and_the_output_is_unchanged(runner, tmp_path):
    out, per_epoch = run(runner, tmp_path, "cut", INTERVAL)
    assert out == expected()
    # every reader stops after its first slice: SLICE records per reader and epoch
    data = [n for n in per_epoch if n]
    assert sum(data) == N
    assert max(data) <= 2 * SLICE
    assert len(data) >= N // (2 * SLICE)


def test_a_failure_mid_run_replays_to_the_failure_free_output(runner, tmp_path):
    fail = FailOnce(str(tmp_path), epoch=3, subtask=1, after_records=1)
    out, per_epoch = run(runner, tmp_path, "fail", INTERVAL, failure=fail)
    assert fail.fired
    assert out == expected()
    assert max(per_epoch) <= 2 * SLICE
