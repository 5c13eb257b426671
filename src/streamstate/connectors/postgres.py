"""PostgreSQL sinks (psycopg 3): exactly-once via prepared transactions, and at-least-once.

:class:`PostgresTwoPhaseCommitSink` is a :class:`TwoPhaseCommitSinkFunction`: one
database transaction per subtask and epoch, written in batches while the epoch
runs, ``PREPARE TRANSACTION '<gid>'`` at its end (pre-commit), ``COMMIT PREPARED``
on the driver once a checkpoint covers the epoch. Transaction ids are
deterministic: ``<prefix>-<subtask>-<epoch>-<attempt>``; after a restore every
prepared transaction with the sink's prefix that the checkpoint does not hold is
rolled back, so none is left prepared. A lost connection raises, which fails the
epoch; the restart strategy takes over and nothing half-written is visible.

:class:`PostgresBatchSink` writes each epoch's rows in one autocommit batch per
subtask (at-least-once: a replayed epoch writes again, so give it an idempotent
``INSERT ... ON CONFLICT`` statement with deterministic keys for effectively-once).
"""

from __future__ import annotations

import re
from typing import Any

from streamstate.api.checkpointing import CheckpointedFunction
from streamstate.api.functions import SinkFunction
from streamstate.connectors.two_phase_commit import TwoPhaseCommitSinkFunction
from streamstate.connectors.write_ahead import CheckpointCommitter, GenericWriteAheadSink
from streamstate.errors import ConfigurationError

__all__ = [
    "PostgresBatchSink",
    "PostgresCheckpointCommitter",
    "PostgresTwoPhaseCommitSink",
    "PostgresWriteAheadSink",
]


def _connect(url: str, user: str | None, password: str | None) -> Any:
    import psycopg

    kw: dict[str, Any] = {"autocommit": True}
    if user is not None:
        kw["user"] = user
    if password is not None:
        kw["password"] = password
    return psycopg.connect(url, **kw)


_PLAIN_INSERT = re.compile(
    r"\s*INSERT\s+INTO\s+([\w.\"]+)\s*\(([^()]*)\)\s*VALUES\s*\(([%s,\s]*)\)\s*;?\s*",
    re.IGNORECASE,
)


def copy_statement(sql: str) -> str | None:
    """``COPY <table> (<columns>) FROM STDIN`` for a plain ``INSERT INTO <table>
    (<columns>) VALUES (%s, ...)`` (one placeholder per column, nothing after it), else
    None: such an insert is written with ``COPY``, several times faster than
    ``executemany`` and the same rows (``ON CONFLICT``, ``RETURNING``, expressions keep
    the statement)."""
    m = _PLAIN_INSERT.fullmatch(sql)
    if m is None:
        return None
    columns = [c.strip() for c in m.group(2).split(",")]
    placeholders = [p.strip() for p in m.group(3).split(",")]
    if (
        not all(columns)
        or any(p != "%s" for p in placeholders)
        or len(columns) != len(placeholders)
    ):
        return None
    return f"COPY {m.group(1)} ({', '.join(columns)}) FROM STDIN"


def _params(value: Any) -> Any:
    return tuple(value) if isinstance(value, list | tuple) or hasattr(value, "_values") else value


class _Connected:
    """Lazily opened connection that does not travel in pickles."""

    url: str
    user: str | None
    password: str | None
    _conn: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = _connect(self.url, self.user, self.password)
        return self._conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class PostgresTwoPhaseCommitSink(_Connected, TwoPhaseCommitSinkFunction):
    """Exactly-once PostgreSQL sink (needs ``max_prepared_transactions > 0``)."""

    def __init__(
        self,
        sql: str,
        url: str,
        user: str | None,
        password: str | None,
        batch_size: int,
        transaction_id_prefix: str,
    ) -> None:
        self.sql, self.url, self.user, self.password = sql, url, user, password
        self.batch_size = batch_size
        self.prefix = transaction_id_prefix
        self.copy_sql = copy_statement(sql)
        self.rows: list[Any] = []
        self.ctx: Any = None

    def open(self, runtime_context: Any) -> None:
        self.ctx = runtime_context

    def close(self) -> None:
        self._disconnect()

    def begin_transaction(self) -> str:
        ctx = self.ctx
        gid = (
            f"{self.prefix}-{ctx.get_index_of_this_subtask()}-{getattr(ctx, 'epoch', 0)}-"
            f"{ctx.get_attempt_number()}"
        )
        self._connection().execute("BEGIN")
        self.rows = []
        return gid

    def _flush(self) -> None:
        if self.rows:
            copy_sql = getattr(self, "copy_sql", None)
            with self._connection().cursor() as cur:
                if copy_sql is None:
                    cur.executemany(self.sql, self.rows)
                else:
                    with cur.copy(copy_sql) as copy:
                        for row in self.rows:
                            copy.write_row(row)
            self.rows = []

    def invoke(self, transaction: str, value: Any, context: Any) -> None:  # type: ignore[override]  # Flink's 2PC signature: the transaction comes first
        self.rows.append(_params(value))
        if len(self.rows) >= self.batch_size:
            self._flush()

    def pre_commit(self, transaction: str) -> None:
        self._flush()
        self._connection().execute(f"PREPARE TRANSACTION '{transaction}'")

    def _prepared(self, conn: Any, like: str) -> list[str]:
        rows = conn.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (like,))
        return [r[0] for r in rows.fetchall()]

    def commit(self, transaction: str) -> None:
        conn = self._connection()
        if self._prepared(conn, transaction):  # idempotent: a committed one is gone
            conn.execute(f"COMMIT PREPARED '{transaction}'")

    def abort(self, transaction: str) -> None:
        conn = self._connection()
        if conn.info.transaction_status != 0:  # open here (not prepared yet): roll it back
            conn.execute("ROLLBACK")
            self.rows = []
        if self._prepared(conn, transaction):
            conn.execute(f"ROLLBACK PREPARED '{transaction}'")

    def recover_and_abort_orphans(self, keep: list[str]) -> None:
        conn = self._connection()
        for gid in self._prepared(conn, self.prefix.replace("_", r"\_") + "-%"):
            if gid not in keep:
                conn.execute(f"ROLLBACK PREPARED '{gid}'")


