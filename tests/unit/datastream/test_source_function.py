"""SourceFunction / ParallelSourceFunction sliced into epochs (in-process runner)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import SourceFunction
from streamstate.errors import ConfigurationError, JobExecutionError, SourceNotResumableError
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.opstate_jobs import CounterSource, SlowSource
from tests.support import envs
from tests.unit.runtime.test_executor_local import find_in_chain, make_env, run_collect


@pytest.fixture
def clock():
    with use_default_clock(TickingClock()) as c:
        yield c


def counter_run(tmp_path, name: str, fail_epoch: int = -1, rebuild: bool = False, mp=None):
    env = make_env(2, max_records=7)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / name))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    if rebuild:
        envs.rebuild_instances(env)
    ds = env.add_source(CounterSource(40)).uid("counter-source")
    ds = ds.map(FailOnce(str(tmp_path), epoch=fail_epoch, subtask=1, after_records=2))
    return run_collect(ds)


def test_counter_source_emits_each_offset_once_per_subtask(tmp_path, clock):
    out, result = counter_run(tmp_path, "base")
    assert Counter(out) == Counter(list(range(40)) * 2)
    # the run loop was sliced by the record budget: 40 / 7 per subtask
    assert result.get_accumulator_result("epochs") >= 6


def test_counter_source_exactly_once_after_failure_and_rebuilds(tmp_path, clock, monkeypatch):
    base, _ = counter_run(tmp_path, "base")
    failed, result = counter_run(tmp_path, "failed", fail_epoch=3)
    assert result.get_accumulator_result("restarts") == 1
    assert failed == base
    # every epoch on a new instance (another worker): the offset comes from the
    # previous epoch's operator-state version, the old instance's thread is cancelled
    rebuilt, result = counter_run(tmp_path, "rebuilt", rebuild=True, mp=monkeypatch)
    assert result.get_accumulator_result("cache_hits") == 0
    assert rebuilt == base


def test_slow_source_epochs_are_cut_by_the_max_wait(tmp_path, clock):
    env = make_env(1, max_records=1000, **{"execution_epoch_source-function_max-wait-ms": "60"})
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path))
    out, result = run_collect(env.add_source(SlowSource(12, 0.02)))
    assert out == list(range(12))
    assert result.get_accumulator_result("epochs") >= 3  # ~240 ms of emitting, 60 ms epochs


def test_collect_with_timestamp_gives_records_their_timestamps():
    from streamstate.datastream import ProcessFunction

    class Ts(ProcessFunction):
        def process_element(self, value, ctx):
            yield value, ctx.timestamp()

    env = make_env(1, max_records=5, **{"execution_epoch_source-function_max-wait-ms": "50"})
    out, _ = run_collect(env.add_source(SlowSource(6, 0.0)).process(Ts()))
    assert out == [(i, 1000 + i) for i in range(6)]


class Boom(SourceFunction):
    def run(self, ctx):
        ctx.collect(1)
        raise ValueError("source broke")

    def cancel(self):
        pass


def test_an_error_in_run_fails_the_job_with_the_users_error():
    env = make_env(1)
    with pytest.raises(JobExecutionError) as ei:
        run_collect(env.add_source(Boom()))
    assert find_in_chain(ei.value, ValueError) is not None


def test_non_parallel_source_function_needs_parallelism_1():
    env = make_env(2)
    ds = env.add_source(Boom()).set_parallelism(2)
    with pytest.raises(ConfigurationError, match="parallelism 1"):
        run_collect(ds)
    env = make_env(3, max_records=4)  # without set_parallelism it runs with parallelism 1
    out, _ = run_collect(env.add_source(SlowSource(9, 0.0)))
    assert sorted(out) == list(range(9))


def test_unbounded_source_function_can_be_cancelled():
    class Forever(SourceFunction):
        def __init__(self):
            self.running = True
            self.n = 0

        def run(self, ctx: Any) -> None:
            while self.running:
                with ctx.get_checkpoint_lock():
                    ctx.collect(self.n)
                    self.n += 1

        def cancel(self) -> None:
            self.running = False

    env = make_env(1, max_records=50)
    from streamstate.datastream.connectors import CollectSink

    sink = CollectSink()
    env.add_source(Forever()).sink_to(sink)
    client = env.execute_async()
    import time

    deadline = time.time() + 20
    while client.epochs_completed < 3 and time.time() < deadline:
        time.sleep(0.01)
    client.cancel()
    client.get_job_execution_result().result(20)
    got = sink.get_results()
    assert len(got) >= 150 and got == list(range(len(got)))


def stateless_run(tmp_path, rebuild: bool, fail_epoch: int = -1):
    from tests.integration.host_jobs import StartCountingSource

    markers = tmp_path / "runs"
    markers.mkdir()
    env = make_env(2, max_records=10)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    envs.rebuild_instances(env, rebuild)
    ds = env.add_source(StartCountingSource(str(markers), 30)).uid("stateless")
    ds = ds.map(FailOnce(str(tmp_path), epoch=fail_epoch, subtask=0, after_records=1))
    return markers, ds


def test_a_moved_source_function_without_state_fails_the_job_instead_of_replaying(tmp_path):
    # every epoch rebuilds the subtasks (as if they moved to another worker, no failure)
    markers, ds = stateless_run(tmp_path, rebuild=True)
    with pytest.raises(JobExecutionError) as ei:
        run_collect(ds)
    err = find_in_chain(ei.value, SourceNotResumableError)
    assert err is not None
    assert "CheckpointedFunction" in str(err) and "StartCountingSource" in str(err)
    # the restart strategy allowed 3 restarts, none was made: run() never started twice
    # for one subtask
    assert len(os.listdir(markers)) == 2


def test_a_source_function_without_state_restarts_run_after_a_failure(tmp_path):
    # a failure (not a move) may start run() again, as in Flink: its records replay
    markers, ds = stateless_run(tmp_path, rebuild=False, fail_epoch=2)
    out, result = run_collect(ds)
    assert result.get_accumulator_result("restarts") == 1
    assert len(os.listdir(markers)) == 4
    assert set(out) == set(range(30))


class ReturnsWhenTold(SourceFunction):
    """No operator state: emits its records, then returns once ``release`` is set."""

    def __init__(self, release: Any) -> None:
        self.release = release

    def run(self, ctx: Any) -> None:
        for i in range(40):
            ctx.collect(i)
        self.release.wait()

    def cancel(self) -> None:
        pass


def test_the_epoch_after_run_returned_finishes_on_a_new_thread():
    """A subtask host serves every epoch of a non-reused Spark worker on a new thread, while
    the previous epochs' threads still wait for their workers; the one after run() returned
    may get the finished source thread's ident (issue 27: it was taken for the source
    thread and parked for ever, a hang with spark.python.worker.reuse=false)."""
    import threading

    from streamstate.runtime.operators.source_function import _Runner

    release, job_end = threading.Event(), threading.Event()
    runner = _Runner(ReturnsWhenTold(release), "forty")
    got: list[Any] = []
    epoch_done = threading.Semaphore(0)

    def epoch() -> None:
        got.append(runner.read_epoch(1000, 0.01))
        epoch_done.release()
        job_end.wait()  # like a host's connection thread, alive until its worker exits

    try:
        threading.Thread(target=epoch, daemon=True).start()
        assert epoch_done.acquire(timeout=60)
        assert len(got[0][0]) == 40 and not got[0][2]  # cut while run() had not returned
        release.set()
        assert runner.thread is not None
        runner.thread.join()  # run() returned and its thread is gone: its ident is free
        threading.Thread(target=epoch, daemon=True).start()
        assert epoch_done.acquire(timeout=60), "the epoch after run() returned never ended"
    finally:
        job_end.set()
    assert got[1] == ([], None, True)
