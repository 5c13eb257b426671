"""Operator and broadcast state in jobs on the in-process runner: the seeds' examples,
failures, rebuilds in another worker, rescaling through retained checkpoints, errors."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from streamstate.common import Types
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import (
    BroadcastProcessFunction,
    ExternalizedCheckpointCleanup,
    KeyedBroadcastProcessFunction,
    ListCheckpointed,
    MapFunction,
)
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from streamstate.errors import (
    CheckpointError,
    JobExecutionError,
    StateAccessError,
    StateDescriptorConflictError,
)
from streamstate.runtime.state_reader import (
    passthrough_descriptor,
    read_keyed_state,
    read_operator_state,
)
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.opstate_jobs import (
    RULE_STATE,
    BufferingSink,
    MyFunction,
    NotifyRecorder,
    RuleMatcher,
    expected_matches,
    read_buffering_output,
)
from tests.support import envs
from tests.unit.runtime.test_executor_local import find_in_chain, make_env, run_collect

DATA = [(f"k{i % 7}", i) for i in range(40)]


@pytest.fixture
def clock():
    """Every driver clock read is 1 s later: a 1 ms interval checkpoints every epoch."""
    with use_default_clock(TickingClock()) as c:
        yield c


def checkpointing(env, tmp_path, retain: bool = False) -> None:
    env.enable_checkpointing(1)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    if retain:
        cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))


def rebuild_every_epoch(monkeypatch) -> None:
    """Every subtask instance is rebuilt from its state versions in every epoch (as if it
    moved to another Python worker)."""
    monkeypatch.setattr(envs, "REBUILD_INSTANCES_DEFAULT", True)


# -- BufferingSink ---------------------------------------------------------------------------


def buffering_run(tmp_path, name: str, fail: bool = False) -> tuple[list[Any], dict[str, Any]]:
    out = tmp_path / name
    out.mkdir()
    env = make_env(2, max_records=4)
    checkpointing(env, tmp_path / f"{name}-chk")
    # the baseline has the same (never failing) FailOnce: the same topology, the same order
    fail_epoch = 5 if fail else -1
    ds = env.from_collection(DATA).map(
        FailOnce(str(tmp_path), epoch=fail_epoch, subtask=0, after_records=1)
    )
    ds.rebalance().add_sink(BufferingSink(str(out), threshold=3))
    result = env.execute()
    assert result.get_accumulator_result("restarts") == (1 if fail else 0)
    return read_buffering_output(str(out))


@pytest.mark.parametrize("variant", ["failure", "rebuilt"])
def test_buffering_sink_loses_and_duplicates_nothing(tmp_path, clock, monkeypatch, variant):
    base_records, base_files = buffering_run(tmp_path, "base")
    assert Counter(base_records) == Counter(DATA)
    assert any(f.startswith("buffer-") and v for f, v in base_files.items())  # some still buffered
    if variant == "rebuilt":
        rebuild_every_epoch(monkeypatch)
    records, files = buffering_run(tmp_path, variant, fail=variant == "failure")
    assert files == base_files


# -- MyFunction: per-key ReducingState + per-partition ListState, rescaled 1 -> 3 -> 2 -----------


def my_function_job(env) -> Any:
    return env.from_collection(DATA).key_by(lambda v: v[0]).map(MyFunction()).uid("my-function")


def test_my_function_counts_add_up_across_rescaling(tmp_path, clock):
    outputs: list[list[Any]] = []
    restore = None
    for parallelism, max_epochs in [(1, 3), (3, 6), (2, None)]:
        conf = {"execution_epoch_max-epochs": str(max_epochs)} if max_epochs else {}
        env = make_env(parallelism, max_records=4, **conf)
        checkpointing(env, tmp_path, retain=True)
        if restore is not None:
            env.set_restore_path(restore)
        out, result = run_collect(my_function_job(env))
        outputs.append(out)
        restore = result.get_accumulator_result("latest-checkpoint")
        # the state reader sees both kinds of state of the operator
        ops = read_operator_state(restore, "my-function")
        assert ops["perPartitionCount"]["mode"] == "split"
        per_subtask = ops["perPartitionCount"]["subtasks"]
        assert len(per_subtask) == parallelism
        done = sum(len(o) for o in outputs)
        assert sum(sum(x or []) for x in per_subtask) == done
        counts = read_keyed_state(
            restore, "my-function", passthrough_descriptor("perKeyCount", "reducing")
        )
        assert sum(counts.values()) == done
    everything = [r for out in outputs for r in out]
    assert sorted(r[0] for r in everything) == sorted(DATA)  # nothing lost, nothing twice
    # per-key counts continue across the rescales
    for key, n in Counter(k for k, _ in DATA).items():
        assert sorted(c for (k, _), c, _, _ in everything if k == key) == list(range(1, n + 1))
    # the last local count of each final subtask: merged partitions add up to all records
    last: dict[int, int] = {}
    for _, _, subtask, local in outputs[-1]:
        last[subtask] = local
    assert set(last) == {0, 1}
    assert sum(last.values()) == len(DATA)
    # the middle run really had three partitions
    assert {s for _, _, s, _ in outputs[1]} == {0, 1, 2}


def test_my_function_same_results_with_a_failure_and_with_rebuilds(tmp_path, clock, monkeypatch):
    def run(name: str, fail: bool) -> list[Any]:
        env = make_env(2, max_records=4)
        checkpointing(env, tmp_path / name)
        ds = env.from_collection(DATA).map(
            FailOnce(str(tmp_path), epoch=6 if fail else -1, subtask=0, after_records=1)
        )
        out, _ = run_collect(ds.key_by(lambda v: v[0]).map(MyFunction()))
        return out

    base = run("base", False)
    assert run("failure", True) == base
    rebuild_every_epoch(monkeypatch)
    assert run("rebuilt", False) == base


# -- ListCheckpointed and CheckpointListener -------------------------------------------------------


class RunningTotal(MapFunction, ListCheckpointed):
    def __init__(self) -> None:
        self.total = 0

    def map(self, value: Any) -> Any:
        self.total += value[1]
        return self.total

    def snapshot_state(self, checkpoint_id: Any, timestamp: int) -> list[Any]:
        return [self.total]

    def restore_state(self, state: list[Any]) -> None:
        self.total = sum(state)


def test_list_checkpointed_restores_exactly_after_failure_and_rebuild(tmp_path, clock, monkeypatch):
    def run(name: str, fail: bool) -> list[Any]:
        env = make_env(1, max_records=3)
        checkpointing(env, tmp_path / name)
        ds = env.from_collection(DATA).map(
            FailOnce(str(tmp_path), epoch=4 if fail else -1, after_records=1)
        )
        out, _ = run_collect(ds.map(RunningTotal()))
        return out

    base = run("base", False)
    assert base[-1] == sum(v for _, v in DATA)
    assert run("failure", True) == base
    rebuild_every_epoch(monkeypatch)
    assert run("rebuilt", False) == base


def test_checkpoint_listener_is_notified_of_every_completed_checkpoint(tmp_path, clock):
    out = tmp_path / "notify"
    out.mkdir()
    env = make_env(2, max_records=10)
    checkpointing(env, tmp_path)
    result = run_collect(env.from_collection(DATA).rebalance().map(NotifyRecorder(str(out))))[1]
    n = result.get_accumulator_result("checkpoints")
    assert n >= 4
    for i in range(2):
        lines = (out / f"notify-{i}.log").read_text().split()
        assert lines == [x for k in range(1, n + 1) for x in ("complete", str(k))]


# -- broadcast state pattern -------------------------------------------------------------------

ITEMS = [
    (c, s)
    for c, s in itertools.islice(
        zip(
            itertools.cycle(["red", "blue", "green"]),
            itertools.cycle(["rect", "tri", "circle", "tri", "rect"]),
        ),
        45,
    )
]
RULES = [("rect-tri", "rect", "tri"), ("tri-circle", "tri", "circle")]


def rules_job(env, fail: Any = None) -> Any:
    items = env.from_collection(ITEMS)
    if fail is not None:
        items = items.map(fail).set_parallelism(1)  # chained: the items keep their order
    it = items.key_by(lambda v: v[0])
    rs = env.from_collection(RULES).broadcast(RULE_STATE)
    return it.connect(rs).process(RuleMatcher()).uid("matcher")


def test_colour_shape_rule_matching(tmp_path, clock, monkeypatch):
    # one epoch of rules first: every rule is known before the first item
    env = make_env(2, max_records=5)
    out, _ = run_collect(rules_job(env))
    expected = expected_matches(ITEMS, RULES)
    assert len(expected) > 10
    assert Counter(out) == Counter(expected)
    env = make_env(2, max_records=5)
    checkpointing(env, tmp_path / "f")
    failed, r = run_collect(rules_job(env, FailOnce(str(tmp_path), epoch=4, after_records=1)))
    assert r.get_accumulator_result("restarts") == 1
    assert Counter(failed) == Counter(expected)
    rebuild_every_epoch(monkeypatch)
    env = make_env(2, max_records=5)
    assert Counter(run_collect(rules_job(env))[0]) == Counter(expected)


def test_broadcast_state_survives_rescaling_1_3_2(tmp_path, clock):
    outputs = []
    restore = None
    for parallelism, max_epochs in [(1, 2), (3, 5), (2, None)]:
        conf = {"execution_epoch_max-epochs": str(max_epochs)} if max_epochs else {}
        env = make_env(parallelism, max_records=5, **conf)
        checkpointing(env, tmp_path, retain=True)
        if restore is not None:
            env.set_restore_path(restore)
        out, result = run_collect(rules_job(env))
        outputs.append(out)
        restore = result.get_accumulator_result("latest-checkpoint")
    # the rules arrived in the first run only: every later subtask must have them
    assert outputs[1] and outputs[2]
    assert Counter(r for o in outputs for r in o) == Counter(expected_matches(ITEMS, RULES))


class WritesInProcessElement(RuleMatcher):
    def process_element(self, value, ctx):
        ctx.get_broadcast_state(RULE_STATE).put("x", ("a", "b"))
        return None


class BroadcastInMap(MapFunction):
    def map(self, value):
        return value

    def initialize_state(self, context):
        context.get_operator_state_store().get_broadcast_state(
            MapStateDescriptor("rules", None, None)
        )

    def snapshot_state(self, context):
        pass


class TwoModes(MapFunction):
    def map(self, value):
        return value

    def initialize_state(self, context):
        store = context.get_operator_state_store()
        store.get_list_state(ListStateDescriptor("buf"))
        store.get_union_list_state(ListStateDescriptor("buf"))

    def snapshot_state(self, context):
        pass


def _checkpointed(cls):
    from streamstate.datastream import CheckpointedFunction

    return type(cls.__name__, (cls, CheckpointedFunction), {})


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda env: (
                env.from_collection(ITEMS)
                .key_by(lambda v: v[0])
                .connect(env.from_collection(RULES).broadcast(RULE_STATE))
                .process(WritesInProcessElement())
            ),
            StateAccessError,
            "read-only",
        ),
        (
            lambda env: env.from_collection([1]).map(_checkpointed(BroadcastInMap)()),
            StateAccessError,
            "only available in a BroadcastProcessFunction",
        ),
        (
            lambda env: env.from_collection([1]).map(_checkpointed(TwoModes)()),
            StateDescriptorConflictError,
            "one name has one mode",
        ),
    ],
)
def test_bad_operator_state_use_is_a_typed_error(make, error, match):
    env = make_env(1)
    with pytest.raises(JobExecutionError) as ei:
        run_collect(make(env))
    cause = find_in_chain(ei.value, error)
    assert cause is not None and match in str(cause)


def test_large_operator_state_versions_go_through_epoch_files(tmp_path, monkeypatch):
    # a buffer over 16 KiB is written as an epoch file, not inline: rebuilt in every epoch
    # (no checkpointing, so only the epoch versions carry it), nothing is lost
    from streamstate.runtime import versions as osv

    written: list[str] = []
    real = osv.commit_operator_state

    def spy(storage, *args, **kwargs):
        versions, chk = real(storage, *args, **kwargs)
        written.extend(type(v.handle).__name__ for v in versions.values() if v.handle is not None)
        return versions, chk

    monkeypatch.setattr("streamstate.runtime.worker.commit.commit_operator_state", spy)
    rebuild_every_epoch(monkeypatch)
    out = tmp_path / "big"
    out.mkdir()
    env = make_env(1, max_records=20)
    big = [(f"k{i}" * (1 if i < 60 else 300), i) for i in range(120)]
    env.from_collection(big).add_sink(BufferingSink(str(out), threshold=1000))
    env.execute()
    records, _ = read_buffering_output(str(out))
    assert Counter(records) == Counter(big)
    assert "ByteStreamStateHandle" in written and "FileStateHandle" in written


# -- non-keyed broadcast, apply_to_keyed_state, timers on the keyed side ------------------------

THRESHOLDS = MapStateDescriptor("thresholds", None, None)


class Threshold(BroadcastProcessFunction):
    """Non-keyed: numbers pass when >= the broadcast threshold."""

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(THRESHOLDS).put("min", value)

    def process_element(self, value, ctx):
        t = ctx.get_broadcast_state(THRESHOLDS).get("min")
        if t is not None and value >= t:
            yield value


def test_non_keyed_broadcast_process_function(tmp_path, clock):
    def run(name: str, fail: bool) -> list[Any]:
        env = make_env(3, max_records=4)
        checkpointing(env, tmp_path / name)
        nums = env.from_collection(list(range(30))).map(
            FailOnce(str(tmp_path), epoch=5 if fail else -1, after_records=1)
        )
        out, _ = run_collect(
            nums.rebalance()
            .connect(env.from_collection([10, 20]).broadcast(THRESHOLDS))
            .process(Threshold())
        )
        return out

    base = run("base", False)
    # both thresholds arrive in epoch 1, before any number: the last one (20) wins
    assert sorted(base) == list(range(20, 30))
    assert Counter(run("failed", True)) == Counter(base)


COUNT = ValueStateDescriptor("count", Types.LONG())


class ResetOnCommand(KeyedBroadcastProcessFunction):
    """Counts per key; a broadcast "reset" clears every key's count (apply_to_keyed_state)
    and reports the counts it cleared."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(COUNT)

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield "count", ctx.get_current_key(), self.count.value()

    def process_broadcast_element(self, value, ctx):
        cleared = []

        def reset(key, state):
            cleared.append((key, state.value()))
            state.clear()

        ctx.apply_to_keyed_state(COUNT, reset)
        yield "reset", tuple(sorted(cleared))