class PostgresBatchSink(_Connected, SinkFunction, CheckpointedFunction):
    """At-least-once PostgreSQL sink: batches of ``batch_size`` rows, autocommitted."""

    def __init__(
        self, sql: str, url: str, user: str | None, password: str | None, batch_size: int
    ) -> None:
        self.sql, self.url, self.user, self.password = sql, url, user, password
        self.batch_size = batch_size
        self.rows: list[Any] = []

    def invoke(self, value: Any, context: Any) -> None:
        self.rows.append(_params(value))
        if len(self.rows) >= self.batch_size:
            self._flush()

    def _flush(self) -> None:
        if self.rows:
            conn = self._connection()
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(self.sql, self.rows)
            self.rows = []

    def snapshot_state(self, context: Any) -> None:
        self._flush()  # every epoch end: the epoch's rows are written before it completes

    def initialize_state(self, context: Any) -> None:
        self.rows = []

    def close(self) -> None:
        self._disconnect()


class PostgresCheckpointCommitter(_Connected, CheckpointCommitter):
    """A write-ahead sink's commit records in a PostgreSQL table (default
    ``streamstate_checkpoint_commits``): per (job, operator, subtask) the highest checkpoint
    written (a sink writes its checkpoints in order, so every lower one is written too)."""

    def __init__(
        self,
        url: str,
        user: str | None = None,
        password: str | None = None,
        table: str = "streamstate_checkpoint_commits",
    ) -> None:
        if not table.replace("_", "").replace(".", "").isalnum():
            raise ConfigurationError(f"table must be a plain SQL identifier, got {table!r}")
        self.url, self.user, self.password, self.table = (
            url.removeprefix("jdbc:"),
            user,
            password,
            table,
        )

    def create_resource(self) -> None:
        conn = self._connection()
        # Subtasks create the table concurrently, and two racing CREATE TABLE IF NOT EXISTS
        # can fail on PostgreSQL's catalog index: a transaction-scoped advisory lock on the
        # table's name serializes them.
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self.table} (job_id TEXT NOT NULL, "
                f"operator_id TEXT NOT NULL, subtask INT NOT NULL, "
                f"checkpoint_id BIGINT NOT NULL, PRIMARY KEY (job_id, operator_id, subtask))"
            )

    def close(self) -> None:
        self._disconnect()

    def commit_checkpoint(
        self, subtask_idx: int, checkpoint_id: int, connection: Any = None
    ) -> None:
        """Record the commit; with ``connection``, inside that connection's open transaction
        (write the values and the record atomically: a failure between them is impossible)."""
        conn = connection if connection is not None else self._connection()
        conn.execute(
            f"INSERT INTO {self.table} (job_id, operator_id, subtask, checkpoint_id) "
            f"VALUES (%s, %s, %s, %s) ON CONFLICT (job_id, operator_id, subtask) DO UPDATE "
            f"SET checkpoint_id = GREATEST({self.table}.checkpoint_id, EXCLUDED.checkpoint_id)",
            (self.job_id, self.operator_id, subtask_idx, checkpoint_id),
        )

    def is_checkpoint_committed(self, subtask_idx: int, checkpoint_id: int) -> bool:
        row = (
            self._connection()
            .execute(
                f"SELECT checkpoint_id FROM {self.table} WHERE job_id = %s AND operator_id = %s "
                f"AND subtask = %s",
                (self.job_id, self.operator_id, subtask_idx),
            )
            .fetchone()
        )
        return row is not None and checkpoint_id <= row[0]


class PostgresWriteAheadSink(_Connected, GenericWriteAheadSink):
    """Exactly-once without prepared transactions: a write-ahead sink that writes a
    checkpoint's rows and its commit record (``PostgresCheckpointCommitter`` on the same
    database) in one transaction, once the checkpoint completed."""

    def __init__(
        self,
        sql: str,
        url: str,
        user: str | None = None,
        password: str | None = None,
        committer: PostgresCheckpointCommitter | None = None,
        batch_size: int = 5000,
    ) -> None:
        url = url.removeprefix("jdbc:")
        GenericWriteAheadSink.__init__(
            self, committer or PostgresCheckpointCommitter(url, user, password)
        )
        self.sql, self.url, self.user, self.password = sql, url, user, password
        self.batch_size = batch_size

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_conn"}

    def send_values(self, values: list[Any], checkpoint_id: int, timestamp: int) -> bool:
        conn = self._connection()
        committer = self.committer
        assert isinstance(committer, PostgresCheckpointCommitter)
        with conn.transaction(), conn.cursor() as cur:
            for i in range(0, len(values), self.batch_size):
                cur.executemany(self.sql, [_params(v) for v in values[i : i + self.batch_size]])
            committer.commit_checkpoint(self._sending_subtask, checkpoint_id, connection=conn)
        return True

    def close(self) -> None:
        GenericWriteAheadSink.close(self)
        self._disconnect()
