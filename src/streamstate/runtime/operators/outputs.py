"""What operators do with what user functions return: yielded side outputs, and the error
when a function returns something that is not an iterable of outputs."""

from __future__ import annotations

from typing import Any

from streamstate.api.output_tag import OutputTag
from streamstate.errors import OutputTypeError

__all__ = ["outputs_not_iterable", "split_yielded_side_outputs"]


def outputs_not_iterable(op: Any, result: Any) -> OutputTypeError:
    """The error for a process/flat_map function that returned ``result`` (not iterable)."""
    ctx = getattr(op, "ctx", None)
    name = getattr(ctx, "task_name", None) or type(op).__name__
    fn = getattr(op, "fn", None)
    fn_name = type(fn).__name__ if fn is not None else "the function"
    return OutputTypeError(
        f"operator {name!r}: {fn_name} returned {type(result).__name__} {result!r:.80}, "
        f"but process and flat_map functions must yield their outputs (or return an "
        f"iterable, or None for no output). Write `yield value` instead of `return value`, "
        f"or use map() for exactly one output per element"
    )


def split_yielded_side_outputs(
    op: Any, out: list[Any], out_ts: list[Any] | None
) -> tuple[list[Any], list[Any]]:
    """Move PyFlink-style yielded ``(OutputTag, value)`` pairs from ``out`` to ``op``'s side outputs."""
    main: list[Any] = []
    main_ts: list[Any] = []
    for i, v in enumerate(out):
        t = out_ts[i] if out_ts is not None else op.current_timestamp
        if type(v) is tuple and len(v) == 2 and type(v[0]) is OutputTag:
            op.emit_side(v[0].tag_id, v[1], t)
        else:
            main.append(v)
            main_ts.append(t)
    return main, main_ts
