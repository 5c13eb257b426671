"""Key selectors that only subscript the record, run as ``operator.itemgetter``.

``key_by(lambda v: v[0])`` is the usual key selector, and a shuffle calls it twice per
record (the sender for the key group, the receiver to extract the key again). A Python
function costs a frame per call; ``itemgetter(0)`` does the same subscript in C, about
three times faster. :func:`fast_key_selector` recognises, from the bytecode, a function
(or a bound ``get_key`` method) whose whole body is ``return <its argument>[<constant>]``
with an exact ``int`` or ``str`` constant, and returns the equivalent itemgetter: both call
``type(v).__getitem__(v, constant)`` and nothing else, so keys, exceptions and their
types are the same. Anything else (closures, *args, generators, other bodies, other
constants) is returned unchanged.
"""

from __future__ import annotations

import dis
import inspect
import types
from collections.abc import Callable
from operator import itemgetter
from typing import Any

__all__ = ["fast_key_selector"]

#: instructions that do nothing observable (the frame's start marker, padding)
_SKIPPED = frozenset({"RESUME", "NOP", "CACHE", "EXTENDED_ARG"})
_LOAD_ARG = frozenset({"LOAD_FAST", "LOAD_FAST_BORROW"})
#: functions that take more than their arguments or do more than return a value
_SPECIAL = (
    inspect.CO_VARARGS
    | inspect.CO_VARKEYWORDS
    | inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ITERABLE_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
)


def fast_key_selector(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``operator.itemgetter(c)`` when ``fn`` is ``lambda v: v[c]`` (or a bound method
    ``get_key(self, v): return v[c]``) for an ``int`` or ``str`` constant ``c``; else
    ``fn`` itself."""
    const = _subscript_constant(fn)
    return fn if const is None else itemgetter(const[0])


def _subscript_constant(fn: Any) -> tuple[Any] | None:
    """``(c,)`` when calling ``fn(v)`` is exactly ``v[c]``; None otherwise."""
    bound = 0
    if isinstance(fn, types.MethodType):
        fn, bound = fn.__func__, 1
    if type(fn) is not types.FunctionType or fn.__closure__:
        return None
    code = fn.__code__
    if code.co_argcount != bound + 1 or code.co_kwonlyargcount or code.co_flags & _SPECIAL:
        return None
    ops = [i for i in dis.get_instructions(code) if i.opname not in _SKIPPED]
    if len(ops) != 4:
        return None
    load, const, subscript, ret = ops
    subscripts = subscript.opname == "BINARY_SUBSCR" or (
        subscript.opname == "BINARY_OP" and subscript.argrepr == "[]"
    )
    if (
        load.opname not in _LOAD_ARG
        or load.argval != code.co_varnames[bound]
        or const.opname != "LOAD_CONST"
        or type(const.argval) not in (int, str)
        or not subscripts
        or ret.opname != "RETURN_VALUE"
    ):
        return None
    return (const.argval,)