def test_apply_to_keyed_state_visits_every_key_of_the_subtask():
    env = make_env(1, max_records=3)
    items = env.from_collection([("a", 1), ("b", 1), ("a", 1)] * 2).key_by(lambda v: v[0])
    # 3 records per epoch and source: epoch 1 brings three commands and a, b, a; epoch 2
    # brings the 4th command (processed first: broadcast side first) and a, b, a again
    cmds = env.from_collection(["c1", "c2", "c3", "c4"]).broadcast(
        MapStateDescriptor("c", None, None)
    )
    out, _ = run_collect(items.connect(cmds).process(ResetOnCommand()))
    resets = [r for r in out if r[0] == "reset"]
    counts = [r[1:] for r in out if r[0] == "count"]
    assert resets == [("reset", ())] * 3 + [("reset", (("a", 2), ("b", 1)))]
    assert counts == [("a", 1), ("b", 1), ("a", 2)] * 2


class TimerOnKeyedSide(KeyedBroadcastProcessFunction):
    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULE_STATE).put("delay", value)

    def process_element(self, value, ctx):
        delay = ctx.get_broadcast_state(RULE_STATE).get("delay") or 0
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + delay)

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), timestamp, ctx.get_broadcast_state(RULE_STATE).get("delay")


def test_keyed_broadcast_timers_fire_with_key_and_read_only_broadcast_state():
    from streamstate.common import WatermarkStrategy

    env = make_env(2, max_records=10)
    items = env.from_collection(
        [("a", 1000), ("b", 2000), ("a", 3000)]
    ).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, t: v[1])
    )
    delays = env.from_collection([5]).broadcast(RULE_STATE)
    out, _ = run_collect(items.key_by(lambda v: v[0]).connect(delays).process(TimerOnKeyedSide()))
    assert sorted(out) == [("a", 1005, 5), ("a", 3005, 5), ("b", 2005, 5)]


