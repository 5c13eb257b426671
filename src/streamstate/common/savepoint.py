"""Savepoint formats, and the future a savepoint request returns (PyFlink's shapes)."""

from __future__ import annotations

import concurrent.futures
from enum import Enum
from typing import Any

__all__ = ["CompletableFuture", "SavepointFormatType"]


class SavepointFormatType(Enum):
    """CANONICAL: the backend-independent format (restores on any state backend).
    NATIVE: the state backend's own files (RocksDB: its SST files; faster to take and
    restore, restores on the same backend). DEFAULT is CANONICAL, as in Flink."""

    CANONICAL = "CANONICAL"
    NATIVE = "NATIVE"
    DEFAULT = "CANONICAL_DEFAULT"


class CompletableFuture:
    """The result of an asynchronous job operation (``JobClient.trigger_savepoint``, ...)."""

    def __init__(self, future: concurrent.futures.Future[Any] | None = None) -> None:
        self._future: concurrent.futures.Future[Any] = future or concurrent.futures.Future()

    def cancel(self) -> bool:
        return self._future.cancel()

    def cancelled(self) -> bool:
        return self._future.cancelled()

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the value (re-raises the operation's error)."""
        return self._future.result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._future.exception(timeout)

    def __str__(self) -> str:
        return f"CompletableFuture(done={self.done()})"
