"""Recovery on the in-process runner: failures, retained checkpoints, rescaling, corruption."""

from __future__ import annotations

import glob
import logging
import os
from collections import Counter
from functools import partial
from typing import Any

import pytest

from streamstate.common import Configuration, Types
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import (
    CheckpointingMode,
    ExternalizedCheckpointCleanup,
    JobManagerCheckpointStorage,
    KeyedProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.errors import (
    CorruptCheckpointError,
    JobExecutionError,
    StateSizeExceededError,
)
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.support import envs

N = 60
KEYS = 7


class CountPerKey(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield value[0], c


def to_record(i: int) -> tuple[str, int]:
    return f"k{i % KEYS}", i


make_env = partial(envs.make_env, max_records=5)


def build_job(env, fail: Any = None):
    """sequence 0..N-1 -> (key, i) -> [FailOnce] -> key_by -> count per key -> collect."""
    ds = env.from_sequence(0, N - 1).map(to_record).uid("to-record")
    if fail is not None:
        ds = ds.map(fail).uid("fail")
    counts = ds.key_by(lambda r: r[0]).process(CountPerKey()).uid("count")
    sink = CollectSink()
    counts.sink_to(sink)
    return sink


def run(env, fail: Any = None) -> tuple[list[Any], Any]:
    sink = build_job(env, fail)
    result = env.execute()
    return sink.get_results(), result


def final_counts(out: list[tuple[str, int]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for k, c in out:
        counts[k] = max(counts.get(k, 0), c)
    return counts


EXPECTED_COUNTS = dict(Counter(to_record(i)[0] for i in range(N)))


@pytest.fixture(scope="module")
def baseline() -> list[tuple[str, int]]:
    out, result = run(make_env())
    assert result.get_accumulator_result("restarts") == 0
    assert final_counts(out) == EXPECTED_COUNTS
    assert sorted(out) == sorted(
        (k, c) for k, n in EXPECTED_COUNTS.items() for c in range(1, n + 1)
    )
    return out


@pytest.fixture
def clock(monkeypatch):
    """A deterministic driver clock: every reading advances ``step`` ms (default 1 s).

    With ``enable_checkpointing(interval)`` the checkpoint pattern over epochs then depends
    only on the interval, never on how fast the epochs ran.
    """
    with use_default_clock(TickingClock()) as c:
        yield c


def fs_checkpointing(env, tmp_path, interval: int = 1, mode: Any = None, retain: bool = False):
    env.enable_checkpointing(interval, mode)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    if retain:
        cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    return cc


# -- a failure in a chosen epoch / subtask ---------------------------------------------------


@pytest.mark.parametrize(
    "interval, epoch, subtask, after",
    [
        (1, 3, 1, 2),  # a checkpoint at every epoch boundary
        # checkpoints at epochs 1, 3, 5: the failure aborts the 3rd, epoch 4 is replayed
        (2500, 5, 0, 0),
        (10**9, 2, 1, 1),  # no checkpoint before the failure: restart from the beginning
    ],
)
def test_exactly_once_after_a_failure(tmp_path, clock, baseline, interval, epoch, subtask, after):
    env = make_env()
    fs_checkpointing(env, tmp_path, interval)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    fail = FailOnce(str(tmp_path), epoch=epoch, subtask=subtask, after_records=after)
    out, result = run(env, fail)
    assert fail.fired
    assert result.get_accumulator_result("restarts") == 1
    assert out == baseline
    assert final_counts(out) == EXPECTED_COUNTS


@pytest.mark.parametrize("interval, duplicates", [(1, False), (2500, True)])
def test_at_least_once_after_a_failure(tmp_path, clock, baseline, interval, duplicates):
    # 10 epochs of 6 records; with interval 2500 checkpoints are at epochs 1, 3, 5, 7, ...:
    # epoch 6 completed (and became visible) without one, so the failure in 7 replays it
    env = make_env(max_records=3)
    fs_checkpointing(env, tmp_path, interval, CheckpointingMode.AT_LEAST_ONCE)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    fail = FailOnce(str(tmp_path), epoch=7, subtask=0, after_records=1)
    out, result = run(env, fail)
    assert fail.fired and result.get_accumulator_result("restarts") == 1
    extra = Counter(out) - Counter(baseline)
    assert not Counter(baseline) - Counter(out)  # a superset, as multisets
    assert bool(extra) is duplicates  # replayed epochs were already visible
    assert final_counts(out) == EXPECTED_COUNTS


# -- resume from a retained checkpoint ------------------------------------------------------


def test_resume_from_retained_checkpoint(tmp_path, clock, baseline):
    env = make_env(max_epochs=3)
    fs_checkpointing(env, tmp_path, retain=True)
    first, r1 = run(env)
    latest = r1.get_accumulator_result("latest-checkpoint")
    assert latest and os.path.exists(os.path.join(latest.removeprefix("file://"), "_metadata"))
    assert r1.get_accumulator_result("epochs") == 3
    assert 0 < len(first) < N

    env2 = make_env()
    fs_checkpointing(env2, tmp_path)
    env2.set_restore_path(latest)
    second, _ = run(env2)
    assert Counter(first) + Counter(second) == Counter(baseline)
    assert len(first) + len(second) == N  # no duplicates
    assert first + second == baseline


def test_resume_via_configuration_key(tmp_path, clock, baseline):
    env = make_env(max_epochs=2)
    fs_checkpointing(env, tmp_path, retain=True)
    first, r1 = run(env)
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", "5")
    conf.set_string("execution.state-recovery.path", r1.get_accumulator_result("latest-checkpoint"))
    env2 = StreamExecutionEnvironment.get_execution_environment(conf)
    env2.set_parallelism(2)
    second, _ = run(env2)
    assert first + second == baseline


def test_rescale_1_to_3_to_2_via_retained_checkpoints(tmp_path, clock, baseline):
    outputs = []
    restore = None
    for parallelism, max_epochs in [(1, 2), (3, 5), (2, None)]:
        env = make_env(parallelism, max_records=4, max_epochs=max_epochs)
        fs_checkpointing(env, tmp_path, retain=True)
        if restore is not None:
            env.set_restore_path(restore)
        out, result = run(env)
        outputs.append(out)
        restore = result.get_accumulator_result("latest-checkpoint")
        assert restore is not None
    assert all(outputs)
    merged = [r for out in outputs for r in out]
    assert Counter(merged) == Counter(baseline)  # every (key, count) exactly once
    assert final_counts(merged) == EXPECTED_COUNTS


# -- corrupt checkpoints --------------------------------------------------------------------


class CorruptNewestThenFail(MapFunction):
    """In ``epoch`` (subtask 0), truncate the newest checkpoint's ``_metadata``, then fail once."""

    def __init__(self, chk_dir: str, marker_dir: str, epoch: int) -> None:
        self.chk_dir = chk_dir
        self.fail = FailOnce(marker_dir, epoch=epoch, subtask=0, name="corrupt")
        self.epoch = epoch
        self.corrupted: str | None = None

    def open(self, runtime_context):
        self.fail.open(runtime_context)
        self.ctx = runtime_context

    def map(self, value):
        if (
            self.ctx.get_index_of_this_subtask() == 0
            and getattr(self.ctx, "epoch", 0) == self.epoch
            and not self.fail.fired
        ):
            metas = glob.glob(os.path.join(self.chk_dir, "*", "chk-*", "_metadata"))
            newest = max(metas, key=lambda p: int(p.split("chk-")[-1].split(os.sep)[0]))
            with open(newest, "r+b") as f:
                f.truncate(max(1, os.path.getsize(newest) // 2))
        return self.fail.map(value)


def test_corrupt_latest_checkpoint_falls_back_to_the_previous_one(
    tmp_path, clock, baseline, caplog
):
    env = make_env()
    cc = fs_checkpointing(env, tmp_path)
    cc.set_num_retained_checkpoints(2)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    fail = CorruptNewestThenFail(str(tmp_path / "chk"), str(tmp_path), epoch=5)
    with caplog.at_level(logging.INFO, logger="streamstate"):
        out, result = run(env, fail)
    assert fail.fail.fired
    assert result.get_accumulator_result("restarts") == 1
    assert result.get_accumulator_result("first-failure").startswith("InjectedFailure")
    assert "skipping checkpoint 4" in caplog.text  # the truncated one (checkpoint of epoch 4)
    assert "from checkpoint 3" in caplog.text
    assert final_counts(out) == EXPECTED_COUNTS
    assert out == baseline


def test_restore_from_missing_path_is_a_corrupt_checkpoint_error(tmp_path):
    missing = str(tmp_path / "no-such-checkpoint")
    env = make_env()
    env.set_restore_path(missing)
    with pytest.raises(CorruptCheckpointError) as ei:
        run(env)
    assert missing in str(ei.value)


def test_restore_from_truncated_metadata_is_a_corrupt_checkpoint_error(tmp_path, clock):
    env = make_env(max_epochs=2)
    fs_checkpointing(env, tmp_path, retain=True)
    _, r1 = run(env)
    latest = r1.get_accumulator_result("latest-checkpoint")
    meta = os.path.join(latest.removeprefix("file://"), "_metadata")
    with open(meta, "r+b") as f:
        f.truncate(10)
    env2 = make_env()
    env2.set_restore_path(latest)
    with pytest.raises(CorruptCheckpointError) as ei:
        run(env2)
    assert latest.removeprefix("file://") in str(ei.value)


# -- in-memory checkpoint storage ------------------------------------------------------------


class BigState(KeyedProcessFunction):
    def open(self, ctx):
        self.blob = ctx.get_state(ValueStateDescriptor("blob"))

    def process_element(self, value, ctx):
        self.blob.update("x" * 4096)
        yield value


def test_state_larger_than_memory_storage_limit_fails_the_job():
    env = make_env(1)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage(
        JobManagerCheckpointStorage(max_state_size=1024)
    )
    env.set_restart_strategy(RestartStrategies.no_restart())
    sink = CollectSink()
    env.from_sequence(1, 3).key_by(lambda v: v).process(BigState()).sink_to(sink)
    with pytest.raises(JobExecutionError) as ei:
        env.execute()
    chain = []
    e: BaseException | None = ei.value
    while e is not None:
        chain.append(e)
        e = e.__cause__ or e.__context__
    err = next(x for x in chain if isinstance(x, StateSizeExceededError))
    assert "1024" in str(err)
    assert sink.get_results() == []  # nothing was committed


def test_small_state_fits_memory_storage(baseline):
    env = make_env()
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage(JobManagerCheckpointStorage())
    out, result = run(env)
    assert result.get_accumulator_result("checkpoints") >= 1
    assert out == baseline
