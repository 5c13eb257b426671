"""PostgreSQL sinks against a real server (Debian's postgresql, started per module)."""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest

from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
    JdbcSink,
)
from streamstate.errors import ConfigurationError
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.support import envs

N = 40


@pytest.fixture
def table(pg) -> str:
    with psycopg.connect(pg, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS t")
        c.execute("CREATE TABLE t (k INT PRIMARY KEY, v TEXT)")
    return "t"


@pytest.fixture
def clock():
    with use_default_clock(TickingClock()) as c:
        yield c


def rows(pg: str) -> list[int]:
    with psycopg.connect(pg) as c:
        return [r[0] for r in c.execute("SELECT k FROM t ORDER BY k").fetchall()]


def prepared(pg: str) -> list[str]:
    with psycopg.connect(pg) as c:
        return [r[0] for r in c.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]


def options(pg: str) -> JdbcConnectionOptions:
    return JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url("jdbc:" + pg).build()


def env_for(tmp_path, interval: int = 1):
    env = envs.make_env(max_records=5)
    env.enable_checkpointing(interval)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    return env


def to_row(i: int) -> tuple[int, str]:
    return i, f"v{i}"


def exactly_once(pg: str):
    return JdbcSink.exactly_once_sink(
        "INSERT INTO t (k, v) VALUES (%s, %s)",
        None,
        options(pg),
        JdbcExecutionOptions.builder().with_batch_size(3).build(),
        JdbcExactlyOnceOptions.builder().with_transaction_id_prefix("test").build(),
    )


@pytest.mark.parametrize("epoch, interval", [(None, 1), (3, 1), (4, 2500), (2, 10**9)])
def test_exactly_once_sink(pg, table, tmp_path, clock, epoch, interval):
    env = env_for(tmp_path, interval)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    ds = env.from_sequence(1, N)
    fail = None
    if epoch is not None:
        fail = FailOnce(str(tmp_path), epoch=epoch, subtask=1, after_records=1)
        ds = ds.map(fail)
    ds.map(to_row).add_sink(exactly_once(pg))
    result = env.execute("pg-2pc")
    if fail is not None:
        assert fail.fired and result.get_accumulator_result("restarts") == 1
    assert rows(pg) == list(range(1, N + 1))  # a duplicate would violate the primary key
    assert prepared(pg) == []


def test_nothing_visible_before_the_checkpoint(pg, table, tmp_path, clock):
    env = env_for(tmp_path, interval=3_600_000)
    env.from_sequence(1, N).map(to_row).map(SeenRows(pg, str(tmp_path / "seen"))).add_sink(
        exactly_once(pg)
    )
    env.execute("pg-2pc")
    seen = (tmp_path / "seen").read_text().split()
    assert len(seen) == N and set(seen) == {"0"}
    assert rows(pg) == list(range(1, N + 1))


class SeenRows:
    def __init__(self, pg: str, log: str) -> None:
        self.pg, self.log = pg, log

    def __call__(self, v):
        with open(self.log, "a") as f:
            f.write(f"{len(rows(self.pg))}\n")
        return v


def test_upsert_sink_is_idempotent_under_replay(pg, table, tmp_path, clock):
    env = env_for(tmp_path, interval=2500)  # epochs replayed after the failure
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    fail = FailOnce(str(tmp_path), epoch=4, subtask=0, after_records=1)
    sink = JdbcSink.sink(
        "INSERT INTO t (k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
        None,
        options(pg),
        JdbcExecutionOptions.builder().with_batch_size(4).build(),
    )
    env.from_sequence(1, N).map(fail).map(to_row).add_sink(sink)
    result = env.execute("pg-upsert")
    assert fail.fired and result.get_accumulator_result("restarts") == 1
    assert Counter(rows(pg)) == Counter(range(1, N + 1))


def test_options_are_checked():
    with pytest.raises(ConfigurationError, match="with_url"):
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder().build()
    with pytest.raises(ConfigurationError, match="prefix"):
        JdbcExactlyOnceOptions.builder().with_transaction_id_prefix("a'b")
