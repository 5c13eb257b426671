"""The DataFrame runner on a real Spark Connect server (tests/conftest.py starts it)."""

from __future__ import annotations

import glob
import os
import warnings
from collections import Counter
from functools import reduce

import pytest

from streamstate.runtime.host_owner import Owner
from streamstate.runtime.runtime_dir import OWNER_FILE, runtime_dir
from streamstate.spark.routing import route_values
from streamstate.spark.session import (
    IgnoredSparkSettingWarning,
    connect_session,
    is_connect_session,
)
from tests.integration.jobs import count_job, final_counts, make_env, records

pytestmark = pytest.mark.spark


def test_routes_land_on_their_partition_through_real_exchanges(connect_spark):
    """Every route of every parallelism 1..32 goes through ``repartition(p, "route")`` on
    the server and comes out on exactly its target partition (one job, 32 exchanges); and
    Spark's own partition expression, ``pmod(hash(route), p)``, agrees for 1..256."""
    frames = []
    for p in range(1, 33):
        rows = [(p, target, route) for target, route in enumerate(route_values(p))]
        frames.append(
            connect_spark.createDataFrame(rows, "p int, target int, route int")
            .repartition(p, "route")
            .selectExpr("p", "target", "spark_partition_id() AS landed")
        )
    landed = reduce(lambda a, b: a.unionAll(b), frames).collect()
    assert len(landed) == sum(range(1, 33))
    assert [(r.p, r.target) for r in landed if r.target != r.landed] == []
    rows = [(p, t, r) for p in range(1, 257) for t, r in enumerate(route_values(p))]
    wrong = (
        connect_spark.createDataFrame(rows, "p int, target int, route int")
        .filter("pmod(hash(route), p) != target")
        .count()
    )
    assert wrong == 0


def test_keyed_count_on_spark_connect(connect_spark, tmp_path):
    assert is_connect_session(connect_spark)
    data = records(300, 17)
    env = make_env(connect_spark)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    sink = count_job(env, data)
    result = env.execute("count-connect")
    out = sink.get_results()
    expected = Counter(k for k, _ in data)
    assert len(out) == len(data)
    assert final_counts(out) == dict(expected)
    for k, n in expected.items():
        assert sorted(c for kk, c in out if kk == k) == list(range(1, n + 1))
    acc = result.get_all_accumulator_results()
    assert acc["epochs"] >= 6 and acc["checkpoints"] >= 6


def test_the_state_processor_api_refuses_a_connect_session(connect_spark):
    from streamstate.errors import ConfigurationError
    from streamstate.spark.state_processor.reader import SavepointReader

    with pytest.raises(ConfigurationError, match="classic SparkSession"):
        SavepointReader(connect_spark, "unused", None, None)  # type: ignore[arg-type]


def _spec_files(job_id: str) -> list[str]:
    """The job's stage spec files in this process's scratch directories."""
    scratch = os.path.join(runtime_dir(), "scratch")
    return glob.glob(os.path.join(scratch, "specs-*", f"streamstate-{job_id}-*.spec"))


@pytest.mark.parametrize("session", ["connect_spark", "classic_spark"])
def test_a_large_stage_spec_travels_as_a_file(session, request):
    """A collection larger than the 64 KiB inline limit: its stage spec is shipped once per
    job as a file (a Connect artifact; ``addFile`` on a classic session) and read with
    SparkFiles by the tasks; the DataFrame runner on both sessions. The file is written in
    a claimed scratch directory of this process: on Spark Connect, which holds the upload,
    it is gone when the job ends; on a classic session, whose executors fetch it from the
    driver whenever one starts, it stays, claimed, until this process exits."""
    spark = request.getfixturevalue(session)
    data = [(f"key-{i % 97}", "x" * 40) for i in range(6000)]
    env = make_env(spark, epoch_records=2000, **{"execution.runner": "dataframe"})
    sink = count_job(env, data)
    job_id = env.execute(f"large-spec-{session}").get_job_id()
    assert final_counts(sink.get_results()) == dict(Counter(k for k, _ in data))
    left = _spec_files(job_id)
    if session == "connect_spark":
        assert left == []
        return
    assert left  # the source's spec (the collection)
    with open(os.path.join(os.path.dirname(left[0]), OWNER_FILE)) as f:
        assert Owner.decode(f.read().strip()).pid == os.getpid()


def test_spark_settings_a_connect_session_cannot_take_are_named_once(connect_server):
    """A job's ``spark.*`` keys go to its Connect session; those the server refuses (core
    and static settings) are named in one warning with what to do, once per process."""
    from streamstate.common import Configuration

    conf = Configuration()
    conf.set_string("spark.sql.shuffle.partitions", "3")
    conf.set_string("spark.executor.memory", "2g")
    conf.set_string("spark.sql.warehouse.dir", "/tmp/elsewhere")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = connect_session(connect_server.url, conf)
        again = connect_session(connect_server.url, conf)
    try:
        assert session.conf.get("spark.sql.shuffle.partitions") == "3"
        named = [w for w in caught if issubclass(w.category, IgnoredSparkSettingWarning)]
        assert len(named) == 1
        text = str(named[0].message)
        assert "spark.executor.memory" in text and "spark.sql.warehouse.dir" in text
        assert "spark.sql.shuffle.partitions" not in text
        assert "streamstate local start --conf" in text
    finally:
        session.stop()
        again.stop()


