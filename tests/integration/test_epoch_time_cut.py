"""``execution.epoch.interval`` cuts epochs by time: a reader stops reading at the earlier of
its record budget and the interval (runtime/sliced_read.py).

No timing assertion: the chained map sleeps so that one slice of
``execution.epoch.slice-records`` records takes longer than the interval, so every reader
MUST stop after one slice per epoch, whatever the machine's speed, while the record budget
alone would read everything in one epoch. The outputs are compared with a run cut by
records only, and with a run that fails mid-way (exactly-once: equal outputs). Every
split reader kind is cut: sequence, collection, files (local runner), DataFrame rows
(Spark).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from streamstate.common import WatermarkStrategy
from streamstate.datastream import MapFunction
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.connectors.file_system import FileSource, StreamFormat
from streamstate.datastream.window import TumblingEventTimeWindows
from streamstate.runtime.job_status import JobObserver
from streamstate.testing import FailOnce
from tests.integration.jobs import CountPerKey
from tests.support import envs

N = 40  # 20 per reader subtask
SLICE = 4  # one slice sleeps 4 x 15 ms = 60 ms > the 40 ms interval: a cut after every slice
INTERVAL = "40 ms"
HUGE = 10**9


class Slow(MapFunction):
    def map(self, value: Any) -> tuple[str, int]:
        time.sleep(0.015)
        v = int(value) if isinstance(value, (int, str)) else value.v  # a number, line or Row
        return f"k{v % 3}", v


class SourceRecords(JobObserver):
    def __init__(self) -> None:
        self.per_epoch: list[int] = []

    def on_epoch(self, job_id: str, stats: Any) -> None:
        self.per_epoch.append(stats.source_records)


def numbers(env: Any, kind: str, spark: Any, tmp_path: Any) -> Any:
    """1..N from a split reader of ``kind``."""
    if kind == "sequence":
        return env.from_sequence(1, N)
    if kind == "collection":
        return env.from_collection(list(range(1, N + 1)))
    if kind == "files":
        d = tmp_path / "in"
        d.mkdir(exist_ok=True)
        for i in range(2):
            (d / f"{i}.txt").write_text("".join(f"{v}\n" for v in range(1 + i, N + 1, 2)))
        fmt = StreamFormat.text_line_format()
        return env.from_source(FileSource.for_record_stream_format(fmt, str(d)).build(), None, "f")
    assert kind == "dataframe"
    df = spark.createDataFrame([(v,) for v in range(1, N + 1)], "v int").repartition(2)
    return env.from_dataframe(df, staging_path=str(tmp_path / "staged"))


def run(
    spark: Any,
    tmp_path: Any,
    name: str,
    interval: str | None,
    failure: Any = None,
    kind: str = "sequence",
) -> tuple[Counter, list[int]]:
    conf = {"execution.epoch.slice-records": str(SLICE)}
    if interval is not None:
        conf["execution.epoch.interval"] = interval
    env = envs.make_env(2, spark=spark, max_records=HUGE, restarts=2, conf=conf)
    envs.checkpoint_every_epoch(env, tmp_path / name)
    seen = SourceRecords()
    env.add_job_observer(seen)
    ds = numbers(env, kind, spark, tmp_path).map(Slow())
    if kind == "collection":  # chained to its reader (parallelism 1), so the reader is slow
        ds = ds.set_parallelism(1)
    if failure is not None:
        ds = ds.map(failure).name("fail-once")
    sink = CollectSink()
    ds.key_by(lambda v: v[0]).process(CountPerKey()).uid("counter").sink_to(sink)
    env.execute(name)
    return Counter(sink.get_results()), seen.per_epoch


def expected() -> Counter:
    per_key = Counter(f"k{v % 3}" for v in range(1, N + 1))
    return Counter((k, c) for k, n in per_key.items() for c in range(1, n + 1))


#: the runner and the split readers tried on it
KINDS = [
    ("local", "sequence"),
    ("local", "collection"),
    ("local", "files"),
    ("spark", "sequence"),
    ("spark", "dataframe"),
]


@pytest.fixture(params=KINDS, ids=[f"{r}-{k}" for r, k in KINDS])
def on(request: Any) -> tuple[Any, str]:
    where, kind = request.param
    return (request.getfixturevalue("spark") if where == "spark" else None), kind


def test_epochs_by_records_only_without_an_interval(tmp_path):
    out, per_epoch = run(None, tmp_path, "records", None)
    assert out == expected()
    assert per_epoch[0] == N  # the budget covers everything: one epoch reads it all


def test_the_interval_cuts_a_fast_source_and_the_output_is_unchanged(on, tmp_path):
    spark, kind = on
    out, per_epoch = run(spark, tmp_path, "cut", INTERVAL, kind=kind)
    assert out == expected()
    # every reader stops after its first slice: SLICE records per reader and epoch
    data = [n for n in per_epoch if n]
    assert sum(data) == N
    assert max(data) <= 2 * SLICE
    assert len(data) >= N // (2 * SLICE)


def test_a_failure_mid_run_replays_to_the_failure_free_output(on, tmp_path):
    spark, kind = on
    fail = FailOnce(str(tmp_path), epoch=3, subtask=1, after_records=1)
    out, per_epoch = run(spark, tmp_path, "fail", INTERVAL, failure=fail, kind=kind)
    assert fail.fired
    assert out == expected()
    assert max(per_epoch) <= 2 * SLICE


def test_watermarks_and_event_time_windows_across_cut_epochs(tmp_path):
    """The chained timestamp assigner and watermark generator see several slices per
    epoch and the windows fire as without cuts: every (key, window) count is whole."""
    conf = {"execution.epoch.slice-records": str(SLICE), "execution.epoch.interval": INTERVAL}
    env = envs.make_env(2, max_records=HUGE, restarts=0, conf=conf)
    seen = SourceRecords()
    env.add_job_observer(seen)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        lambda e, t: e[1]
    )
    sink = CollectSink()
    (
        env.from_sequence(1, N)
        .map(Slow())
        .assign_timestamps_and_watermarks(strategy)
        .map(lambda e: (e[0], e[1] // 10, 1))
        .key_by(lambda e: (e[0], e[1]))
        .window(TumblingEventTimeWindows.of(10))
        .reduce(lambda a, b: (a[0], a[1], a[2] + b[2]))
        .sink_to(sink)
    )
    env.execute("windows")
    want = Counter((f"k{v % 3}", v // 10) for v in range(1, N + 1))
    assert sorted(sink.get_results()) == sorted((k, w, n) for (k, w), n in want.items())
    assert max(seen.per_epoch) <= 2 * SLICE
