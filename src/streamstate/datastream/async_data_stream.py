"""``AsyncDataStream``, as ``pyflink.datastream.async_data_stream``: async I/O.

``AsyncDataStream.unordered_wait(ds, MyLookup(), Time.seconds(5), capacity=100)`` calls
``await MyLookup().async_invoke(record)`` with up to ``capacity`` calls in flight per
subtask; ``ordered_wait`` keeps the input order; the ``*_with_retry`` forms retry by an
``AsyncRetryStrategy``. See ``runtime/operators/async_wait.py`` for how an epoch waits
for its calls (Flink's drain before a checkpoint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamstate.api.async_functions import (
    AsyncFunction,
    AsyncFunctionDescriptor,
    AsyncRetryStrategy,
)
from streamstate.common._unsupported import unsupported_attribute
from streamstate.errors import ConfigurationError

if TYPE_CHECKING:
    from streamstate.datastream.data_stream import DataStream

__all__ = ["AsyncDataStream"]

_ORDERED = AsyncFunctionDescriptor.OutputMode.ORDERED
_UNORDERED = AsyncFunctionDescriptor.OutputMode.UNORDERED


class AsyncDataStream:
    @staticmethod
    def unordered_wait(
        data_stream: DataStream,
        async_function: AsyncFunction[Any, Any],
        timeout: Any,
        capacity: int = 100,
        output_type: Any = None,
    ) -> DataStream:
        """Outputs in the order the calls complete."""
        return _wait(data_stream, async_function, timeout, None, capacity, output_type, _UNORDERED)

    @staticmethod
    def unordered_wait_with_retry(
        data_stream: DataStream,
        async_function: AsyncFunction[Any, Any],
        timeout: Any,
        async_retry_strategy: AsyncRetryStrategy[Any],
        capacity: int = 100,
        output_type: Any = None,
    ) -> DataStream:
        return _wait(
            data_stream,
            async_function,
            timeout,
            async_retry_strategy,
            capacity,
            output_type,
            _UNORDERED,
        )

    @staticmethod
    def ordered_wait(
        data_stream: DataStream,
        async_function: AsyncFunction[Any, Any],
        timeout: Any,
        capacity: int = 100,
        output_type: Any = None,
    ) -> DataStream:
        """Outputs in the order of the inputs."""
        return _wait(data_stream, async_function, timeout, None, capacity, output_type, _ORDERED)

    @staticmethod
    def ordered_wait_with_retry(
        data_stream: DataStream,
        async_function: AsyncFunction[Any, Any],
        timeout: Any,
        async_retry_strategy: AsyncRetryStrategy[Any],
        capacity: int = 100,
        output_type: Any = None,
    ) -> DataStream:
        return _wait(
            data_stream,
            async_function,
            timeout,
            async_retry_strategy,
            capacity,
            output_type,
            _ORDERED,
        )


def _wait(
    data_stream: DataStream,
    async_function: Any,
    timeout: Any,
    strategy: Any,
    capacity: int,
    output_type: Any,
    mode: AsyncFunctionDescriptor.OutputMode,
) -> DataStream:
    from streamstate.datastream.data_stream import DataStream
    from streamstate.runtime.operators import stateless
    from streamstate.runtime.operators.async_wait import AsyncWaitOperator

    if not callable(getattr(async_function, "async_invoke", None)):
        raise ConfigurationError(
            f"AsyncDataStream needs an AsyncFunction (async def async_invoke(value)), got "
            f"{type(async_function).__name__}"
        )
    descriptor = AsyncFunctionDescriptor(async_function, timeout, capacity, strategy, mode)
    stream = data_stream
    if data_stream._is_keyed_stream:  # the records without their key, as Flink's operator sees them
        stream = DataStream._one_input(data_stream, "KeyedValues", stateless.KeyedValuesOperator)
    return stream._one_input(
        "Async Wait", lambda: AsyncWaitOperator(descriptor), output_type=output_type
    )


if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
