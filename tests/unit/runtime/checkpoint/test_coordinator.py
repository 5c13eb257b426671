"""Checkpoint coordinator: triggering, lifecycle, pruning, failures, retention."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamstate.datastream.checkpoint_config import (
    CheckpointConfig,
    ExternalizedCheckpointCleanup,
)
from streamstate.errors import (
    CheckpointError,
    ConfigurationError,
    IllegalLifecycleTransition,
)
from streamstate.runtime.checkpoint.coordinator import (
    CheckpointCoordinator,
    CheckpointStatus,
    RetentionPolicy,
)
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.handles import KeyGroupsStateHandle
from streamstate.runtime.keygroups import KeyGroupRange

JOB = "job-c"


class Clock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def storage(tmp_path):
    s = FileSystemCheckpointStorageAccess(str(tmp_path))
    s.initialize_job(JOB)
    return s


def coordinator(storage, **kw) -> tuple[CheckpointCoordinator, Clock]:
    clock = Clock(kw.pop("now", 0))
    kw.setdefault("interval_ms", 1000)
    return CheckpointCoordinator(storage, clock=clock, **kw), clock


def run_checkpoint(coord: CheckpointCoordinator, storage, parallelism: int = 2):
    p = coord.trigger()
    for i in range(parallelism):
        h = storage.write_state(p.checkpoint_id, f"op/{i}", f"s{i}".encode())
        rng = KeyGroupRange(i * 64, i * 64 + 63)
        p.acknowledge("op", i, parallelism, 128, keyed=[KeyGroupsStateHandle(h, rng)])
    return coord.complete(p, source_offsets={"src": p.checkpoint_id})


# -- triggering --------------------------------------------------------------------------------


def test_should_trigger_honours_interval(storage):
    coord, clock = coordinator(storage, interval_ms=1000)
    assert not coord.should_trigger()
    clock.now = 999
    assert not coord.should_trigger()
    clock.now = 1000
    assert coord.should_trigger()
    p = coord.trigger()
    coord.complete(p)
    clock.now = 1500
    assert not coord.should_trigger()
    clock.now = 2000
    assert coord.should_trigger()
    # explicit now_ms wins over the clock
    assert not coord.should_trigger(now_ms=1999)


def test_should_trigger_honours_min_pause(storage):
    coord, clock = coordinator(storage, interval_ms=1000, min_pause_ms=800)
    clock.now = 1000
    p = coord.trigger()
    clock.now = 1900  # a slow checkpoint: completes 900 ms after the trigger
    coord.complete(p)
    clock.now = 2000  # interval elapsed since trigger, but only 100 ms since completion
    assert not coord.should_trigger()
    clock.now = 2699
    assert not coord.should_trigger()
    clock.now = 2700
    assert coord.should_trigger()


def test_disabled_interval_never_triggers(storage):
    coord, clock = coordinator(storage, interval_ms=-1)
    clock.now = 10**9
    assert not coord.should_trigger()
    assert not coord.periodic_checkpointing_enabled
    coord.trigger(is_savepoint=True)  # explicit triggers still possible


def test_max_concurrent(storage):
    coord, clock = coordinator(storage, interval_ms=10)
    clock.now = 100
    p = coord.trigger()
    assert not coord.should_trigger()
    with pytest.raises(CheckpointError, match="max concurrent"):
        coord.trigger()
    coord.abort(p, "test", count_as_failure=False)
    clock.now = 110  # the next periodic trigger is an interval after the aborted one
    assert coord.should_trigger()
    coord2, _ = coordinator(storage, max_concurrent=2)
    coord2.trigger()
    coord2.trigger()
    with pytest.raises(CheckpointError):
        coord2.trigger()


def test_ids_increase_and_skip_existing_directories(storage):
    coord, _ = coordinator(storage)
    assert [coord.trigger().checkpoint_id for _ in range(1)] == [1]
    storage.write_state(5, "leftover", b"x")  # half-written chk-5 of a previous run
    coord2, _ = coordinator(storage)
    assert coord2.trigger().checkpoint_id == 6
    coord3, _ = coordinator(storage, next_checkpoint_id=42)
    assert coord3.trigger().checkpoint_id == 42


# -- lifecycle ---------------------------------------------------------------------------------


def test_complete_stores_metadata(storage):
    coord, _ = coordinator(storage)
    md = run_checkpoint(coord, storage)
    assert storage.list_checkpoints() == [1]
    assert storage.load_metadata(1) == md
    assert md.job_id == JOB
    assert md.operator_states["op"].parallelism == 2
    assert md.source_offsets == {"src": 1}
    assert coord.latest_completed == md
    assert coord.pending == []


def test_lifecycle_misuse(storage):
    coord, _ = coordinator(storage, max_concurrent=3)
    p = coord.trigger()
    assert p.status is CheckpointStatus.PENDING
    coord.complete(p)
    assert p.status is CheckpointStatus.COMPLETED
    with pytest.raises(IllegalLifecycleTransition):
        coord.complete(p)
    with pytest.raises(IllegalLifecycleTransition):
        coord.abort(p, "late")
    with pytest.raises(IllegalLifecycleTransition):
        p.acknowledge("op", 0, 1, 128)
    with pytest.raises(IllegalLifecycleTransition):
        p._transition(CheckpointStatus.PENDING)

    q = coord.trigger()
    coord.abort(q, "boom")
    assert q.status is CheckpointStatus.ABORTED and q.failure_reason == "boom"
    with pytest.raises(IllegalLifecycleTransition):
        coord.complete(q)
    with pytest.raises(IllegalLifecycleTransition):
        q._transition(CheckpointStatus.COMPLETED)


def test_complete_requires_every_subtask(storage):
    coord, _ = coordinator(storage)
    p = coord.trigger()
    p.acknowledge("op", 1, 2, 128)
    with pytest.raises(CheckpointError, match=r"subtasks \[0\]"):
        coord.complete(p)
    with pytest.raises(CheckpointError, match="parallelism"):
        p.acknowledge("op", 0, 3, 128)
    with pytest.raises(CheckpointError, match="outside"):
        p.acknowledge("op", 2, 2, 128)
    p.acknowledge("op", 0, 2, 128)
    coord.complete(p)


def test_complete_builds_metadata_from_acks(storage):
    coord, clock = coordinator(storage, now=100)
    p = coord.trigger()
    h = storage.write_state(p.checkpoint_id, "op/0", b"x")
    p.acknowledge("op", 0, 1, 128, keyed=[KeyGroupsStateHandle(h, KeyGroupRange(0, 127))])
    clock.now = 350
    md = coord.complete(p, properties={"x": 1, "epoch": 7}, sink_state={"sink": [1]})
    loaded = storage.load_metadata(1)
    assert loaded.properties == {"x": 1, "epoch": 7} and loaded.sink_state == {"sink": [1]}
    assert md.operator_states["op"].subtasks[0].keyed[0].stream.size == 1
    stats = coord.stats.get(1)
    assert stats is not None and stats.status == "COMPLETED"
    assert (stats.trigger_ms, stats.end_ms, stats.epoch) == (100, 350, 7)
    assert stats.subtask_sizes == {"op": (1,)} and stats.state_size == 1


def test_retention_subsumes_completed_checkpoints(storage):
    coord, _ = coordinator(storage, num_retained=2)
    first = coord.trigger()
    coord.complete(first)
    for _ in range(2):
        run_checkpoint(coord, storage)
    assert first.status is CheckpointStatus.SUBSUMED
    assert storage.list_checkpoints() == [2, 3]
    assert [s.status for s in coord.stats.history()] == ["COMPLETED", "COMPLETED", "SUBSUMED"]
    with pytest.raises(IllegalLifecycleTransition):
        first._transition(CheckpointStatus.COMPLETED)


def test_stats_count_failures_and_keep_a_bounded_history(storage):
    from streamstate.runtime.checkpoint.stats import CheckpointStatsTracker

    coord, clock = coordinator(storage, stats=CheckpointStatsTracker(history_size=3))
    for i in range(4):
        p = coord.trigger()
        clock.now += 10
        if i % 2:
            coord.abort(p, f"boom {i}", count_as_failure=False)
        else:
            coord.complete(p)
    summary = coord.stats.summary()
    assert summary["counts"] == {
        "restored": 0,
        "total": 4,
        "in_progress": 0,
        "completed": 2,
        "failed": 2,
    }
    assert [h["id"] for h in summary["history"]] == [4, 3, 2]
    assert summary["latest"]["failed"]["failure_message"] == "boom 3"
    assert summary["latest"]["completed"]["id"] == 3


def test_abort_cleans_partial_files(storage, tmp_path):
    coord, _ = coordinator(storage)
    p = coord.trigger()
    storage.write_state(p.checkpoint_id, "op/0", b"partial")
    coord.abort(p, "subtask failed")
    assert not (tmp_path / JOB / "chk-1").exists()
    assert storage.list_checkpoints() == []


def test_store_failure_aborts(storage, monkeypatch):
    coord, _ = coordinator(storage, tolerable_failures=5)
    p = coord.trigger()

    def fail(md):
        raise OSError("disk full")

    monkeypatch.setattr(storage, "store_metadata", fail)
    with pytest.raises(OSError):
        coord.complete(p)
    assert p.status is CheckpointStatus.ABORTED
    assert coord.consecutive_failures == 1


# -- timeouts and failures ---------------------------------------------------------------------


def test_timeout(storage):
    coord, clock = coordinator(storage, timeout_ms=500)
    clock.now = 1000
    p = coord.trigger()
    clock.now = 1500
    assert not coord.is_expired(p)
    assert coord.abort_expired() == []
    clock.now = 1501
    assert coord.is_expired(p)
    assert coord.abort_expired() == [p]
    assert p.status is CheckpointStatus.ABORTED
    assert coord.consecutive_failures == 1


def test_tolerable_failures(storage):
    coord, _ = coordinator(storage, tolerable_failures=2)
    for expected_fail in [False, False, True]:
        coord.abort(coord.trigger(), "x")
        assert coord.should_fail_job() is expected_fail
    # a completed checkpoint resets the count
    coord.complete(coord.trigger())
    assert coord.consecutive_failures == 0 and not coord.should_fail_job()
    # aborts that are not the checkpoint's fault don't count
    coord.abort(coord.trigger(), "job failing", count_as_failure=False)
    assert coord.consecutive_failures == 0


def test_zero_tolerable_failures_fails_on_first(storage):
    coord, _ = coordinator(storage)
    coord.abort(coord.trigger(), "x")
    assert coord.should_fail_job()


def test_expired_checkpoint_files_stay_until_full_versions_are_written(storage, tmp_path):
    coord, clock = coordinator(storage, timeout_ms=500, tolerable_failures=1)
    p = coord.trigger()
    storage.write_state(p.checkpoint_id, "op/0", b"a state-version base")
    clock.now = 501
    assert coord.is_expired(p)
    coord.expire(p, clock.now, uncommitted=(3, 4))  # tolerated: no raise
    assert p.status is CheckpointStatus.ABORTED and coord.consecutive_failures == 1
    # the subtasks' lineages still read its files until they write full versions
    assert (tmp_path / JOB / "chk-1").exists()
    coord.discard_deferred()
    assert not (tmp_path / JOB / "chk-1").exists()


def test_expiry_beyond_the_tolerable_failures_names_the_uncommitted_epochs(storage):
    coord, clock = coordinator(storage, timeout_ms=500)
    p = coord.trigger()
    clock.now = 501
    with pytest.raises(
        CheckpointError, match=r"checkpoint 1 expired .* epochs 3\.\.4 is not committed"
    ):
        coord.expire(p, clock.now, uncommitted=(3, 4))


# -- retention ---------------------------------------------------------------------------------


def test_pruning_keeps_num_retained(storage):
    coord, _ = coordinator(storage, num_retained=2)
    run_checkpoint(coord, storage)
    assert storage.list_checkpoints() == [1]
    run_checkpoint(coord, storage)
    assert storage.list_checkpoints() == [1, 2]
    run_checkpoint(coord, storage)
    assert storage.list_checkpoints() == [2, 3]
    # a pending (not yet complete) checkpoint never causes pruning
    p = coord.trigger()
    assert storage.list_checkpoints() == [2, 3]
    coord.abort(p, "x")
    assert storage.list_checkpoints() == [2, 3]
    assert storage.latest_valid_checkpoint().checkpoint_id == 3


def test_default_retains_one(storage):
    coord, _ = coordinator(storage)
    for _ in range(3):
        run_checkpoint(coord, storage)
    assert storage.list_checkpoints() == [3]


@pytest.mark.parametrize(
    ("policy", "cancelled", "failed", "deleted"),
    [
        (RetentionPolicy.RETAIN_ON_CANCELLATION, True, False, False),
        (RetentionPolicy.RETAIN_ON_CANCELLATION, False, False, False),
        (RetentionPolicy.DELETE_ON_CANCELLATION, True, False, True),
        (RetentionPolicy.DELETE_ON_CANCELLATION, False, True, False),
        (RetentionPolicy.DELETE_ON_CANCELLATION, False, False, True),
        (RetentionPolicy.NO_EXTERNALIZED_CHECKPOINTS, False, False, True),
        (RetentionPolicy.NO_EXTERNALIZED_CHECKPOINTS, True, False, True),
        (RetentionPolicy.NO_EXTERNALIZED_CHECKPOINTS, False, True, True),
    ],
)
def test_on_job_terminal(storage, policy, cancelled, failed, deleted):
    coord, _ = coordinator(storage, retention=policy, num_retained=3)
    run_checkpoint(coord, storage)
    run_checkpoint(coord, storage)
    pending = coord.trigger()
    discarded = coord.on_job_terminal(cancelled, failed=failed)
    assert pending.status is CheckpointStatus.ABORTED
    assert coord.consecutive_failures == 0
    assert storage.list_checkpoints() == ([] if deleted else [1, 2])
    assert discarded == ([1, 2] if deleted else [])


def test_from_checkpoint_config(storage):
    cc = (
        CheckpointConfig()
        .set_checkpoint_interval(timedelta(seconds=2))
        .set_min_pause_between_checkpoints(timedelta(milliseconds=300))
        .set_checkpoint_timeout(timedelta(minutes=1))
        .set_tolerable_checkpoint_failure_number(3)
        .set_num_retained_checkpoints(4)
        .set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    )
    coord = CheckpointCoordinator.from_checkpoint_config(cc, storage, start_ms=0)
    assert (coord.interval_ms, coord.min_pause_ms, coord.timeout_ms) == (2000, 300, 60000)
    assert (coord.tolerable_failures, coord.num_retained) == (3, 4)
    assert coord.retention is RetentionPolicy.RETAIN_ON_CANCELLATION
    default = CheckpointCoordinator.from_checkpoint_config(CheckpointConfig(), storage)
    assert default.retention is RetentionPolicy.NO_EXTERNALIZED_CHECKPOINTS
    assert not default.periodic_checkpointing_enabled


def test_invalid_settings(storage):
    with pytest.raises(ConfigurationError):
        coordinator(storage, num_retained=0)
    with pytest.raises(ConfigurationError):
        coordinator(storage, timeout_ms=0)
    with pytest.raises(ConfigurationError):
        coordinator(storage, max_concurrent=0)


# -- the verdict at the end of a barrier epoch -------------------------------------------------


def _no_contents():
    raise AssertionError("an aborted checkpoint stores no contents")


def test_a_savepoint_whose_files_failed_is_aborted_without_counting(storage, tmp_path):
    from streamstate.runtime.checkpoint.savepoint import SavepointTarget
    from streamstate.runtime.graph import ExecutionPlan
    from streamstate.runtime.protocol import SubtaskAck

    coord, clock = coordinator(storage)
    target = SavepointTarget.create(str(tmp_path / "savepoints"), JOB)
    p = coord.trigger(is_savepoint=True, target=target)
    acks = {
        (0, 0): SubtaskAck(0, 0, (0, 1), savepoint_error="disk full"),
        (0, 1): SubtaskAck(0, 1, (0, 1), savepoint_error="no space"),
    }
    verdict = coord.conclude(
        p, ExecutionPlan([]), acks, _no_contents, job_id=JOB, uncommitted=(1, 1), now_ms=1
    )
    assert not verdict.completed and verdict.is_savepoint and not verdict.expired
    assert verdict.failure == "disk full; no space" and verdict.job_failure is None
    assert p.status is CheckpointStatus.ABORTED and coord.consecutive_failures == 0


@pytest.mark.parametrize("tolerable", [0, 1])
def test_an_expired_checkpoint_fails_the_job_only_beyond_the_tolerable_failures(
    storage, tolerable
):
    from streamstate.runtime.graph import ExecutionPlan

    coord, clock = coordinator(storage, timeout_ms=500, tolerable_failures=tolerable)
    p = coord.trigger()
    clock.now = 501
    verdict = coord.conclude(
        p, ExecutionPlan([]), {}, _no_contents, job_id=JOB, uncommitted=(3, 4), now_ms=clock.now
    )
    assert verdict.expired and not verdict.completed and coord.consecutive_failures == 1
    if tolerable:
        assert verdict.job_failure is None
    else:
        assert isinstance(verdict.job_failure, CheckpointError)
        assert "epochs 3..4 is not committed" in str(verdict.job_failure)
