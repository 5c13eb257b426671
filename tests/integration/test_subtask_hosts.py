"""Subtask hosts on Spark local[2]: a subtask's state and function objects stay in one
process from epoch to epoch, whichever Python worker Spark picks; with hosts off, the
same jobs still give the same results (correctness never depends on placement)."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from streamstate.datastream.connectors import CollectSink
from tests.integration import host_jobs as J
from tests.integration.jobs import CountPerKey
from tests.support import envs

RECORDS = [(f"k{i % 13}", i) for i in range(600)]


def count_job(spark, hosts: bool, epochs_of: int = 50):
    env = envs.make_env(
        2,
        spark=spark,
        max_records=epochs_of,
        conf={"execution.runner.spark.subtask-hosts": str(hosts).lower()},
    )
    sink = CollectSink()
    (
        env.from_collection(RECORDS)
        .key_by(lambda r: r[0])
        .process(CountPerKey())
        .uid("count")
        .map(J.CallsSoFar())
        .uid("calls")
        .sink_to(sink)
    )
    result = env.execute("hosts")
    return sink.get_results(), result.get_all_accumulator_results()


@pytest.mark.parametrize("hosts", [True, False])
def test_every_epoch_after_the_first_finds_its_subtask_in_place(spark, hosts):
    out, acc = count_job(spark, hosts)
    epochs = acc["epochs"]
    assert epochs >= 10
    # the instance counters (CallsSoFar) count every record of their subtask
    per_subtask = Counter(i for i, _ in out)
    assert sum(per_subtask.values()) == len(RECORDS)
    if hosts:
        # each subtask instance is built once: its first epoch misses, every later one hits
        subtasks = acc["cache_hits"] + acc["cache_misses"]
        assert acc["cache_misses"] == subtasks // epochs
        # stage 0 only reads the collection, in whichever Python worker runs its task (no
        # state, no function: no host); every subtask with a function has one host
        hosted = {s: w for s, w in acc["subtask-workers"].items() if not s.startswith("0/")}
        assert hosted and all(len(w) == 1 for w in hosted.values())
        # and its plain instance field was never reset
        for i, n in per_subtask.items():
            assert sorted(c for j, c in out if j == i) == list(range(1, n + 1))


def test_a_source_function_without_state_runs_once_per_subtask(spark, tmp_path):
    env = envs.make_env(2, spark=spark, max_records=20)
    sink = CollectSink()
    env.add_source(J.StartCountingSource(str(tmp_path), 60)).uid("src").sink_to(sink)
    result = env.execute("source-hosted")
    assert result.get_accumulator_result("epochs") >= 3
    assert sorted(sink.get_results()) == sorted(list(range(60)) * 2)
    assert len(os.listdir(tmp_path)) == 2  # run() started once per subtask, never again
    # each subtask ran in one process (its host) for the whole job
    workers = result.get_accumulator_result("subtask-workers")
    assert workers and all(len(w) == 1 for w in workers.values())
