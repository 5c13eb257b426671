"""The foundation's jobs, unchanged, on every state backend (heap and RocksDB), on Spark.

Each job runs with ``HashMapStateBackend`` and ``EmbeddedRocksDBStateBackend`` (full and
incremental checkpoints); the failure-injection test kills a worker mid-job on RocksDB
and compares output and final state with a failure-free run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter

import pytest

from streamstate.common import Types
from streamstate.datastream import (
    EmbeddedRocksDBStateBackend,
    ExternalizedCheckpointCleanup,
    HashMapStateBackend,
)
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.state_reader import read_keyed_state
from streamstate.testing import FailOnce
from tests.integration.jobs import count_job, final_counts, make_env, records
from tests.integration.test_spark_jobs import AllPrimitives
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()

BACKENDS = ["hashmap", "rocksdb-full", "rocksdb-incremental"]


def backend_of(name: str, local_dir: str) -> object:
    if name == "hashmap":
        return HashMapStateBackend()
    b = EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=name.endswith("incremental"))
    b.set_db_storage_paths(local_dir)
    return b


@pytest.fixture
def local_dir():
    """RocksDB directories on tmpfs when there is one (each open syncs metadata files)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    d = tempfile.mkdtemp(prefix="streamstate-it-rocksdb-", dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("name", BACKENDS)
def test_keyed_count_on_every_backend(spark, tmp_path, local_dir, name):
    data = records(300, 29)
    env = make_env(spark, epoch_records=40)
    env.set_state_backend(backend_of(name, local_dir))
    env.enable_checkpointing(1)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    sink = count_job(env, data)
    result = env.execute(f"count-{name}")
    out = sink.get_results()
    expected = Counter(k for k, _ in data)
    assert len(out) == len(data) and final_counts(out) == dict(expected)
    for k, n in expected.items():
        assert sorted(c for kk, c in out if kk == k) == list(range(1, n + 1))
    acc = result.get_all_accumulator_results()
    state = read_keyed_state(
        acc["latest-checkpoint"], "counter", ValueStateDescriptor("count", Types.LONG())
    )
    assert state == dict(expected)


@pytest.mark.parametrize("name", BACKENDS[1:])
def test_all_primitives_on_rocksdb(spark, local_dir, name):
    data = [("a", 1), ("b", 2), ("a", 3), ("a", 1), ("b", 5)] * 8
    env = make_env(spark, epoch_records=7)
    env.set_state_backend(backend_of(name, local_dir))
    env.enable_checkpointing(1)
    out = list(
        env.from_collection(data)
        .key_by(lambda v: v[0])
        .process(AllPrimitives())
        .execute_and_collect()
    )
    last = {k: (items, seen, total) for k, items, seen, total, _ in out}
    assert last["a"] == (sorted([1, 3, 1] * 8), {1: 16, 3: 8}, 40)
    assert last["b"] == (sorted([2, 5] * 8), {2: 8, 5: 8}, 56)


DATA = records(240, 17)


def _run(spark, where, local_dir, name, failure=None, data=DATA, **conf):
    env = make_env(spark, epoch_records=30, **conf)
    env.set_state_backend(backend_of(name, local_dir))
    env.enable_checkpointing(1)  # a checkpoint every epoch
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(where))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    sink = count_job(env, data, pre=failure)
    acc = env.execute(name).get_all_accumulator_results()
    state = read_keyed_state(
        acc["latest-checkpoint"], "counter", ValueStateDescriptor("count", Types.LONG())
    )
    return sink.get_results(), state, acc


@pytest.mark.parametrize("name", BACKENDS[1:])
def test_rocksdb_failure_injection_matches_failure_free_run(spark, tmp_path, local_dir, name):
    base_out, base_state, base_acc = _run(spark, tmp_path / "base", local_dir, name)
    fail = FailOnce(str(tmp_path), epoch=5, subtask=1, mode="exit", after_records=3)
    out, state, acc = _run(spark, tmp_path / "faulty", local_dir, name, failure=fail)
    assert fail.fired and acc["restarts"] == 1
    assert state == base_state == dict(Counter(k for k, _ in DATA))
    assert Counter(out) == Counter(base_out)
    # the failure-free run kept its databases open between epochs: nothing was read back
    assert base_acc.get("state_restores_reused", 0) > 0
    if name.endswith("incremental"):
        # after the failure, the restarted subtasks found the checkpoint's local copies
        assert acc.get("state_restores_local", 0) >= 1
        assert _shared_files(tmp_path / "faulty")


def _shared_files(where):
    return [p for p in where.rglob("shared/*") if p.is_file()]


def test_incremental_checkpoint_restores_remotely_on_a_fresh_worker_disk(spark, tmp_path):
    """Resume a job from its retained incremental checkpoint with an empty local directory:
    the files come from checkpoint storage (the remote path), and the counts continue."""
    dirs = [tempfile.mkdtemp(prefix="streamstate-it-rocksdb-") for _ in range(2)]
    try:
        _, state1, acc1 = _run(spark, tmp_path / "one", dirs[0], "rocksdb-incremental")
        assert _shared_files(tmp_path / "one")
        extra = records(60, 17)
        _, state2, acc2 = _run(
            spark,
            tmp_path / "two",
            dirs[1],
            "rocksdb-incremental",
            data=DATA + extra,
            **{"execution.state-recovery.path": acc1["latest-checkpoint"]},
        )
        assert acc2.get("state_restores_remote", 0) >= 1
        assert state2 == dict(Counter(k for k, _ in DATA + extra))
        assert state1 == dict(Counter(k for k, _ in DATA))
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
