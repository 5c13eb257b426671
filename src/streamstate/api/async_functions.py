"""Async I/O, as PyFlink's ``AsyncFunction``, ``AsyncRetryStrategy``,
``AsyncRetryPredicate`` and ``AsyncFunctionDescriptor``.

``AsyncDataStream.unordered_wait(ds, fn, timeout, capacity)`` runs ``await
fn.async_invoke(value)`` for up to ``capacity`` records at a time on the subtask's event
loop (``runtime/operators/async_wait.py``); each call returns a list of outputs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from enum import Enum
from typing import Any, Generic, TypeVar

from streamstate.api.functions import Function
from streamstate.errors import ConfigurationError

__all__ = [
    "AsyncFunction",
    "AsyncFunctionDescriptor",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
]

IN = TypeVar("IN")
OUT = TypeVar("OUT")


class AsyncFunction(Function, Generic[IN, OUT]):
    """``async def async_invoke(value) -> list``: the outputs of one input."""

    @abstractmethod
    async def async_invoke(self, value: IN) -> list[OUT]: ...

    def timeout(self, value: IN) -> list[OUT]:
        """Called when ``async_invoke`` did not finish in time; raises by default (the job
        fails and restarts), or return outputs to use instead."""
        raise TimeoutError("Async function call has timed out for input: " + str(value))


class AsyncRetryPredicate(ABC, Generic[OUT]):
    """When to retry: on a result (``result_predicate``) or an exception."""

    @abstractmethod
    def result_predicate(self) -> Callable[[list[OUT]], bool] | None: ...

    @abstractmethod
    def exception_predicate(self) -> Callable[[Exception], bool] | None: ...


class _RetryPredicate(AsyncRetryPredicate[Any]):
    def __init__(self, result: Any, exception: Any) -> None:
        self._result = result
        self._exception = exception

    def result_predicate(self) -> Any:
        return self._result

    def exception_predicate(self) -> Any:
        return self._exception


class AsyncRetryStrategy(ABC, Generic[OUT]):
    """Whether and when a failed or unwanted ``async_invoke`` is tried again."""

    @abstractmethod
    def can_retry(self, current_attempts: int) -> bool: ...

    @abstractmethod
    def get_backoff_time_millis(self, current_attempts: int) -> int: ...

    @abstractmethod
    def get_retry_predicate(self) -> AsyncRetryPredicate[OUT]: ...

    @staticmethod
    def no_restart() -> AsyncRetryStrategy[Any]:
        return _NoRetry()

    @staticmethod
    def fixed_delay(
        max_attempts: int,
        backoff_time_millis: int,
        result_predicate: Callable[[list[Any]], bool] | None = None,
        exception_predicate: Callable[[Exception], bool] | None = None,
    ) -> AsyncRetryStrategy[Any]:
        _positive(max_attempts=max_attempts, backoff_time_millis=backoff_time_millis)
        return _Backoff(
            max_attempts,
            backoff_time_millis,
            backoff_time_millis,
            1.0,
            result_predicate,
            exception_predicate,
        )

    @staticmethod
    def exponential_backoff(
        max_attempts: int,
        initial_delay: int,
        max_retry_delay: int,
        multiplier: float,
        result_predicate: Callable[[list[Any]], bool] | None = None,
        exception_predicate: Callable[[Exception], bool] | None = None,
    ) -> AsyncRetryStrategy[Any]:
        _positive(
            max_attempts=max_attempts,
            initial_delay=initial_delay,
            max_retry_delay=max_retry_delay,
            multiplier=multiplier,
        )
        return _Backoff(
            max_attempts,
            initial_delay,
            max_retry_delay,
            multiplier,
            result_predicate,
            exception_predicate,
        )


def _positive(**values: float) -> None:
    for name, v in values.items():
        if v <= 0:
            raise ConfigurationError(f"{name} should be greater than zero, got {v!r}")


class _NoRetry(AsyncRetryStrategy[Any]):
    def can_retry(self, current_attempts: int) -> bool:
        return False

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return -1

    def get_retry_predicate(self) -> AsyncRetryPredicate[Any]:
        return _RetryPredicate(None, None)


class _Backoff(AsyncRetryStrategy[Any]):
    """Fixed delay (multiplier 1) or exponential backoff, as PyFlink's strategies:
    attempt ``n`` (1-based) may be retried while ``n <= max_attempts``."""

    def __init__(
        self,
        max_attempts: int,
        initial_delay: int,
        max_retry_delay: int,
        multiplier: float,
        result_predicate: Any,
        exception_predicate: Any,
    ) -> None:
        self._max_attempts = max_attempts
        self._initial = initial_delay
        self._max_delay = max_retry_delay
        self._multiplier = multiplier
        self._predicate = _RetryPredicate(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self._max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        delay = self._initial * self._multiplier ** max(0, current_attempts - 1)
        return int(min(delay, self._max_delay))

    def get_retry_predicate(self) -> AsyncRetryPredicate[Any]:
        return self._predicate


class AsyncFunctionDescriptor:
    """What ``AsyncDataStream`` hands to its operator."""

    class OutputMode(Enum):
        ORDERED = 0
        UNORDERED = 1

    def __init__(
        self,
        async_function: AsyncFunction[Any, Any],
        timeout: Any,
        capacity: int,
        async_retry_strategy: AsyncRetryStrategy[Any] | None,
        output_mode: AsyncFunctionDescriptor.OutputMode,
    ) -> None:
        from streamstate.common.time import to_millis

        if not isinstance(capacity, int) or capacity < 1:
            raise ConfigurationError(f"capacity must be a positive int, got {capacity!r}")
        timeout_ms = to_millis(timeout)
        if timeout_ms <= 0:
            raise ConfigurationError(f"timeout must be positive, got {timeout!r}")
        self.async_function = async_function
        self.timeout_ms = timeout_ms
        self.capacity = capacity
        self.async_retry_strategy = async_retry_strategy or AsyncRetryStrategy.no_restart()
        self.output_mode = output_mode