def test_a_job_stops_the_connect_session_it_made_and_to_dataframe_keeps_one(
    connect_server, monkeypatch
):
    """A job given no session makes a Connect session of its own (``spark.remote``) and
    stops it at its end, once its hosts were asked to stop: nothing of it stays open for
    pyspark's exit hook. ``to_dataframe()`` without a session lends the job a session that
    stays open with the DataFrame it returns."""
    from streamstate.spark import runners
    from streamstate.spark.runner import join_host_stoppers

    made = []

    def recorded(configuration):
        session = connect_session_for(configuration)
        made.append(session)
        return session

    connect_session_for = runners.connect_session_for
    monkeypatch.setattr(runners, "connect_session_for", recorded)
    data = records(60, 7)
    env = _env_of_no_session(connect_server.url)
    sink = count_job(env, data)
    env.execute("own-session")
    join_host_stoppers()  # the session is stopped after the hosts' stopping job
    assert final_counts(sink.get_results()) == dict(Counter(k for k, _ in data))
    assert len(made) == 1 and made[0].is_stopped

    env = _env_of_no_session(connect_server.url)
    frame = (
        env.from_collection(data)
        .key_by(lambda v: v[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .to_dataframe()
    )
    join_host_stoppers()
    try:
        assert len(made) == 2 and not made[1].is_stopped
        assert frame.sparkSession is made[1]
        rows = frame.collect()
        assert final_counts([(r[0], r[1]) for r in rows]) == dict(Counter(k for k, _ in data))
    finally:
        made[1].stop()


def _env_of_no_session(url: str):
    """A Spark job environment given no session, its server named by ``spark.remote``."""
    from tests.support import envs

    remote = {"execution.runner": "spark", "spark.remote": url}
    return envs.make_env(max_records=20, restarts=3, conf=remote)


def test_one_exit_hook_closes_the_owned_sessions_left_open(connect_server, monkeypatch):
    """Sessions jobs made for themselves wait for their stopping thread in ONE registry
    with ONE exit hook, moved to the top of the exit stack at each registration (exit
    hooks run last-registered first: it must run before the exit hook of the newest
    client): a stopped session leaves the registry, and the hook closes the clients of
    those left open, without an RPC."""
    import atexit

    from streamstate.spark import dataframe_runner
    from streamstate.spark.dataframe_runner import _OwnedSessions
    from streamstate.spark.session import connect_session

    stack: list = []  # the exit hooks registered through the module, in order

    def unregister(fn):
        stack[:] = [f for f in stack if f != fn]

    owned = _OwnedSessions()
    first, second, third = (connect_session(connect_server.url) for _ in range(3))
    monkeypatch.setattr(dataframe_runner.atexit, "register", stack.append)
    monkeypatch.setattr(dataframe_runner.atexit, "unregister", unregister)
    try:
        stack.append(first.client._on_exit)  # as if pyspark's hooks were in the same stack
        owned.add(first)
        stack.append(second.client._on_exit)
        owned.add(second)
        owned.add(third)
        assert stack == [first.client._on_exit, second.client._on_exit, owned.close_open]
        owned.stop(second)
        assert second.is_stopped
        assert owned.open_sessions() == [first, third]
        owned.close_open()
        assert owned.open_sessions() == []
        assert first.client.is_closed and third.client.is_closed
    finally:
        monkeypatch.undo()
        atexit.unregister(owned.close_open)
        for session in (first, second, third):
            session.stop()


def test_a_connect_job_sends_the_same_plan_every_epoch(connect_spark, monkeypatch):
    """The epochs of a Connect job send one plan, byte for byte (the epoch's specs travel
    in a session setting that Spark hands every task, not in the plan's functions), so the
    server's plan cache skips its analysis; the setting is gone when the job ends."""
    from pyspark.sql.connect.dataframe import DataFrame

    sent: list[bytes] = []
    collect = DataFrame.collect

    def recorded(frame):
        sent.append(frame._plan.to_proto(frame._session.client).SerializeToString())
        return collect(frame)

    monkeypatch.setattr(DataFrame, "collect", recorded)
    data = records(60, 7)
    env = make_env(connect_spark, epoch_records=10)
    sink = count_job(env, data)
    job_id = env.execute("same-plan").get_job_id()
    monkeypatch.undo()
    assert final_counts(sink.get_results()) == dict(Counter(k for k, _ in data))
    epochs = [plan for plan in sent if b"_run_subtask" in plan]
    assert len(epochs) >= 3
    assert len(set(epochs)) == 1
    assert connect_spark.conf.get(f"spark.streamstate.epoch-specs.{job_id}", None) is None


@pytest.mark.parametrize(
    ("owned", "conf", "expected"),
    [
        (True, {}, "false"),
        (True, {"spark.sql.adaptive.enabled": "true"}, "true"),
        (False, {}, "true"),
    ],
)
def test_a_jobs_own_session_runs_without_adaptive_execution(connect_server, owned, conf, expected):
    """A job's own Connect session runs its epochs without adaptive execution (a second
    Spark job per epoch, nothing to adapt), unless the job's configuration names it; a
    session the user gave keeps the user's setting."""
    from streamstate.common import Configuration
    from streamstate.spark.dataframe_runner import DataFrameEpochRunner
    from streamstate.spark.runner import join_host_stoppers

    configuration = Configuration()
    for key, value in conf.items():
        configuration.set_string(key, value)
    session = connect_session(connect_server.url, configuration)
    session.conf.set("spark.sql.adaptive.enabled", "true")  # Spark's default
    runner = DataFrameEpochRunner(session, configuration, owns_session=owned)
    try:
        runner.start("adaptive-test", None, {})
        assert session.conf.get("spark.sql.adaptive.enabled") == expected
    finally:
        runner.stop()
        join_host_stoppers()
        session.stop()
