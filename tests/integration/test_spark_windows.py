"""Windows on Spark: each job with a failure injected mid-run equals its failure-free run.

* a per-key event-time tumbling window count over out-of-order data with allowed
  lateness and a late-data side output (user error, then a crashed Python worker);
* event-time session windows that merge (a crashed worker);
* a count window (a user error);
* the tumbling window count on the RocksDB backend (full and incremental
  checkpoints) with a crashed worker, equal to the failure-free heap run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from typing import Any

import pytest

from streamstate.datastream import EmbeddedRocksDBStateBackend, ExternalizedCheckpointCleanup
from streamstate.datastream.connectors import CollectSink
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.jobs import make_env
from tests.integration.window_jobs import (
    count_windows,
    out_of_order_events,
    session_events,
    sessions,
    strategy,
    tumbling_count,
)
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()

EVENTS = out_of_order_events(240)


@pytest.fixture
def epoch_clock() -> Any:
    with use_default_clock(TickingClock()) as clock:
        yield clock


def checkpointed(env: Any, tmp_path: Any, name: str) -> None:
    env.enable_checkpointing(1)  # due at every epoch boundary
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / name))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)


def timestamped(env: Any, data: Any, fail: Any = None, bound_ms: int = 2_000) -> Any:
    ds = env.from_collection(data).assign_timestamps_and_watermarks(strategy(bound_ms))
    ds.set_parallelism(1)
    if fail is not None:
        ds = ds.map(fail).name("inject")
        ds.set_parallelism(1)
    return ds


def run_tumbling(env: Any, fail: Any = None) -> tuple[list[Any], list[Any]]:
    main, late = tumbling_count(timestamped(env, EVENTS, fail))
    m, lt = CollectSink(), CollectSink()
    main.sink_to(m)
    late.sink_to(lt)
    env.execute("windows-tumbling")
    return m.get_results(), lt.get_results()


@pytest.fixture(scope="module")
def tumbling_baseline(spark: Any) -> tuple[list[Any], list[Any]]:
    return run_tumbling(make_env(spark, epoch_records=20))


def test_tumbling_baseline_has_refirings_and_late_events(tumbling_baseline: Any) -> None:
    out, late = tumbling_baseline
    firings = Counter((k, s) for k, s, _ in out)
    assert max(firings.values()) > 1 and late
    final: dict[tuple[str, int], int] = {}
    for k, s, c in out:
        final[(k, s)] = max(final.get((k, s), 0), c)
    assert sum(final.values()) + len(late) == len(EVENTS)


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_tumbling_window_count_after_a_failure(
    spark: Any, tmp_path: Any, epoch_clock: Any, tumbling_baseline: Any, how: str
) -> None:
    env = make_env(spark, epoch_records=20)
    checkpointed(env, tmp_path, f"tumbling-{how}")
    fail = FailOnce(str(tmp_path), epoch=5, subtask=0, mode=how, after_records=4)
    out, late = run_tumbling(env, fail)
    assert fail.fired
    assert Counter(out) == Counter(tumbling_baseline[0])
    assert Counter(late) == Counter(tumbling_baseline[1])


def run_sessions(env: Any, fail: Any = None) -> list[Any]:
    sink = CollectSink()
    sessions(timestamped(env, session_events(), fail, bound_ms=12_000)).sink_to(sink)
    env.execute("windows-sessions")
    return sorted(map(repr, sink.get_results()))


def test_merging_sessions_after_a_worker_crash(spark: Any, tmp_path: Any, epoch_clock: Any) -> None:
    base = run_sessions(make_env(spark, epoch_records=8))
    assert len(base) == 20  # 4 keys x 5 bursts: every burst merged into one session
    env = make_env(spark, epoch_records=8)
    checkpointed(env, tmp_path, "sessions")
    fail = FailOnce(str(tmp_path), epoch=4, subtask=0, mode="exit", after_records=3)
    assert run_sessions(env, fail) == base
    assert fail.fired


def test_count_windows_after_a_failure(spark: Any, tmp_path: Any, epoch_clock: Any) -> None:
    data = [(f"c{i % 3}", i, i) for i in range(48)]

    def run(env: Any, fail: Any = None) -> list[Any]:
        ds = env.from_collection(data)
        if fail is not None:
            ds = ds.map(fail)
            ds.set_parallelism(1)
        sink = CollectSink()
        count_windows(ds).sink_to(sink)
        env.execute("windows-count")
        return sorted(sink.get_results())

    base = run(make_env(spark, epoch_records=7))
    assert len(base) == 12 and sum(v[2] for v in base) == sum(range(48))
    env = make_env(spark, epoch_records=7)
    checkpointed(env, tmp_path, "count")
    fail = FailOnce(str(tmp_path), epoch=3, subtask=0, mode="raise", after_records=2)
    assert run(env, fail) == base
    assert fail.fired


@pytest.fixture
def rocksdb_dir() -> Any:
    """RocksDB directories on tmpfs when there is one (each open syncs metadata files)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    d = tempfile.mkdtemp(prefix="streamstate-it-rocksdb-win-", dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
def test_tumbling_window_count_on_rocksdb_after_a_worker_crash(
    spark: Any,
    tmp_path: Any,
    epoch_clock: Any,
    tumbling_baseline: Any,
    rocksdb_dir: str,
    incremental: bool,
) -> None:
    def rocks_env() -> Any:
        env = make_env(spark, epoch_records=20)
        backend = EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=incremental)
        backend.set_db_storage_paths(rocksdb_dir)
        env.set_state_backend(backend)
        return env

    if not incremental:  # the failure-free run on RocksDB equals the heap one
        out, late = run_tumbling(rocks_env())
        assert Counter(out) == Counter(tumbling_baseline[0])
        assert Counter(late) == Counter(tumbling_baseline[1])
    env = rocks_env()
    checkpointed(env, tmp_path, f"tumbling-rocksdb-{incremental}")
    fail = FailOnce(str(tmp_path), epoch=5, subtask=0, mode="exit", after_records=4)
    out, late = run_tumbling(env, fail)
    assert fail.fired
    assert Counter(out) == Counter(tumbling_baseline[0])
    assert Counter(late) == Counter(tumbling_baseline[1])