class SeenUnion(MapFunction):
    """Remembers every value it saw in union list state: after a restore, each subtask
    starts from what all subtasks had seen."""

    def initialize_state(self, context):
        self.seen_state = context.get_operator_state_store().get_union_list_state(
            ListStateDescriptor("seen", Types.LONG())
        )
        self.seen = set(self.seen_state.get())
        self.restored_with = len(self.seen)

    def snapshot_state(self, context):
        self.seen_state.update(sorted(self.seen))

    def map(self, value):
        self.seen.add(value)
        return value, self.restored_with


def test_union_list_state_goes_to_every_subtask_across_rescaling(tmp_path, clock):
    from streamstate.datastream import CheckpointedFunction

    fn = type("SeenUnionCF", (SeenUnion, CheckpointedFunction), {})
    data = list(range(60))
    seen_before: set[int] = set()
    restore = None
    for parallelism, max_epochs in [(1, 3), (3, 6), (2, None)]:
        conf = {"execution_epoch_max-epochs": str(max_epochs)} if max_epochs else {}
        env = make_env(parallelism, max_records=5, **conf)
        checkpointing(env, tmp_path, retain=True)
        if restore is not None:
            env.set_restore_path(restore)
        out, result = run_collect(
            env.from_collection(data).rebalance().map(fn()).uid("seen").set_parallelism(parallelism)
        )
        # every subtask of this run was restored with everything seen before
        assert {n for _, n in out} == {len(seen_before)}
        seen_before |= {v for v, _ in out}
        restore = result.get_accumulator_result("latest-checkpoint")
        state = read_operator_state(restore, "seen")["seen"]
        assert state["mode"] == "union" and len(state["subtasks"]) == parallelism
        assert set().union(*map(set, state["subtasks"])) == seen_before
    assert seen_before == set(data)


