"""End-to-end jobs on the in-process runner: state primitives, operators, errors, lineage."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from streamstate.common import Types
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import (
    AggregateFunction,
    KeyedProcessFunction,
    MapFunction,
    ProcessFunction,
)
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from streamstate.errors import (
    JobExecutionError,
    KeySerializationError,
    StateAccessError,
    StateDescriptorConflictError,
)
from streamstate.testing import TickingClock, use_default_clock
from tests.support import envs

# -- helpers ---------------------------------------------------------------------------------


make_env = envs.make_env


def run_collect(ds) -> tuple[list[Any], Any]:
    """Run the job, return (collected records, JobExecutionResult)."""
    sink = CollectSink()
    ds.sink_to(sink)
    result = ds.get_execution_environment().execute()
    return sink.get_results(), result


def by_key(records: list[Any], key=lambda r: r[0]) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = defaultdict(list)
    for r in records:
        out[key(r)].append(r)
    return dict(out)


def cause_chain(e: BaseException | None) -> list[BaseException]:
    chain = []
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    return chain


def find_in_chain(e: BaseException, cls: type) -> BaseException:
    for x in cause_chain(e):
        if isinstance(x, cls):
            return x
    raise AssertionError(f"no {cls.__name__} in the cause chain of {e!r}")


@pytest.fixture
def checkpoint_every_epoch():
    """A driver clock that advances 1 s per reading: with a 1 ms interval every epoch
    boundary is a checkpoint (deterministic, independent of how fast epochs run)."""
    with use_default_clock(TickingClock()) as clock:
        yield clock


# -- the five keyed state primitives ----------------------------------------------------------


class Avg(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class AllStates(KeyedProcessFunction):
    def open(self, ctx):
        self.v = ctx.get_state(ValueStateDescriptor("v", Types.LONG()))
        self.l = ctx.get_list_state(ListStateDescriptor("l", Types.LONG()))
        self.m = ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()))
        self.r = ctx.get_reducing_state(
            ReducingStateDescriptor("r", lambda a, b: a + b, Types.LONG())
        )
        self.a = ctx.get_aggregating_state(AggregatingStateDescriptor("a", Avg()))

    def process_element(self, value, ctx):
        _, x = value
        self.v.update((self.v.value() or 0) + 1)
        self.l.add(x)
        parity = "even" if x % 2 == 0 else "odd"
        self.m.put(parity, (self.m.get(parity) or 0) + 1)
        if x % 5 == 0 and "odd" in self.m:
            del self.m["odd"]
        self.r.add(x)
        self.a.add(x)
        yield (
            ctx.get_current_key(),
            self.v.value(),
            list(self.l.get()),
            dict(self.m.items()),
            self.r.get(),
            self.a.get(),
        )


DATA = [(f"k{i % 5}", i) for i in range(1, 41)]


def reference_all_states(data: list[tuple[str, int]]) -> dict[str, list[Any]]:
    v: dict = {}
    lists: dict = defaultdict(list)
    maps: dict = defaultdict(dict)
    out: dict = defaultdict(list)
    for k, x in data:
        v[k] = v.get(k, 0) + 1
        lists[k].append(x)
        parity = "even" if x % 2 == 0 else "odd"
        maps[k][parity] = maps[k].get(parity, 0) + 1
        if x % 5 == 0:
            maps[k].pop("odd", None)
        out[k].append(
            (k, v[k], list(lists[k]), dict(maps[k]), sum(lists[k]), sum(lists[k]) / len(lists[k]))
        )
    return dict(out)


def all_states_job(env) -> Any:
    return env.from_collection(DATA).key_by(lambda r: r[0]).process(AllStates())


@pytest.mark.parametrize("checkpointing", [False, True])
def test_five_state_primitives_end_to_end(checkpointing):
    env = make_env(2, max_records=7)
    if checkpointing:
        env.enable_checkpointing(1)
    out, result = run_collect(all_states_job(env))
    assert by_key(out) == reference_all_states(DATA)
    assert result.get_accumulator_result("epochs") >= 6


# -- drop_cache_each_epoch: every epoch rebuilds state from lineage ----------------------------


@pytest.mark.parametrize("checkpointing", [False, True])
def test_results_identical_when_state_is_rebuilt_from_lineage(monkeypatch, checkpointing):
    def run(drop: bool) -> tuple[list[Any], Any]:
        env = make_env(2, max_records=3, **{"execution_epoch_full-snapshot-interval": "2"})
        if checkpointing:
            env.enable_checkpointing(1)
        envs.rebuild_instances(env, drop)
        return run_collect(all_states_job(env))

    cached, r1 = run(False)
    rebuilt, r2 = run(True)
    assert by_key(rebuilt) == by_key(cached) == reference_all_states(DATA)
    acc1, acc2 = r1.get_all_accumulator_results(), r2.get_all_accumulator_results()
    assert acc1["epochs"] == acc2["epochs"] >= 14  # 40 records / 3 per epoch
    assert acc1["cache_hits"] > 0
    assert acc2["cache_hits"] == 0
    assert acc2["cache_misses"] == acc2["epochs"] * 3  # source stage (p=1) + keyed stage (p=2)


# -- keyed aggregations -----------------------------------------------------------------------

AGG_DATA = [("a", 3, 1), ("b", 5, 2), ("a", 1, 3), ("a", 4, 4), ("b", 2, 5)]
AGG_EXPECTED = {
    "reduce": {
        "a": [("a", 3, 1), ("a", 4, 3), ("a", 8, 4)],
        "b": [("b", 5, 2), ("b", 7, 5)],
    },
    "sum": {"a": [("a", 3, 1), ("a", 4, 1), ("a", 8, 1)], "b": [("b", 5, 2), ("b", 7, 2)]},
    "min": {"a": [("a", 3, 1), ("a", 1, 1), ("a", 1, 1)], "b": [("b", 5, 2), ("b", 2, 2)]},
    "max": {"a": [("a", 3, 1), ("a", 3, 1), ("a", 4, 1)], "b": [("b", 5, 2), ("b", 5, 2)]},
    "min_by": {"a": [("a", 3, 1), ("a", 1, 3), ("a", 1, 3)], "b": [("b", 5, 2), ("b", 2, 5)]},
    "max_by": {"a": [("a", 3, 1), ("a", 3, 1), ("a", 4, 4)], "b": [("b", 5, 2), ("b", 5, 2)]},
}


@pytest.mark.parametrize("kind", sorted(AGG_EXPECTED))
def test_keyed_aggregations_on_tuples(kind):
    env = make_env(2, max_records=2)
    env.enable_checkpointing(1)
    ks = env.from_collection(AGG_DATA).key_by(lambda r: r[0])
    if kind == "reduce":
        ds = ks.reduce(lambda x, y: (x[0], x[1] + y[1], y[2]))
    else:
        ds = getattr(ks, kind)(1)
    out, _ = run_collect(ds)
    assert by_key(out) == AGG_EXPECTED[kind]


def test_sum_of_plain_numbers_uses_position_zero():
    env = make_env(1)
    out, _ = run_collect(env.from_collection([1, 2, 3, 4]).key_by(lambda v: v % 2).sum())
    assert out == [1, 2, 4, 6]  # key 1: 1, 1+3; key 0: 2, 2+4 (one subtask: arrival order)


# -- stateless operators ----------------------------------------------------------------------


class Double(MapFunction):
    def map(self, value):
        return value * 2


class Explode(ProcessFunction):
    def process_element(self, value, ctx):
        assert ctx.timestamp() is None
        yield value
        yield value + 1000


def test_map_flat_map_filter_process_union_rebalance():
    env = make_env(2, max_records=4)
    a = env.from_sequence(1, 20).map(Double())  # 2..40
    b = env.from_collection([100, 101]).flat_map(lambda v: [v, v])
    merged = a.union(b).rebalance().filter(lambda v: v % 4 == 0 or v > 99).process(Explode())
    out, _ = run_collect(merged.map(lambda v: v - 1))
    base = [v for v in range(2, 41, 2) if v % 4 == 0] + [100, 100, 101, 101]
    expected = sorted(x - 1 for v in base for x in (v, v + 1000))
    assert sorted(out) == expected


def test_flat_map_accepts_none_and_filter_drops_everything():
    env = make_env(2)
    ds = (
        env.from_sequence(1, 10)
        .flat_map(lambda v: None if v % 2 else [v])
        .filter(lambda v: v > 100)
    )
    out, result = run_collect(ds)
    assert out == []
    assert result.get_accumulator_result("epochs") >= 1


# -- RuntimeContext ---------------------------------------------------------------------------


class ContextProbe(MapFunction):
    def open(self, runtime_context):
        self.ctx = runtime_context

    def map(self, value):
        c = self.ctx
        return (
            c.get_task_name(),
            c.get_index_of_this_subtask(),
            c.get_number_of_parallel_subtasks(),
            c.get_max_number_of_parallel_subtasks(),
            c.get_job_parameter("who", None),
            c.get_job_parameter("missing", "fallback"),
            c.get_task_name_with_subtasks(),
            c.get_attempt_number(),
        )


def test_runtime_context_getters():
    env = make_env(2)
    env.set_max_parallelism(64)
    env.get_config().set_global_job_parameters({"who": "me"})
    ds = env.from_sequence(1, 9).map(ContextProbe()).name("probe").set_parallelism(3)
    out, _ = run_collect(ds)
    assert len(out) == 9
    assert {r[1] for r in out} == {0, 1, 2}
    for name, idx, p, mp, who, missing, with_sub, attempt in out:
        assert (name, p, mp, who, missing, attempt) == ("probe", 3, 64, "me", "fallback", 0)
        assert with_sub == f"probe ({idx + 1}/3)"


# -- errors -----------------------------------------------------------------------------------


class NonKeyedStateProcess(ProcessFunction):
    def open(self, ctx):
        self.s = ctx.get_state(ValueStateDescriptor("s", Types.LONG()))

    def process_element(self, value, ctx):
        yield value


class NonKeyedStateMap(MapFunction):
    def map(self, value):
        return value

    def open(self, ctx):
        ctx.get_list_state(ListStateDescriptor("l"))


@pytest.mark.parametrize("fn", [NonKeyedStateProcess(), NonKeyedStateMap()])
def test_keyed_state_in_non_keyed_function_fails_the_job(fn):
    env = make_env(2)
    stream = env.from_sequence(1, 4)
    ds = stream.process(fn) if isinstance(fn, ProcessFunction) else stream.map(fn)
    with pytest.raises(JobExecutionError) as ei:
        run_collect(ds)
    err = find_in_chain(ei.value, StateAccessError)
    assert "key_by" in str(err)


class ConflictingStates(KeyedProcessFunction):
    def __init__(self, second: Any) -> None:
        self.second = second

    def open(self, ctx):
        ctx.get_state(ValueStateDescriptor("s", Types.LONG()))
        if isinstance(self.second, ListStateDescriptor):
            ctx.get_list_state(self.second)
        else:
            ctx.get_state(self.second)

    def process_element(self, value, ctx):
        yield value


@pytest.mark.parametrize(
    "second",
    [ListStateDescriptor("s", Types.LONG()), ValueStateDescriptor("s", Types.STRING())],
    ids=["other-kind", "other-type"],
)
def test_same_state_name_with_another_descriptor_conflicts(second):
    env = make_env(2)
    ds = env.from_sequence(1, 4).key_by(lambda v: v % 2).process(ConflictingStates(second))
    with pytest.raises(JobExecutionError) as ei:
        run_collect(ds)
    err = find_in_chain(ei.value, StateDescriptorConflictError)
    assert "'s'" in str(err)


def test_key_that_cannot_be_serialized_with_key_type():
    env = make_env(2)
    ds = (
        env.from_collection([(1, "x"), ("oops", "y")])
        .key_by(lambda r: r[0], key_type=Types.INT())
        .reduce(lambda a, b: a)
    )
    with pytest.raises(JobExecutionError) as ei:
        run_collect(ds)
    err = find_in_chain(ei.value, KeySerializationError)
    assert "oops" in str(err)


class Boom(MapFunction):
    def __init__(self, log: str) -> None:
        self.log = log

    def map(self, value):
        with open(self.log, "a") as f:
            f.write("attempt\n")
        raise ValueError("boom: the user's own message")


def test_user_error_exhausts_fixed_delay_restarts(tmp_path):
    log = tmp_path / "attempts.log"
    env = make_env(2)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 0))
    ds = env.from_sequence(1, 4).map(Boom(str(log))).set_parallelism(1)
    with pytest.raises(JobExecutionError) as ei:
        run_collect(ds)
    assert "boom: the user's own message" in str(ei.value)
    assert isinstance(find_in_chain(ei.value, ValueError), ValueError)
    assert log.read_text().count("attempt") == 3  # the first run + 2 restarts


def test_user_error_without_restart_strategy_fails_at_once(tmp_path):
    log = tmp_path / "attempts.log"
    env = make_env(1)
    with pytest.raises(JobExecutionError, match="boom"):
        run_collect(env.from_sequence(1, 4).map(Boom(str(log))))
    assert log.read_text().count("attempt") == 1


# -- checkpoint accumulators ------------------------------------------------------------------


def test_checkpoint_every_epoch_is_counted(tmp_path, checkpoint_every_epoch):
    env = make_env(1, max_records=5)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path))
    out, result = run_collect(all_states_job(env))
    acc = result.get_all_accumulator_results()
    # 40 records / 5 per epoch; the last of them ends the input and carries a completed
    # checkpoint, so no input-free epoch follows for a final one
    assert acc["epochs"] == 8
    assert acc["checkpoints"] == 8
    assert acc["restarts"] == 0 and acc["checkpoints_failed"] == 0
    assert acc["latest-checkpoint"].rstrip("/").endswith("chk-8")
    assert by_key(out) == reference_all_states(DATA)


def test_checkpoints_with_the_real_clock_include_the_final_one():
    env = make_env(2, max_records=5)
    env.enable_checkpointing(1)
    _, result = run_collect(all_states_job(env))
    acc = result.get_all_accumulator_results()
    assert 1 <= acc["checkpoints"] <= acc["epochs"]
    assert acc["latest-checkpoint"] is None  # JobManager storage keeps them in memory only


def test_no_checkpoints_without_checkpointing():
    env = make_env(2, max_records=5)
    out, result = run_collect(all_states_job(env))
    acc = result.get_all_accumulator_results()
    assert acc["checkpoints"] == 0 and acc["latest-checkpoint"] is None
    # 8 epochs of records; the last one, which reads the rest of the collection, also
    # carries the final watermark (no extra empty epoch)
    assert acc["epochs"] == 8
    assert len(out) == len(DATA)


def test_the_local_runner_pauses_the_cyclic_collector_while_a_subtask_runs():
    """As on Spark's workers (runtime/gc_pause.py): the collector is off while user code
    runs in an epoch, and on again after the job."""
    import gc

    class CollectorState(MapFunction):
        def map(self, value):
            return value, gc.isenabled()

    assert gc.isenabled()
    env = make_env()
    records, _ = run_collect(env.from_collection([1, 2, 3]).map(CollectorState()))
    assert sorted(records) == [(1, False), (2, False), (3, False)]
    assert gc.isenabled()
