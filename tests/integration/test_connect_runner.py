"""The DataFrame runner on a real Spark Connect server (tests/conftest.py starts it)."""

from __future__ import annotations

from collections import Counter
from functools import reduce

import pytest

from streamstate.spark.routing import route_values
from streamstate.spark.session import is_connect_session
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


@pytest.mark.parametrize("session", ["connect_spark", "classic_spark"])
def test_a_large_stage_spec_travels_as_a_file(session, request):
    """A collection larger than the 64 KiB inline limit: its stage spec is shipped once per
    job as a file (a Connect artifact; ``addFile`` on a classic session) and read with
    SparkFiles by the tasks; the DataFrame runner on both sessions."""
    spark = request.getfixturevalue(session)
    data = [(f"key-{i % 97}", "x" * 40) for i in range(6000)]
    env = make_env(spark, epoch_records=2000, **{"execution.runner": "dataframe"})
    sink = count_job(env, data)
    env.execute(f"large-spec-{session}")
    assert final_counts(sink.get_results()) == dict(Counter(k for k, _ in data))