class Constant(MapFunction, ListCheckpointed):
    """Operator state that never changes after the first epoch: no new version is needed,
    except when the version it points at is about to be discarded."""

    def map(self, value):
        return value

    def snapshot_state(self, checkpoint_id, timestamp):
        return [42]

    def restore_state(self, state):
        assert state == [42]


def test_unchanged_operator_state_survives_discarded_aborted_checkpoints(
    tmp_path, clock, monkeypatch
):
    # checkpoints every ~3 epochs, all expire (timeout < one clock tick): each aborted
    # checkpoint's files are discarded after the next full epoch; every epoch rebuilds
    # its instance from the lineage, so a lineage left on a discarded file would fail
    from datetime import timedelta

    rebuild_every_epoch(monkeypatch)
    env = make_env(1, max_records=3)
    from streamstate.datastream import CheckpointingMode

    # at-least-once: results are visible per epoch (no checkpoint ever completes here)
    env.enable_checkpointing(2500, CheckpointingMode.AT_LEAST_ONCE)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    cc.set_checkpoint_timeout(timedelta(milliseconds=500))
    cc.set_tolerable_checkpoint_failure_number(20)
    env.set_restart_strategy(RestartStrategies.no_restart())  # fail fast, don't loop
    sink = CollectSink()
    env.from_collection(list(range(30))).map(Constant()).sink_to(sink)
    # no checkpoint can ever complete, so the job cannot commit its end: after the tolerable
    # failures (every final-checkpoint attempt expires too) it fails, loudly (issue 17)
    with pytest.raises(JobExecutionError, match="tolerable-failed-checkpoints") as ei:
        env.execute()
    assert isinstance(ei.value.__cause__, CheckpointError)
    assert "is not committed" in str(ei.value.__cause__)
    # at-least-once: every epoch's records were published at the end of their epoch
    assert sorted(sink.get_results()) == list(range(30))


def test_cli_state_prints_operator_state(tmp_path, clock, capsys):
    from streamstate.cli.main import main

    env = make_env(2, max_records=4)
    checkpointing(env, tmp_path, retain=True)
    out, result = run_collect(my_function_job(env))
    path = result.get_accumulator_result("latest-checkpoint")
    assert main(["state", path, "--operator", "my-function", "--state", "perPartitionCount"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(" (split) -> [" in line for line in lines)
    assert sum(int(line.split("[")[1].rstrip("]")) for line in lines) == len(DATA)
    assert main(["state", path, "-o", "my-function", "-n", "nope"]) == 2
    assert "perPartitionCount (split)" in capsys.readouterr().err
