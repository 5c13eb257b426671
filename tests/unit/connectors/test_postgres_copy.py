"""The exactly-once PostgreSQL sink writes a plain ``INSERT ... VALUES (%s, ...)`` with
``COPY`` (several times faster, docs/benchmarks.md) and any other statement with
``executemany``; both give the same rows, NULLs, text with tabs and newlines, numbers,
timestamps and arrays included, and a failure in the middle of a COPY epoch restarts to
the failure-free table."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import psycopg

from streamstate.connectors.postgres import copy_statement
from streamstate.datastream.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
    JdbcSink,
)
from streamstate.testing import FailOnce, TickingClock
from tests.support import envs

COLUMNS = "i BIGINT PRIMARY KEY, t TEXT, n NUMERIC, at TIMESTAMP, tags TEXT[]"
DATA = [
    (
        i,
        None if i % 7 == 0 else f"row\t{i}\nline \\ '{i}'",
        decimal.Decimal(i) / 3 if i % 5 else None,
        dt.datetime(2024, 1, 1) + dt.timedelta(minutes=i),
        [f"a{i}", "b,c"] if i % 3 else [],
    )
    for i in range(120)
]


def test_only_plain_inserts_become_copy():
    assert copy_statement("INSERT INTO t (a, b) VALUES (%s, %s)") == "COPY t (a, b) FROM STDIN"
    assert copy_statement("insert into s.t(a) values(%s);") == "COPY s.t (a) FROM STDIN"
    for sql in [
        "INSERT INTO t (a) VALUES (%s) ON CONFLICT (a) DO NOTHING",
        "INSERT INTO t (a, b) VALUES (%s, now())",
        "INSERT INTO t VALUES (%s, %s)",
        "INSERT INTO t (a, b) VALUES (%s)",
        "INSERT INTO t (a) VALUES (%(a)s)",
        "UPDATE t SET a = %s",
    ]:
        assert copy_statement(sql) is None, sql


def run(pg: str, tmp_path: Any, table: str, sql: str, fail: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} ({COLUMNS})")
    env = envs.make_env(2, max_records=25, restarts=2 if fail else 0)
    env.set_clock(TickingClock())
    env.enable_checkpointing(2500)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / table))
    sink = JdbcSink.exactly_once_sink(
        sql.format(table=table),
        None,
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(pg).build(),
        JdbcExecutionOptions.builder().with_batch_size(10).build(),
        JdbcExactlyOnceOptions.builder().with_transaction_id_prefix(table).build(),
    )
    ds = env.from_collection(DATA)
    if fail is not None:
        ds = ds.map(fail)
    ds.rebalance().add_sink(sink)
    env.execute(table)
    with psycopg.connect(pg) as c:
        assert c.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (0,)
        return list(c.execute(f"SELECT * FROM {table} ORDER BY i").fetchall())


def test_copy_and_executemany_write_the_same_rows(pg, tmp_path):
    plain = "INSERT INTO {table} (i, t, n, at, tags) VALUES (%s, %s, %s, %s, %s)"
    # the same statement with a cast on a value: not a plain insert, executemany
    cast = "INSERT INTO {table} (i, t, n, at, tags) VALUES (%s, %s, %s::numeric, %s, %s)"
    assert copy_statement(plain.format(table="x")) and not copy_statement(cast.format(table="x"))
    copied = run(pg, tmp_path, "by_copy", plain)
    inserted = run(pg, tmp_path, "by_executemany", cast)
    assert copied == inserted
    assert [r[0] for r in copied] == list(range(120))
    assert copied[8][1] == "row\t8\nline \\ '8'" and copied[7][1] is None and copied[5][2] is None


def test_a_failure_during_a_copy_epoch_restarts_to_the_failure_free_table(pg, tmp_path):
    plain = "INSERT INTO {table} (i, t, n, at, tags) VALUES (%s, %s, %s, %s, %s)"
    expected = run(pg, tmp_path, "copy_failure_free", plain)
    fail = FailOnce(str(tmp_path), epoch=3, subtask=0, after_records=12)
    assert run(pg, tmp_path, "copy_failed", plain, fail) == expected
    assert fail.fired
