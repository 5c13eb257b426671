"""Windows end to end on the in-process runner: watermarks, side outputs, failures, rescale.

Every job runs on every registered keyed backend (heap and RocksDB)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from streamstate.common import Duration
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import (
    ExternalizedCheckpointCleanup,
    ProcessAllWindowFunction,
)
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.window import (
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from streamstate.errors import JobExecutionError
from streamstate.runtime.state.registry import registered_keyed_backends
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.window_jobs import (
    LATENESS_MS,
    WINDOW_MS,
    count_windows,
    out_of_order_events,
    session_events,
    sessions,
    strategy,
    tumbling_count,
)
from tests.support import envs

EVENTS = out_of_order_events(240)

#: state backend configuration of the jobs (set per test by ``_each_backend``)
_BACKEND_CONF: dict[str, str] = {}


@pytest.fixture(autouse=True, params=registered_keyed_backends())
def _each_backend(request: Any, tmp_path: Any) -> Any:
    _BACKEND_CONF.clear()
    _BACKEND_CONF["state.backend.type"] = request.param
    if request.param == "rocksdb":
        _BACKEND_CONF["state.backend.rocksdb.localdir"] = str(tmp_path / "rocksdb-local")
    yield request.param
    _BACKEND_CONF.clear()


def make_env(parallelism: int = 2, max_records: int = 20, **conf: str) -> Any:
    return envs.make_env(
        parallelism, max_records=max_records, restarts=3, conf={**_BACKEND_CONF, **conf}
    )


def collect(ds: Any) -> CollectSink:
    sink = CollectSink()
    ds.sink_to(sink)
    return sink


@pytest.fixture
def clock() -> Any:
    with use_default_clock(TickingClock()) as c:
        yield c


def source(env: Any, data: Any, fail: Any = None, bound_ms: int = 2_000) -> Any:
    ds = env.from_collection(data).assign_timestamps_and_watermarks(strategy(bound_ms))
    ds.set_parallelism(1)
    if fail is not None:
        ds = ds.map(fail).name("inject")
        ds.set_parallelism(1)
    return ds


def run_tumbling(env: Any, fail: Any = None) -> tuple[list[Any], list[Any]]:
    main, late = tumbling_count(source(env, EVENTS, fail))
    m, lt = collect(main), collect(late)
    env.execute("tumbling")
    return m.get_results(), lt.get_results()


def checkpointed(env: Any, tmp_path: Any, name: str, interval: int = 1) -> None:
    env.enable_checkpointing(interval)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / name))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)


def expected_final_counts(events: list[Any], late: list[Any]) -> dict[tuple[str, int], int]:
    late_ids = {e[2] for e in late}
    out: Counter[tuple[str, int]] = Counter()
    for k, ts, i in events:
        if i not in late_ids:
            out[(k, ts - ts % WINDOW_MS)] += 1
    return dict(out)


def test_tumbling_window_count_with_lateness_and_late_side_output(clock: Any) -> None:
    out, late = run_tumbling(make_env())
    # the latest firing of every (key, window) counts every event that was not too late
    final: dict[tuple[str, int], int] = {}
    for k, start, c in out:
        final[(k, start)] = max(final.get((k, start), 0), c)
    assert final == expected_final_counts(EVENTS, late)
    firings = Counter((k, s) for k, s, _ in out)
    assert max(firings.values()) > 1  # late events within the lateness re-fired windows
    assert late, "some events must be too late"
    for _, ts, _ in late:  # each too-late event's window had passed end + lateness
        assert ts - ts % WINDOW_MS + WINDOW_MS - 1 + LATENESS_MS <= max(e[1] for e in EVENTS)


def test_tumbling_after_a_failure_equals_the_failure_free_run(clock: Any, tmp_path: Any) -> None:
    base = run_tumbling(make_env())
    env = make_env()
    checkpointed(env, tmp_path, "tumbling")
    fail = FailOnce(str(tmp_path), epoch=5, subtask=0, after_records=7)
    got = run_tumbling(env, fail)
    assert fail.fired
    assert Counter(got[0]) == Counter(base[0])
    assert Counter(got[1]) == Counter(base[1])


def test_tumbling_rescaled_from_a_retained_checkpoint(clock: Any, tmp_path: Any) -> None:
    base = run_tumbling(make_env())
    outs: list[Any] = []
    lates: list[Any] = []
    restore = None
    for parallelism, max_epochs in [(2, "5"), (3, "0")]:
        env = make_env(parallelism, **{"execution.epoch.max-epochs": max_epochs})
        checkpointed(env, tmp_path, "rescale")
        if restore is not None:
            env.set_restore_path(restore)
        main, late = tumbling_count(source(env, EVENTS))
        m, lt = collect(main), collect(late)
        result = env.execute(f"tumbling-p{parallelism}")
        outs.extend(m.get_results())
        lates.extend(lt.get_results())
        restore = result.get_accumulator_result("latest-checkpoint")
    assert Counter(outs) == Counter(base[0])
    assert Counter(lates) == Counter(base[1])


def run_sessions(env: Any, fail: Any = None) -> list[Any]:
    # reversed blocks put events up to ~11 s out of order: no event may be late here
    sink = collect(sessions(source(env, session_events(), fail, bound_ms=12_000)))
    env.execute("sessions")
    return sink.get_results()


def test_sessions_merge_and_survive_a_failure(clock: Any, tmp_path: Any) -> None:
    base = run_sessions(make_env(max_records=6))
    # every event is in exactly one session, and sessions of a key are > gap apart
    ids = sorted(i for *_, elems in base for i in elems)
    assert ids == list(range(len(session_events())))
    by_key: dict[str, list[tuple[int, int]]] = {}
    for k, start, end, _ in base:
        by_key.setdefault(k, []).append((start, end))
    for spans in by_key.values():
        spans.sort()
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
    assert len(base) == 20  # 4 keys x 5 bursts
    env = make_env(max_records=6)
    checkpointed(env, tmp_path, "sessions")
    fail = FailOnce(str(tmp_path), epoch=6, subtask=0, after_records=3)
    got = run_sessions(env, fail)
    assert fail.fired
    assert Counter(map(repr, got)) == Counter(map(repr, base))


def test_count_windows_survive_a_failure(clock: Any, tmp_path: Any) -> None:
    data = [(f"c{i % 3}", i, i) for i in range(60)]

    def run(env: Any, fail: Any = None) -> list[Any]:
        ds = env.from_collection(data)
        if fail is not None:
            ds = ds.map(fail)
            ds.set_parallelism(1)  # chained to the source: the same arrival order per key
        sink = collect(count_windows(ds))
        env.execute("count")
        return sink.get_results()

    base = run(make_env(max_records=7))
    assert sorted(base) == sorted(
        (f"c{k}", max(g), sum(g)) for k in range(3) for g in _groups(k, 4, data)
    )
    env = make_env(max_records=7)
    checkpointed(env, tmp_path, "count")
    fail = FailOnce(str(tmp_path), epoch=3, subtask=0, after_records=2)
    assert Counter(run(env, fail)) == Counter(base)
    assert fail.fired


def _groups(k: int, size: int, data: list[Any]) -> list[list[int]]:
    vals = [v for key, _, v in data if key == f"c{k}"]
    return [vals[i : i + size] for i in range(0, len(vals) - size + 1, size)]


def test_window_all_sliding_windows(clock: Any) -> None:
    class Total(ProcessAllWindowFunction):
        def process(self, context: Any, elements: Any) -> Any:
            yield context.window().start, len(elements)

    env = make_env()
    ds = env.from_collection([(f"k{i}", i * 1000, i) for i in range(30)])
    ds = ds.assign_timestamps_and_watermarks(strategy(0))
    sink = collect(
        ds.window_all(
            SlidingEventTimeWindows.of(Duration.of_seconds(10), Duration.of_seconds(5))
        ).process(Total())
    )
    env.execute("all")
    assert sorted(sink.get_results()) == [
        (-5000, 5),
        (0, 10),
        (5000, 10),
        (10000, 10),
        (15000, 10),
        (20000, 10),
        (25000, 5),
    ]


def test_processing_time_windows_fire_at_epoch_ends(clock: Any) -> None:
    env = make_env(max_records=5)
    ds = env.from_collection([("a", 0, i) for i in range(40)])
    sink = collect(
        ds.key_by(lambda e: e[0])
        .window(TumblingProcessingTimeWindows.of(Duration.of_seconds(3)))
        .reduce(lambda a, b: (a[0], a[1], a[2] + b[2]))
    )
    env.execute("proc")
    out = sink.get_results()
    # bounded jobs do not fire pending processing-time timers at the end (as Flink); the
    # windows that closed while the job ran hold every element once
    assert out and sum(v[2] for v in out) <= sum(range(40))
    assert len({v[2] for v in out}) == len(out)


def test_event_time_window_without_timestamps_is_a_clear_error() -> None:
    env = make_env()
    env.set_restart_strategy(RestartStrategies.no_restart())
    ds = env.from_collection([("a", 1, 1)])
    collect(ds.key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(10)).reduce(max))
    with pytest.raises(JobExecutionError, match="assign_timestamps_and_watermarks"):
        env.execute("no-ts")
