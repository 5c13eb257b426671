"""Rescaling a running job in place (JobClient.rescale), at epoch boundaries: a keyed job
with keyed, operator and broadcast state and event-time timers, rescaled 2 -> 4 -> 1 -> 3
while it runs, with a failure in a rescaling epoch, writes what a run without rescaling
writes and ends with the same state."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from streamstate.common import TimestampAssigner, Types, WatermarkStrategy
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import ExternalizedCheckpointCleanup, KeyedBroadcastProcessFunction
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import MapStateDescriptor
from streamstate.errors import RescaleError
from streamstate.runtime.job_status import EpochStats, JobObserver
from streamstate.runtime.state_reader import (
    passthrough_descriptor,
    read_keyed_state,
    read_operator_state,
)
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.opstate_jobs import MyFunction
from tests.support import envs
from tests.support.backends import fast_local_dir

KEYS = 7
DATA = [(f"k{i % KEYS}", i * 10, i) for i in range(1200)]
BUCKET_MS = 500
RULES = MapStateDescriptor("rules", Types.STRING(), Types.LONG())
BUCKETS = MapStateDescriptor("buckets", Types.LONG(), Types.LONG())


class At(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[1])


class BucketTimers(KeyedBroadcastProcessFunction):
    """Counts a key's records per 500 ms bucket (keyed MapState); an event-time timer at
    the bucket's end emits the count times the broadcast rule's factor."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        buckets = self.buckets
        record = value[0]
        bucket = record[1] // BUCKET_MS
        buckets.put(bucket, (buckets.get(bucket) or 0) + 1)
        ctx.timer_service().register_event_time_timer((bucket + 1) * BUCKET_MS - 1)

    def open(self, ctx: Any) -> None:
        self.buckets = ctx.get_map_state(BUCKETS)

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put(value[0], value[1])

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        bucket = timestamp // BUCKET_MS
        factor = ctx.get_broadcast_state(RULES).get("factor")
        count = self.buckets.get(bucket)
        self.buckets.remove(bucket)
        yield ctx.get_current_key(), bucket, count * factor


class RescaleAt(JobObserver):
    """Asks the running job to rescale after the epochs of ``schedule`` (epoch -> p)."""

    def __init__(self, schedule: dict[int, int]) -> None:
        self.schedule = schedule
        self.client: Any = None
        self.ready = threading.Event()
        self.futures: list[Any] = []

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        p = self.schedule.get(stats.epoch)
        if p is not None:
            assert self.ready.wait(30)
            self.futures.append(self.client.rescale(p))


def keyed_job(
    tmp_path: Path,
    backend: str,
    fail_epoch: int,
    spark: Any = None,
    max_records: int = 10,
    conf: dict[str, str] | None = None,
) -> tuple[Any, CollectSink]:
    conf = {"state.backend.type": backend, **(conf or {})}
    if backend == "rocksdb":
        conf["state.backend.rocksdb.localdir"] = fast_local_dir()
    env = envs.make_env(2, spark=spark, max_records=max_records, conf=conf)
    env.enable_checkpointing(1)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(At())
    records = (
        env.from_collection(DATA)
        .assign_timestamps_and_watermarks(strategy)
        .key_by(lambda v: v[0])
        .map(MyFunction())
        .uid("my-function")
        .map(FailOnce(str(tmp_path), epoch=fail_epoch, subtask=0, after_records=1))
        .uid("fail")
    )
    rules = env.from_collection([("factor", 3)]).broadcast(RULES)
    sink = CollectSink()
    (
        records.key_by(lambda v: v[0][0])
        .connect(rules)
        .process(BucketTimers())
        .uid("timers")
        .sink_to(sink)
    )
    return env, sink


def run(
    tmp_path: Path, backend: str, schedule: dict[int, int], fail_epoch: int = -1, **kw: Any
) -> Any:
    """Run the job, rescaling it after the epochs of ``schedule``; (output, result, the
    applied parallelisms, its last checkpoint). ``kw``: ``spark``, ``max_records``."""
    env, sink = keyed_job(tmp_path, backend, fail_epoch, **kw)
    rescaler = RescaleAt(schedule)
    env.add_job_observer(rescaler)
    client = env.execute_async("elastic")
    rescaler.client = client
    rescaler.ready.set()
    result = client.get_job_execution_result().result(300)
    applied = [f.result(1) for f in rescaler.futures]
    chk = result.get_accumulator_result("latest-checkpoint")
    return sink.get_results(), result, applied, chk


