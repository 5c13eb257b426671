"""FileSink as in Flink: buckets (DateTimeBucketAssigner, BasePathBucketAssigner, custom),
DefaultRollingPolicy (part size, rollover and inactivity intervals, applied at record and
epoch boundaries), OnCheckpointRollingPolicy, parts that stay in progress across epochs
and checkpoints, exactly-once through a failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamstate.common import Encoder
from streamstate.connectors.buckets import BucketAssignerContext, java_pattern_to_strftime
from streamstate.connectors.file_sink import (
    FileCommitter,
    FileSinkOperator,
    RollingRules,
    RowPartFormat,
)
from streamstate.datastream.connectors import BucketAssigner, FileSink, RollingPolicy
from streamstate.datastream.connectors.file_system import (
    BasePathBucketAssigner,
    DateTimeBucketAssigner,
)
from streamstate.errors import ConfigurationError
from streamstate.runtime.operators.base import OperatorContext
from streamstate.runtime.watermarks import MAX_WATERMARK
from streamstate.testing import FailOnce, TickingClock
from tests.support import envs
from tests.support.files import committed_lines

HOUR = 3_600_000


def visible(out: Path) -> dict[str, list[str]]:
    """Committed part files (relative path -> lines)."""
    return {
        str(f.relative_to(out)): f.read_text().splitlines()
        for f in sorted(out.rglob("*"))
        if f.is_file() and not f.name.startswith(".")
    }


def hidden(out: Path) -> list[str]:
    return sorted(f.name for f in out.rglob(".*") if f.is_file()) if out.exists() else []


# -- bucket assigners ------------------------------------------------------------------------


def test_java_date_time_patterns_translate_to_strftime():
    assert java_pattern_to_strftime("yyyy-MM-dd--HH") == "%Y-%m-%d--%H"
    assert java_pattern_to_strftime("yyyy/MM/dd/HH-mm'h'") == "%Y/%m/%d/%H-%Mh"
    with pytest.raises(ConfigurationError, match="not supported"):
        java_pattern_to_strftime("yyyy-QQ")
    with pytest.raises(ConfigurationError, match="time zone"):
        DateTimeBucketAssigner("yyyy", "Mars/Olympus")


def test_date_time_bucket_assigner_formats_processing_time_in_its_zone():
    ctx = BucketAssignerContext(1_700_000_000_000, 0)  # 2023-11-14 22:13:20 UTC
    assert DateTimeBucketAssigner("yyyy-MM-dd--HH", "UTC").get_bucket_id("x", ctx) == (
        "2023-11-14--22"
    )
    assert DateTimeBucketAssigner("yyyy-MM-dd--HH", "GMT-08:00").get_bucket_id("x", ctx) == (
        "2023-11-14--14"
    )
    assert BucketAssigner.date_time_bucket_assigner("HH", "Asia/Tokyo").get_bucket_id("x", ctx) == (
        "07"
    )
    assert BasePathBucketAssigner().get_bucket_id("x", ctx) == ""


class ByParity(BucketAssigner):
    def get_bucket_id(self, element: Any, context: Any) -> str:
        return "even" if element % 2 == 0 else "odd"


def _run(out: Path, chk: Path, n: int, builder_fn: Any, *, parallelism: int = 1,
         interval_ms: int = HOUR, fail: FailOnce | None = None, max_records: int = 100) -> Any:  # fmt: skip
    env = envs.make_env(parallelism, max_records=max_records, restarts=2 if fail else None)
    env.set_clock(TickingClock(start_ms=1_700_000_000_000))
    env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(chk))
    ds = env.from_sequence(1, n)
    if fail is not None:
        ds = ds.map(fail)
    builder = builder_fn(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()))
    ds.sink_to(builder.build())
    return env.execute("file-sink-buckets")


def test_default_assigner_is_hourly_date_time_buckets_as_flink(tmp_path):
    out = tmp_path / "out"
    # the clock starts at 2023-11-14 22:13:20 UTC and ticks a second per reading
    _run(out, tmp_path / "chk", 50, lambda b: b.with_bucket_assigner(
        BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd--HH", "UTC")))  # fmt: skip
    assert [d.name for d in out.iterdir()] == ["2023-11-14--22"]
    assert sorted(committed_lines(out), key=int) == [str(i) for i in range(1, 51)]
    sink = FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()
    assert isinstance(sink.bucket_assigner, DateTimeBucketAssigner)
    assert sink.bucket_assigner.format_str == "yyyy-MM-dd--HH"


def test_custom_bucket_assigner_buckets_by_record(tmp_path):
    out = tmp_path / "out"
    _run(out, tmp_path / "chk", 40, lambda b: b.with_bucket_assigner(ByParity()), parallelism=2)
    files = visible(out)
    assert {k.split("/")[0] for k in files} == {"even", "odd"}
    for name, lines in files.items():
        assert all(int(x) % 2 == (0 if name.startswith("even") else 1) for x in lines)
    assert sorted(committed_lines(out), key=int) == [str(i) for i in range(1, 41)]
    with pytest.raises(ConfigurationError, match="BucketAssigner"):
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).with_bucket_assigner(
            "daily"
        )


# -- rolling policies in jobs ------------------------------------------------------------------


def _base(b: Any) -> Any:
    return b.with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())


@pytest.mark.parametrize(("rollover_ms", "parts"), [(1, 3), (24 * HOUR, 1)])
def test_rollover_interval_rolls_parts_at_epoch_boundaries(tmp_path, rollover_ms, parts):
    # 300 records, 3 epochs of 100, one checkpoint (the final one)
    out = tmp_path / "out"
    policy = RollingPolicy.default_rolling_policy(rollover_interval=rollover_ms)
    _run(out, tmp_path / "chk", 300, lambda b: _base(b).with_rolling_policy(policy))
    files = visible(out)
    assert len(files) == parts
    assert sorted(committed_lines(out), key=int) == [str(i) for i in range(1, 301)]
    assert hidden(out) == []  # merged segments are deleted on commit


def test_a_part_stays_in_progress_across_checkpoints_until_it_rolls(tmp_path):
    # a checkpoint every epoch, a part size of 700 bytes: parts span several epochs and
    # checkpoints (as Flink's DefaultRollingPolicy), and each part is complete once visible
    out = tmp_path / "out"
    policy = RollingPolicy.default_rolling_policy(part_size=700, rollover_interval=24 * HOUR)
    _run(out, tmp_path / "chk", 1000, lambda b: _base(b).with_rolling_policy(policy),
         interval_ms=1, max_records=50)  # fmt: skip
    files = visible(out)
    sizes = sorted(sum(len(x) + 1 for x in lines) for lines in files.values())
    assert all(s <= 700 for s in sizes) and sizes[-1] > 600
    assert sorted(committed_lines(out), key=int) == [str(i) for i in range(1, 1001)]


def test_on_checkpoint_policy_rolls_at_each_checkpoint(tmp_path):
    out = tmp_path / "out"
    policy = RollingPolicy.on_checkpoint_rolling_policy()
    result = _run(out, tmp_path / "chk", 300, lambda b: _base(b).with_rolling_policy(policy),
                  interval_ms=1)  # fmt: skip
    # a checkpoint at every epoch: 3 epochs with records (the final one has none)
    assert result.get_accumulator_result("checkpoints") >= 3
    assert len(visible(out)) == 3
    assert sorted(committed_lines(out), key=int) == [str(i) for i in range(1, 301)]


def test_exactly_once_through_a_failure_with_parts_spanning_epochs(tmp_path):
    out = tmp_path / "out"
    policy = RollingPolicy.default_rolling_policy(part_size=900, rollover_interval=24 * HOUR)
    fail = FailOnce(str(tmp_path), epoch=5, subtask=1, after_records=10)
    _run(out, tmp_path / "chk", 2000, lambda b: b.with_bucket_assigner(ByParity())
         .with_rolling_policy(policy), parallelism=2, interval_ms=2500, fail=fail,
         max_records=60)  # fmt: skip
    assert fail.fired
    assert sorted(committed_lines(out), key=int) == [str(i) for i in range(1, 2001)]
    assert hidden(out) == []


# -- the operator, epoch by epoch (time under the test's control) ------------------------------


class SinkDriver:
    """One FileSinkOperator subtask and its committer: epochs with the time the test says."""

    def __init__(self, out: Path, rules: RollingRules, assigner: Any = None) -> None:
        self.op = FileSinkOperator(
            str(out), RowPartFormat(Encoder.simple_string_encoder()), rules=rules,
            assigner=assigner or BucketAssigner.base_path_bucket_assigner(),
        )  # fmt: skip
        self.op.setup(OperatorContext("sink", 0, 1, 128, 0, {}))
        self.committer = FileCommitter(str(out))
        self.epoch = 0

    def epoch_at(self, now_ms: int, records: list[Any], checkpoint: bool = True,
                 end: bool = False) -> None:  # fmt: skip
        self.epoch += 1
        assert self.op.ctx is not None
        self.op.ctx.epoch, self.op.ctx.processing_time = self.epoch, now_ms
        if records:
            self.op.process_batch(records)
        if end:
            self.op.process_watermark(MAX_WATERMARK)
        self.op.snapshot_state(self.epoch if checkpoint else None, now_ms)
        self.committer.prepare(self.epoch, [self.op.sink_result()])
        if checkpoint:
            self.committer.commit(self.epoch)


def test_inactivity_interval_rolls_an_idle_bucket_only(tmp_path):
    out = tmp_path / "out"
    d = SinkDriver(out, RollingRules(inactivity_ms=5000), ByParity())
    d.epoch_at(0, [1, 2])  # odd and even parts open
    d.epoch_at(3000, [4])  # odd idle for 3 s
    assert visible(out) == {}
    d.epoch_at(6000, [6])  # odd idle for 6 s: rolls at this epoch's start; even was written at 3 s
    assert list(visible(out).values()) == [["1"]]
    d.epoch_at(12_000, [])  # even idle for 6 s
    assert sorted(visible(out).values()) == [["1"], ["2", "4", "6"]]
    assert hidden(out) == []


def test_rollover_interval_counts_from_the_part_creation(tmp_path):
    out = tmp_path / "out"
    d = SinkDriver(out, RollingRules(rollover_ms=10_000))
    for t in range(0, 10_000, 2000):
        d.epoch_at(t, [t])
    assert visible(out) == {}
    d.epoch_at(10_000, [10_000])  # the part is 10 s old: rolls before this record
    assert list(visible(out).values()) == [["0", "2000", "4000", "6000", "8000"]]
    d.epoch_at(11_000, [], end=True)
    assert sorted(visible(out).values())[0] == ["0", "2000", "4000", "6000", "8000"]
    assert sorted(committed_lines(out), key=int) == [str(t) for t in range(0, 10_001, 2000)]


def test_pending_parts_become_visible_only_on_commit(tmp_path):
    out = tmp_path / "out"
    d = SinkDriver(out, RollingRules(on_checkpoint=True))
    d.epoch_at(0, [1, 2], checkpoint=False)
    d.epoch_at(1000, [3], checkpoint=False)
    assert visible(out) == {} and len(hidden(out)) == 2  # two segments of one part
    d.epoch_at(2000, [4], checkpoint=True)
    assert list(visible(out).values()) == [["1", "2", "3", "4"]]
    assert hidden(out) == []


def test_restore_deletes_orphans_and_keeps_the_checkpointed_open_part(tmp_path):
    out = tmp_path / "out"
    d = SinkDriver(out, RollingRules(rollover_ms=HOUR))
    d.epoch_at(0, [1, 2])  # checkpoint 1: the open part has one segment
    state = d.committer.snapshot(1)
    d.epoch_at(1000, [3], checkpoint=False)  # a second segment, then the driver dies
    assert len(hidden(out)) == 2
    fresh = FileCommitter(str(out))
    fresh.restore(state)
    assert len(hidden(out)) == 1 and visible(out) == {}
    assert state["open"] and (out / state["open"][0][0]).exists()  # relative to the base path
