"""``ValueState`` of ``Types.FLOAT()``: values are float32, as PyFlink's.

PyFlink serializes state on every access, so a ``Types.FLOAT()`` value state reads
back the float32 nearest to what was written (``110.1`` -> ``110.0999984741211``).
The RocksDB backend does the same through its serializer; the heap backend keeps
live objects, so the backend hands out :class:`Float32ValueState` for these states:
``update`` stores the float32 value and every backend reads back the same number.
"""

from __future__ import annotations

from typing import Any

from streamstate.api.state import StateDescriptor, ValueState
from streamstate.common.java_strings import to_float32

__all__ = ["Float32ValueState", "with_value_conversion"]


class Float32ValueState(ValueState):
    """A value state whose ``update`` rounds to float32; everything else is the inner state's."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def value(self) -> Any:
        return self._inner.value()

    def update(self, value: Any) -> None:
        self._inner.update(None if value is None else to_float32(value))

    def clear(self) -> None:
        self._inner.clear()

    def __getattr__(self, name: str) -> Any:  # namespaces, TTL internals, ...
        return getattr(self._inner, name)


def with_value_conversion(descriptor: StateDescriptor, state: Any) -> Any:
    """``state``, or its float32 view when ``descriptor`` is a ``Types.FLOAT()`` value state."""
    ti = getattr(descriptor, "type_info", None)
    if descriptor.kind == "value" and getattr(ti, "serializer_name", None) == "float":
        return Float32ValueState(state)
    return state
