"""User functions that only read a field of the record, run as ``operator.itemgetter`` or
``operator.attrgetter``.

``key_by(lambda v: v[0])`` is the usual key selector, and a shuffle calls it twice per
record (the sender for the key group, the receiver to extract the key again); a timestamp
assigner such as ``return value[1]`` runs once per record on the source stage. A Python
function costs a frame per call; ``itemgetter(1)`` does the same subscript in C, two to
three times faster. :func:`field_getter` recognises, from the bytecode, a function (or a
bound method) whose whole body is ``return <its first argument>[<constant>]`` with an exact
``int`` or ``str`` constant, or ``return <its first argument>.<name>``, and returns the
equivalent getter: both do ``v[c]`` (``v.name``) and nothing else, so results, exceptions
and their types are the same. Anything else (closures, ``*args``, generators, other
bodies, other constants) gets None, and the caller keeps the function.
"""

from __future__ import annotations

import dis
import inspect
import types
from collections.abc import Callable
from operator import attrgetter, itemgetter
from typing import Any

__all__ = ["fast_key_selector", "field_getter"]

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
    """The getter equivalent to the key selector ``fn`` (see :func:`field_getter`), else
    ``fn`` itself."""
    getter = field_getter(fn, 1)
    return fn if getter is None else getter


def field_getter(fn: Any, arity: int) -> Callable[[Any], Any] | None:
    """``itemgetter(c)`` or ``attrgetter(name)`` when calling ``fn`` with ``arity``
    positional arguments is exactly ``args[0][c]`` or ``args[0].name`` (``fn`` a function,
    or a method bound to its ``self``); None otherwise."""
    bound = 0
    if isinstance(fn, types.MethodType):
        fn, bound = fn.__func__, 1
    if type(fn) is not types.FunctionType or fn.__closure__:
        return None
    code = fn.__code__
    if code.co_argcount != bound + arity or code.co_kwonlyargcount or code.co_flags & _SPECIAL:
        return None
    ops = [i for i in dis.get_instructions(code) if i.opname not in _SKIPPED]
    if not 3 <= len(ops) <= 4 or ops[-1].opname != "RETURN_VALUE":
        return None
    load = ops[0]
    if load.opname not in _LOAD_ARG or load.argval != code.co_varnames[bound]:
        return None
    if len(ops) == 3:  # value.name
        attr = ops[1]
        if attr.opname == "LOAD_ATTR" and type(attr.argval) is str and attr.argrepr == attr.argval:
            return attrgetter(attr.argval)
        return None
    const, subscript = ops[1], ops[2]
    subscripts = subscript.opname == "BINARY_SUBSCR" or (
        subscript.opname == "BINARY_OP" and subscript.argrepr == "[]"
    )
    if const.opname != "LOAD_CONST" or type(const.argval) not in (int, str) or not subscripts:
        return None
    return itemgetter(const.argval)
