"""Every finish path commits what it promised, or fails loudly with the data kept (issue 17)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from streamstate.common import Encoder, RestartStrategies
from streamstate.datastream import CheckpointingMode
from streamstate.datastream.connectors import CollectSink, FileSink
from streamstate.errors import CheckpointError, JobExecutionError
from tests.support import envs
from tests.support.files import committed_lines

DATA = list(range(1200))


class StoppingClock:
    """Advances 1 s per reading for the first ``moving`` readings, then stands still: every
    checkpoint triggered while it moves expires (timeout 500 ms), later ones complete."""

    def __init__(self, moving: int) -> None:
        self.readings = 0
        self.moving = moving

    def __call__(self) -> int:
        self.readings += 1
        return 1_000_000 + min(self.readings, self.moving) * 1000


def job(tmp_path: Any, clock: Any, tolerable: int, max_epochs: int | None = None) -> Any:
    env = envs.make_env(max_records=75, max_epochs=max_epochs)  # 1200 records: 16 epochs
    env.set_clock(clock)
    env.enable_checkpointing(1, CheckpointingMode.EXACTLY_ONCE)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    cc.set_checkpoint_timeout(timedelta(milliseconds=500))
    cc.set_tolerable_checkpoint_failure_number(tolerable)
    env.set_restart_strategy(RestartStrategies.no_restart())
    collect = CollectSink()
    ds = env.from_collection(DATA).map(lambda v: v)
    ds.sink_to(collect)
    files = tmp_path / "files"
    ds.sink_to(FileSink.for_row_format(str(files), Encoder.simple_string_encoder()).build())
    return env, collect, files


def in_progress(files: Any) -> list[str]:
    """Hidden in-progress (and rolled, not yet committed) part files in every bucket."""
    if not files.exists():
        return []
    return [p.name for p in files.rglob(".*") if p.name.endswith((".inprogress", ".pending"))]


def test_a_job_whose_checkpoints_expired_takes_a_final_checkpoint(tmp_path):
    # every checkpoint of the 16 input epochs expires (within the tolerable number); the
    # job then takes a final checkpoint, which completes: everything is committed, once
    env, collect, files = job(tmp_path, StoppingClock(moving=40), tolerable=100)
    result = env.execute("final-checkpoint")
    assert result.get_accumulator_result("checkpoints_failed") >= 10
    assert result.get_accumulator_result("checkpoints") >= 1
    assert sorted(collect.get_results()) == DATA
    assert sorted(int(x) for x in committed_lines(files)) == DATA and in_progress(files) == []


def test_a_job_that_cannot_commit_fails_and_keeps_its_output(tmp_path):
    # no checkpoint can ever complete: the job must not report success with nothing
    # committed (issue 17: 0 of 1200 records, 16 in-progress files); it fails, naming why,
    # and leaves the uncommitted output for a restore to decide
    env, collect, files = job(tmp_path, StoppingClock(moving=10**9), tolerable=20)
    with pytest.raises(JobExecutionError, match="tolerable-failed-checkpoints") as ei:
        env.execute("cannot-commit")
    assert isinstance(ei.value.__cause__, CheckpointError)
    assert collect.get_results() == []  # exactly-once: nothing published
    assert sorted(int(x) for x in committed_lines(files)) == []
    assert len(in_progress(files)) >= 16  # kept, not deleted


def test_max_epochs_is_a_stop_that_commits(tmp_path):
    # a checkpoint interval longer than the job: no periodic checkpoint before the stop
    env, collect, files = job(tmp_path, StoppingClock(moving=0), tolerable=0, max_epochs=4)
    env.get_checkpoint_config().set_checkpoint_interval(timedelta(hours=1))
    result = env.execute("max-epochs")
    assert result.get_accumulator_result("checkpoints") == 1
    assert sorted(collect.get_results()) == DATA[:300]  # 4 epochs of 75, committed
    assert sorted(int(x) for x in committed_lines(files)) == DATA[:300]
