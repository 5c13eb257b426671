"""Internal window functions: one calling convention for every user window function.

``process(key, window, context, contents) -> iterable | None`` where
``contents`` is the single reduced/aggregated value for ``reduce``/``aggregate``
windows and the list of elements for ``apply``/``process`` windows. ``clear``
runs when a window is purged (``ProcessWindowFunction.clear``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamstate.runtime.operators.base import close_function, open_function

__all__ = ["InternalWindowFunction", "internal_window_function"]


class InternalWindowFunction:
    """Adapts a user window function (or none: pass-through) to one call shape."""

    #: "pass" (emit the single value), "window" (WindowFunction.apply),
    #: "process" (ProcessWindowFunction.process), "all" (AllWindowFunction.apply),
    #: "process_all" (ProcessAllWindowFunction.process)
    def __init__(self, fn: Any, kind: str, single_value: bool) -> None:
        self.fn = fn
        self.kind = kind
        self.single_value = single_value

    def open(self, ctx: Any) -> None:
        if self.fn is not None:
            open_function(self.fn, ctx)

    def close(self) -> None:
        if self.fn is not None:
            close_function(self.fn)

    def process(self, key: Any, window: Any, context: Any, contents: Any) -> Any:
        kind = self.kind
        if kind == "pass":
            return (contents,)
        inputs = [contents] if self.single_value else contents
        if kind == "window":
            return self.fn.apply(key, window, inputs)
        if kind == "all":
            return self.fn.apply(window, inputs)
        if kind == "process":
            return self.fn.process(key, context, inputs)
        return self.fn.process(context, inputs)

    def caller(self) -> Callable[[Any, Any, Any, Any], Any]:
        """:meth:`process` made for this function's kind once: the firing loop calls it
        per (key, window) without the dispatch on the kind."""
        fn = self.fn
        if self.kind == "window" and self.single_value:
            apply = fn.apply
            return lambda key, window, context, contents: apply(key, window, [contents])
        if self.kind == "process" and self.single_value:
            process = fn.process
            return lambda key, window, context, contents: process(key, context, [contents])
        return self.process

    def clear(self, window: Any, context: Any) -> None:
        if self.kind in ("process", "process_all"):
            clear = getattr(self.fn, "clear", None)
            if clear is not None:
                clear(context)


def internal_window_function(fn: Any, single_value: bool, all_windows: bool) -> Any:
    """The internal function for a user window function (``None``: pass the value through).

    Raises ``TypeError`` for objects that are no window function (as PyFlink).
    """
    from streamstate.api.window_functions import (
        AllWindowFunction,
        ProcessAllWindowFunction,
        ProcessWindowFunction,
        WindowFunction,
    )

    if fn is None:
        return InternalWindowFunction(None, "pass", single_value)
    if all_windows:
        if isinstance(fn, ProcessAllWindowFunction):
            return InternalWindowFunction(fn, "process_all", single_value)
        if isinstance(fn, AllWindowFunction) or callable(getattr(fn, "apply", None)):
            return InternalWindowFunction(fn, "all", single_value)
        raise TypeError(
            "window_function should be an AllWindowFunction or ProcessAllWindowFunction, got "
            f"{type(fn).__name__}"
        )
    if isinstance(fn, ProcessWindowFunction):
        return InternalWindowFunction(fn, "process", single_value)
    if isinstance(fn, WindowFunction) or callable(getattr(fn, "apply", None)):
        return InternalWindowFunction(fn, "window", single_value)
    raise TypeError(
        f"window_function should be a WindowFunction or ProcessWindowFunction, got "
        f"{type(fn).__name__}"
    )
