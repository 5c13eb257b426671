"""Window functions (public via ``streamstate.api.functions``), as PyFlink's.

``WindowFunction.apply(key, window, inputs)`` and
``ProcessWindowFunction.process(key, context, elements)`` for keyed windows;
``AllWindowFunction.apply(window, inputs)`` and
``ProcessAllWindowFunction.process(context, elements)`` for ``window_all``.
They return an iterable of outputs (typically a generator) or None.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from streamstate.api.functions import Function

__all__ = [
    "AllWindowFunction",
    "ProcessAllWindowFunction",
    "ProcessWindowFunction",
    "WindowFunction",
]

# Type parameters as PyFlink's (``ProcessWindowFunction[tuple, tuple, str, TimeWindow]``).
IN = TypeVar("IN")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")
W = TypeVar("W")
#: the window type of a window function's Context (``Context[TimeWindow]``, as PyFlink's)
W2 = TypeVar("W2")


class WindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """Evaluated over the contents of one keyed window."""

    @abstractmethod
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any] | None: ...


class AllWindowFunction(Function, Generic[IN, OUT, W]):
    """Evaluated over the contents of one non-keyed window (``window_all``)."""

    @abstractmethod
    def apply(self, window: Any, inputs: Iterable[Any]) -> Iterable[Any] | None: ...


class _WindowContext(ABC, Generic[W2]):
    @abstractmethod
    def window(self) -> Any:
        """The window being evaluated."""

    @abstractmethod
    def current_processing_time(self) -> int: ...

    @abstractmethod
    def current_watermark(self) -> int: ...

    @abstractmethod
    def window_state(self) -> Any:
        """Keyed state scoped to the key and this window (clean it up in ``clear``)."""

    @abstractmethod
    def global_state(self) -> Any:
        """Keyed state of the key, shared by all its windows."""

    def output(self, output_tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``output_tag`` (as Java's ``Context.output``)."""
        raise NotImplementedError


class ProcessWindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """Evaluated over one keyed window, with a context (window, time, per-window state)."""

    class Context(_WindowContext[W2]):
        """The context of :meth:`ProcessWindowFunction.process` and ``clear``."""

    @abstractmethod
    def process(
        self, key: Any, context: ProcessWindowFunction.Context, elements: Iterable[Any]
    ) -> Iterable[Any] | None: ...

    def clear(self, context: ProcessWindowFunction.Context) -> None:  # optional hook
        """Delete per-window state when the window is purged (after its allowed lateness)."""


class ProcessAllWindowFunction(Function, Generic[IN, OUT, W]):
    """Evaluated over one non-keyed window (``window_all``), with a context."""

    class Context(_WindowContext[W2]):
        """The context of :meth:`ProcessAllWindowFunction.process` and ``clear``."""

    @abstractmethod
    def process(
        self, context: ProcessAllWindowFunction.Context, elements: Iterable[Any]
    ) -> Iterable[Any] | None: ...

    def clear(self, context: ProcessAllWindowFunction.Context) -> None:
        """Delete per-window state when the window is purged."""