def final_state(chk: str) -> tuple[dict[Any, Any], int, dict[Any, Any]]:
    counts = read_keyed_state(chk, "my-function", passthrough_descriptor("perKeyCount", "reducing"))
    ops = read_operator_state(chk, "my-function")["perPartitionCount"]["subtasks"]
    buckets = read_keyed_state(chk, "timers", BUCKETS)
    return counts, sum(sum(x or []) for x in ops), buckets


@pytest.fixture
def clock():
    """Every driver clock read is 1 s later: a 1 ms interval checkpoints every epoch."""
    with use_default_clock(TickingClock()) as c:
        yield c


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_rescaled_2_4_1_3_with_a_failure_equals_a_run_without_rescaling(tmp_path, clock, backend):
    base_out, base_result, _, base_chk = run(tmp_path / "base", backend, {})
    (tmp_path / "elastic").mkdir()
    # rescales asked while epochs 3, 9 and 14 run: applied once their checkpoints
    # completed; the first epoch at parallelism 1 (epoch 10), the rescaling epoch, fails
    # once in subtask 0, after the subtask kept its key groups in place
    out, result, applied, chk = run(
        tmp_path / "elastic", backend, {3: 4, 9: 1, 14: 3}, fail_epoch=10
    )
    assert result.get_accumulator_result("rescales") == 3
    assert result.get_accumulator_result("restarts") == 1
    assert [a["timers"] for a in applied] == [4, 1, 3]
    assert [a["my-function"] for a in applied] == [4, 1, 3]
    # every bucket of every key fired once, with the broadcast rule's factor
    per_bucket = Counter((k, ts // BUCKET_MS) for k, ts, _ in DATA)
    assert Counter(base_out) == Counter((k, b, n * 3) for (k, b), n in per_bucket.items())
    assert Counter(out) == Counter(base_out)
    counts, op_total, buckets = final_state(chk)
    assert (counts, op_total, buckets) == final_state(base_chk)
    assert counts == dict(Counter(k for k, _, _ in DATA)) and op_total == len(DATA)
    # 2 -> 4 keeps 32 key groups and reads 96; the failed rescaling epoch's build is not
    # counted and its restart reads all 128 from the checkpoint; 1 -> 3 keeps 43, reads 85
    for uid in ("my-function", "timers"):
        assert kept_and_read(result, uid) == (32 + 43, 96 + 128 + 85)


def kept_and_read(result: Any, uid: str) -> tuple[int, int]:
    acc = result.get_all_accumulator_results()
    return acc.get(f"key_groups_kept.{uid}", 0), acc.get(f"key_groups_read.{uid}", 0)


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_subtasks_keep_the_key_groups_they_keep_and_read_only_those_they_gain(
    tmp_path, clock, backend
):
    """Max parallelism 128. 2 -> 4: subtask 0 keeps [0, 31] of [0, 63] and reads nothing;
    subtask 1 ([64, 127] -> [32, 63]) keeps nothing, reads 32; new subtasks 2 and 3 read 32
    each. 4 -> 1: subtask 0 keeps [0, 31], reads [32, 127]. 1 -> 3: subtask 0 keeps
    [0, 42]; subtasks 1 and 2 read 43 and 42. Without keeping state in place every
    subtask reads all its key groups (128 per rescale)."""
    out, result, applied, chk = run(tmp_path / "kept", backend, {3: 4, 9: 1, 14: 3})
    assert [a["timers"] for a in applied] == [4, 1, 3]
    for uid in ("my-function", "timers"):
        assert kept_and_read(result, uid) == (32 + 32 + 43, 96 + 96 + 85)
    (tmp_path / "reload").mkdir()
    reload_out, reload_result, _, reload_chk = run(
        tmp_path / "reload",
        backend,
        {3: 4, 9: 1, 14: 3},
        conf={"execution.rescale.keep-state-in-place": "false"},
    )
    for uid in ("my-function", "timers"):
        assert kept_and_read(reload_result, uid) == (0, 3 * 128)
    assert Counter(out) == Counter(reload_out)
    assert final_state(chk) == final_state(reload_chk)


def test_a_rescale_beyond_max_parallelism_is_refused_with_a_typed_error(tmp_path, clock):
    env, sink = keyed_job(tmp_path, "hashmap", -1)
    env.set_max_parallelism(8)
    rescaler = RescaleAt({})
    env.add_job_observer(rescaler)
    client = env.execute_async("refused")
    with pytest.raises(RescaleError, match="exceeds its max parallelism 8"):
        client.rescale(9)
    with pytest.raises(RescaleError, match="no operator with uid 'nope'"):
        client.rescale(operators={"nope": 2})
    client.get_job_execution_result().result(300)
    assert client.rescale  # the job ran to its end unchanged
