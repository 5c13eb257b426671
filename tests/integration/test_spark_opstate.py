"""Operator state, broadcast state and two-input operators on Spark: the seeds' examples,
each with a failure injected mid-run compared with the failure-free run, and a rescale
1 -> 3 -> 2 through retained checkpoints."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from streamstate.datastream import ExternalizedCheckpointCleanup
from streamstate.datastream.connectors import CollectSink
from streamstate.runtime.state_reader import read_operator_state
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.jobs import make_env
from tests.integration.opstate_jobs import (
    RULE_STATE,
    BufferingSink,
    CounterSource,
    MyFunction,
    RescaleProbe,
    RuleMatcher,
    SubtaskRuleMatcher,
    expected_matches,
    read_buffering_output,
)
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()

DATA = [(f"k{i % 7}", i) for i in range(48)]
ITEMS = list(
    itertools.islice(
        zip(
            itertools.cycle(["red", "blue", "green"]),
            itertools.cycle(["rect", "tri", "circle", "tri", "rect"]),
        ),
        45,
    )
)
RULES = [("rect-tri", "rect", "tri"), ("tri-circle", "tri", "circle")]


@pytest.fixture
def epoch_clock():
    """Each driver clock read is 1 s later: a 1 ms interval checkpoints every epoch."""
    with use_default_clock(TickingClock()) as clock:
        yield clock


def env_for(spark, tmp_path, name: str, parallelism: int = 2, epoch_records: int = 6, **conf):
    env = make_env(spark, epoch_records=epoch_records, **conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(1)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / f"{name}-chk"))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    return env


def fail_map(tmp_path, epoch: int, how: str = "raise") -> FailOnce:
    # epoch -1 never fails: the baseline runs the same topology
    return FailOnce(str(tmp_path), epoch=epoch, subtask=0, mode=how, after_records=1)


@pytest.mark.parametrize("how", ["exit"])  # a killed Python worker (the others raise)
def test_buffering_sink_on_spark(spark, tmp_path, epoch_clock, how):
    def run(name: str, epoch: int) -> tuple[Any, Any]:
        out = tmp_path / name
        out.mkdir()
        env = env_for(spark, tmp_path, name)
        fail = fail_map(tmp_path, epoch, how)
        env.from_collection(DATA).map(fail).set_parallelism(1).rebalance().add_sink(
            BufferingSink(str(out), threshold=4)
        )
        result = env.execute(name)
        assert result.get_accumulator_result("checkpoints") >= 6
        return read_buffering_output(str(out)), result

    (base_records, base_files), _ = run("base", -1)
    assert Counter(base_records) == Counter(DATA)
    (records, files), result = run("failed", 4)
    assert result.get_accumulator_result("restarts") == 1
    assert files == base_files


def test_my_function_on_spark_with_failure_and_rescale_1_3_2(spark, tmp_path, epoch_clock):
    def job(env, epoch: int) -> CollectSink:
        sink = CollectSink()
        (
            env.from_collection(DATA)
            .map(fail_map(tmp_path, epoch))
            .set_parallelism(1)
            .key_by(lambda v: v[0])
            .map(MyFunction())
            .uid("my-function")
            .sink_to(sink)
        )
        return sink

    env = env_for(spark, tmp_path, "base")
    base_sink = job(env, -1)
    env.execute("base")
    base = base_sink.get_results()
    env = env_for(spark, tmp_path, "failed")
    failed_sink = job(env, 5)
    assert env.execute("failed").get_accumulator_result("restarts") == 1
    assert failed_sink.get_results() == base

    outputs, restore = [], None
    for p, max_epochs in [(1, 3), (3, 6), (2, 0)]:
        env = env_for(
            spark, tmp_path, "rescale", p, **{"execution.epoch.max-epochs": str(max_epochs)}
        )
        if restore is not None:
            env.set_restore_path(restore)
        sink = job(env, -1)
        result = env.execute(f"rescale-{p}")
        outputs.append(sink.get_results())
        restore = result.get_accumulator_result("latest-checkpoint")
    everything = [r for o in outputs for r in o]
    assert sorted(r[0] for r in everything) == sorted(DATA)
    last: dict[int, int] = {}
    for _, _, subtask, local in outputs[-1]:
        last[subtask] = local
    assert sum(last.values()) == len(DATA)  # per-partition counts add up after 3 -> 2
    assert {s for _, _, s, _ in outputs[1]} == {0, 1, 2}
    finals = {k: max(c for (kk, _), c, _, _ in everything if kk == k) for k, _ in DATA}
    assert finals == dict(Counter(k for k, _ in DATA))


def test_rule_matching_on_spark_with_failure(spark, tmp_path, epoch_clock):
    def run(name: str, epoch: int) -> tuple[list[Any], Any]:
        env = env_for(spark, tmp_path, name, epoch_records=5)
        items = env.from_collection(ITEMS).map(fail_map(tmp_path, epoch)).set_parallelism(1)
        rules = env.from_collection(RULES).broadcast(RULE_STATE)
        sink = CollectSink()
        items.key_by(lambda v: v[0]).connect(rules).process(RuleMatcher()).sink_to(sink)
        result = env.execute(name)
        return sink.get_results(), result

    base, _ = run("base", -1)
    assert Counter(base) == Counter(expected_matches(ITEMS, RULES))
    failed, result = run("failed", 4)
    assert result.get_accumulator_result("restarts") == 1
    assert Counter(failed) == Counter(base)


def test_counter_source_on_spark_with_a_killed_worker(spark, tmp_path, epoch_clock):
    def run(name: str, epoch: int) -> tuple[list[Any], Any]:
        env = env_for(spark, tmp_path, name, epoch_records=8)
        sink = CollectSink()
        (
            env.add_source(CounterSource(40))
            .uid("counter-source")
            .map(FailOnce(str(tmp_path), epoch=epoch, subtask=1, mode="exit", after_records=3))
            .sink_to(sink)
        )
        result = env.execute(name)
        return sink.get_results(), result

    base, _ = run("base", -1)
    assert Counter(base) == Counter(list(range(40)) * 2)
    failed, result = run("failed", 3)
    assert result.get_accumulator_result("restarts") == 1
    assert Counter(failed) == Counter(base)


COLOURS = ["red", "blue", "green", "cyan", "pink", "grey"]
ITEMS6 = list(
    zip(
        itertools.islice(itertools.cycle(COLOURS), 48),
        itertools.cycle(["rect", "tri", "circle", "tri", "rect"]),
    )
)


def test_union_split_and_broadcast_state_rescale_1_3_2_on_spark(spark, tmp_path, epoch_clock):
    """One job with broadcast state (rule matching; the rules arrive in the first run
    only) and a probe with split and union list state, run at 1, restored from its
    retained checkpoint at 3, then at 2, compared with a run that never rescales."""

    def job(env) -> tuple[CollectSink, CollectSink]:
        matches, probed = CollectSink(), CollectSink()
        items = env.from_collection(ITEMS6).key_by(lambda v: v[0])
        rules = env.from_collection(RULES).broadcast(RULE_STATE)
        items.connect(rules).process(SubtaskRuleMatcher()).uid("matcher").sink_to(matches)
        env.from_collection(list(range(48))).rebalance().map(RescaleProbe()).uid("probe").sink_to(
            probed
        )
        return matches, probed

    # 10 records per source and epoch: 5 epochs, the rescaled runs end after 2 and 4
    env = env_for(spark, tmp_path, "base", epoch_records=10)
    base_matches, base_probed = job(env)
    env.execute("base")
    expected = Counter(expected_matches(ITEMS6, RULES))
    assert len(expected) > 10
    assert Counter(m for m, _ in base_matches.get_results()) == expected
    assert sorted(v for v, _ in base_probed.get_results()) == list(range(48))

    rule_map = {name: (first, second) for name, first, second in RULES}
    matches: list[Any] = []
    probed: list[Any] = []
    held_before: list[int] = []  # the old subtasks' split lists, concatenated in order
    seen_before: list[int] = []  # the old subtasks' union lists, concatenated in order
    restore = None
    for p, max_epochs in [(1, 2), (3, 4), (2, 0)]:
        conf = {"execution.epoch.max-epochs": str(max_epochs)}
        env = env_for(spark, tmp_path, "rescale", p, epoch_records=10, **conf)
        if restore is not None:
            env.set_restore_path(restore)
        m_sink, p_sink = job(env)
        result = env.execute(f"rescale-{p}")
        restore = result.get_accumulator_result("latest-checkpoint")
        run_matches, run_probed = m_sink.get_results(), p_sink.get_results()
        assert run_probed, f"no input left for the run at parallelism {p}"
        matches += run_matches
        probed += run_probed
        if p != 1:  # the rules came in the first run: every new subtask restored them
            assert {s for _, s in run_matches} == set(range(p))

        # broadcast state: one copy per subtask, each with every rule
        rules_state = read_operator_state(restore, "matcher")[RULE_STATE.name]
        assert rules_state["mode"] == "broadcast"
        assert [dict(c) for c in rules_state["subtasks"]] == [rule_map] * p

        state = read_operator_state(restore, "probe")
        held, seen = state["held"], state["seen"]
        assert (held["mode"], seen["mode"]) == ("split", "union")
        assert len(held["subtasks"]) == len(seen["subtasks"]) == p
        mapped = [[v for v, s in run_probed if s == i] for i in range(p)]
        old = set(held_before)
        shares = [[v for v in h if v in old] for h in held["subtasks"]]
        # split: contiguous, even shares of the old lists; nothing lost, nothing twice
        assert [v for share in shares for v in share] == held_before
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        for i, h in enumerate(held["subtasks"]):
            assert h == shares[i] + [v for v in h if v not in old]
            assert sorted(h[len(shares[i]) :]) == sorted(mapped[i])
        # union: every subtask restored all old subtasks' lists, then added its own
        for i, u in enumerate(seen["subtasks"]):
            assert u[: len(seen_before)] == seen_before
            assert sorted(u[len(seen_before) :]) == sorted(mapped[i])
        held_before = [v for h in held["subtasks"] for v in h]
        seen_before = [v for u in seen["subtasks"] for v in u]

    assert sorted(held_before) == list(range(48))
    # the same outputs as the run that never rescaled
    assert Counter(m for m, _ in matches) == expected
    assert sorted(v for v, _ in probed) == list(range(48))
