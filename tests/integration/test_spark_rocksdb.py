"""The foundation's jobs, unchanged, on every state backend (heap and RocksDB), on Spark.

Each job runs with ``HashMapStateBackend`` and ``EmbeddedRocksDBStateBackend`` (full and
incremental checkpoints); the failure-injection test kills a worker mid-job on RocksDB
and compares output and final state with a failure-free run.
"""

from __future__ import annotations

import itertools
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
from streamstate.runtime import executor as executor_mod
from streamstate.runtime.state_reader import list_checkpoints, read_keyed_state
from streamstate.testing import FailOnce
from tests.integration.jobs import CountPerKey, count_job, final_counts, make_env, records
from tests.integration.test_spark_jobs import AllPrimitives

pytestmark = pytest.mark.spark

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


def _run(spark, where, local_dir, name, failure=None):
    env = make_env(spark, epoch_records=30)
    env.set_state_backend(backend_of(name, local_dir))
    env.enable_checkpointing(2500)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(where))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    ds = env.from_collection(DATA).key_by(lambda v: v[0]).process(CountPerKey()).uid("counter")
    if failure is not None:
        ds = ds.map(failure).name("fail-once")
    out = list(ds.execute_and_collect(name))
    chks = [c for c in list_checkpoints(str(where)) if c.valid]
    latest = max(chks, key=lambda c: c.checkpoint_id)
    state = read_keyed_state(latest.path, "counter", ValueStateDescriptor("count", Types.LONG()))
    return out, state


@pytest.mark.parametrize("name", BACKENDS[1:])
def test_rocksdb_failure_injection_matches_failure_free_run(
    spark, tmp_path, local_dir, monkeypatch, name
):
    ticks = itertools.count(1)
    monkeypatch.setattr(executor_mod, "_now_ms", lambda: next(ticks) * 1000)
    base_out, base_state = _run(spark, tmp_path / "base", local_dir, name)
    ticks2 = itertools.count(1)
    monkeypatch.setattr(executor_mod, "_now_ms", lambda: next(ticks2) * 1000)
    fail = FailOnce(str(tmp_path), epoch=5, subtask=1, mode="exit", after_records=3)
    out, state = _run(spark, tmp_path / "faulty", local_dir, name, failure=fail)
    assert fail.fired
    assert state == base_state == dict(Counter(k for k, _ in DATA))
    assert Counter(out) == Counter(base_out)
