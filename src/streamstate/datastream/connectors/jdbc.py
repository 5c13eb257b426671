"""PyFlink's ``pyflink.datastream.connectors.jdbc`` for PostgreSQL (psycopg 3).

``JdbcSink.sink(sql, type_info, jdbc_connection_options, jdbc_execution_options)`` is
PyFlink's at-least-once sink (use ``INSERT ... ON CONFLICT`` with deterministic keys
to make replays idempotent). ``JdbcSink.exactly_once_sink(sql, type_info,
jdbc_connection_options, jdbc_execution_options, jdbc_exactly_once_options)`` mirrors
Flink's ``JdbcSink.exactlyOnceSink``: PostgreSQL prepared transactions committed
when a checkpoint completes. ``sql`` uses psycopg placeholders (``%s``); each record
(a ``Row`` or tuple) gives the parameters in order. The URL is a libpq conninfo or
``postgresql://`` URL (a ``jdbc:postgresql://`` prefix is accepted).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from streamstate.api.functions import SinkFunction
from streamstate.errors import ConfigurationError

__all__ = [
    "JdbcConnectionOptions",
    "JdbcExactlyOnceOptions",
    "JdbcExecutionOptions",
    "JdbcSink",
]


@dataclass(frozen=True)
class JdbcConnectionOptions:
    url: str
    driver_name: str | None = None
    user_name: str | None = None
    password: str | None = None

    class JdbcConnectionOptionsBuilder:
        def __init__(self) -> None:
            self._kw: dict[str, Any] = {}

        def with_url(self, url: str) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            self._kw["url"] = url.removeprefix("jdbc:")
            return self

        def with_driver_name(
            self, driver_name: str
        ) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            self._kw["driver_name"] = driver_name
            return self

        def with_user_name(
            self, user_name: str
        ) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            self._kw["user_name"] = user_name
            return self

        def with_password(
            self, password: str
        ) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            self._kw["password"] = password
            return self

        def build(self) -> JdbcConnectionOptions:
            if "url" not in self._kw:
                raise ConfigurationError(
                    "JdbcConnectionOptions needs a URL: call with_url('postgresql://host/db')"
                )
            return JdbcConnectionOptions(**self._kw)


@dataclass(frozen=True)
class JdbcExecutionOptions:
    batch_size: int = 5000
    batch_interval_ms: int = 0
    max_retries: int = 3

    @staticmethod
    def defaults() -> JdbcExecutionOptions:
        return JdbcExecutionOptions()

    @staticmethod
    def builder() -> JdbcExecutionOptions.Builder:
        return JdbcExecutionOptions.Builder()

    class Builder:
        def __init__(self) -> None:
            self._kw: dict[str, Any] = {}

        def with_batch_size(self, size: int) -> JdbcExecutionOptions.Builder:
            if size < 1:
                raise ConfigurationError(f"batch size must be >= 1, got {size}")
            self._kw["batch_size"] = size
            return self

        def with_batch_interval_ms(self, interval_ms: int) -> JdbcExecutionOptions.Builder:
            self._kw["batch_interval_ms"] = interval_ms
            return self

        def with_max_retries(self, max_retries: int) -> JdbcExecutionOptions.Builder:
            self._kw["max_retries"] = max_retries
            return self

        def build(self) -> JdbcExecutionOptions:
            return JdbcExecutionOptions(**self._kw)


@dataclass(frozen=True)
class JdbcExactlyOnceOptions:
    """``transaction_id_prefix``: the prefix of the sink's prepared-transaction ids (the
    default derives it from the statement and URL); it must be stable across restores
    and unique per sink, since recovery rolls back prepared transactions carrying it."""

    transaction_id_prefix: str | None = None

    @staticmethod
    def defaults() -> JdbcExactlyOnceOptions:
        return JdbcExactlyOnceOptions()

    @staticmethod
    def builder() -> JdbcExactlyOnceOptions.Builder:
        return JdbcExactlyOnceOptions.Builder()

    class Builder:
        def __init__(self) -> None:
            self._prefix: str | None = None

        def with_transaction_id_prefix(self, prefix: str) -> JdbcExactlyOnceOptions.Builder:
            if not prefix or "'" in prefix or "%" in prefix:
                raise ConfigurationError(
                    f"transaction id prefix {prefix!r} must be non-empty, without ' or %"
                )
            self._prefix = prefix
            return self

        def build(self) -> JdbcExactlyOnceOptions:
            return JdbcExactlyOnceOptions(self._prefix)


class JdbcSink:
    @staticmethod
    def sink(
        sql: str,
        type_info: Any,
        jdbc_connection_options: JdbcConnectionOptions,
        jdbc_execution_options: JdbcExecutionOptions | None = None,
    ) -> SinkFunction:
        """At-least-once: each epoch's rows are written (committed) before it completes."""
        from streamstate.connectors.postgres import PostgresBatchSink

        ex = jdbc_execution_options or JdbcExecutionOptions.defaults()
        c = jdbc_connection_options
        return PostgresBatchSink(sql, c.url, c.user_name, c.password, ex.batch_size)

    @staticmethod
    def exactly_once_sink(
        sql: str,
        type_info: Any,
        jdbc_connection_options: JdbcConnectionOptions,
        jdbc_execution_options: JdbcExecutionOptions | None = None,
        jdbc_exactly_once_options: JdbcExactlyOnceOptions | None = None,
    ) -> SinkFunction:
        """Exactly-once through PostgreSQL prepared transactions (two-phase commit)."""
        from streamstate.connectors.postgres import PostgresTwoPhaseCommitSink

        ex = jdbc_execution_options or JdbcExecutionOptions.defaults()
        eo = jdbc_exactly_once_options or JdbcExactlyOnceOptions.defaults()
        c = jdbc_connection_options
        prefix = eo.transaction_id_prefix or (
            "ss" + hashlib.sha256(f"{sql}\0{c.url}".encode()).hexdigest()[:12]
        )
        return PostgresTwoPhaseCommitSink(
            sql, c.url, c.user_name, c.password, ex.batch_size, prefix
        )
