"""Declared output types are checked where they are declared.

``ds.map(f, output_type=Types.LONG())`` promises that every output is a LONG. PyFlink
enforces it when its Java side serializes the value; here nothing would serialize it
until a later ``reduce``/``sum`` silently concatenated strings. :class:`OutputTypeCheck`
runs the declared type's serializer over each output of that operator (and only of
operators that declared a type) and raises :class:`~streamstate.errors.OutputTypeError`
naming the operator, the declared type and the offending value's type.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from streamstate.common.typeinfo import BasicType, BasicTypeInfo, TupleTypeInfo
from streamstate.errors import OutputTypeError
from streamstate.runtime.serializers.registry import serializer_for

Predicate = Callable[[Any], bool]

_INT_RANGES = {
    BasicType.BYTE: (-(2**7), 2**7 - 1),
    BasicType.SHORT: (-(2**15), 2**15 - 1),
    BasicType.INT: (-(2**31), 2**31 - 1),
    BasicType.LONG: (-(2**63), 2**63 - 1),
}
_PLAIN: dict[BasicType, tuple[type, ...]] = {
    BasicType.STRING: (str,),
    BasicType.BOOLEAN: (bool,),
    BasicType.DOUBLE: (float, int),
    BasicType.BIG_INT: (int,),
    BasicType.BIG_DEC: (Decimal,),
}


def _expression(type_info: Any, x: str) -> str | None:
    """A Python expression over ``x`` that is True iff ``x`` plainly fits ``type_info``."""
    if isinstance(type_info, BasicTypeInfo):
        t = type_info.basic_type
        if t in _INT_RANGES:
            low, high = _INT_RANGES[t]
            return f"(type({x}) is int and {low} <= {x} <= {high})"
        if t in _PLAIN:
            names = [c.__name__ for c in _PLAIN[t]]
            if len(names) == 1:
                return f"type({x}) is {names[0]}"
            return f"type({x}) in ({', '.join(names)},)"
        return None
    if isinstance(type_info, TupleTypeInfo):
        fields = type_info.get_field_types()
        parts = [f"type({x}) is tuple", f"len({x}) == {len(fields)}"]
        for k, f in enumerate(fields):
            e = _expression(f, f"{x}[{k}]")
            if e is None:
                return None
            parts.append(e)
        return "(" + " and ".join(parts) + ")"
    return None


def fast_check(type_info: Any) -> Predicate | None:
    """A plain-Python predicate for the common declared types (basic types and tuples of
    them), or None where only the serializer can tell (rows, collections, ...). True means
    the declared serializer accepts the value; False means it must be asked why not.

    The predicate is compiled from the type information alone (enum names and integers,
    never user input) into one expression, so a check costs a few type comparisons."""
    e = _expression(type_info, "v")
    if e is None:
        return None
    check: Predicate = eval(f"lambda v: {e}", {"Decimal": Decimal})
    return check


class OutputTypeCheck:
    """Callable on a batch of outputs; raises OutputTypeError at the first that does not
    fit, and returns the batch as the declared type's serializer would hand it on: a
    ``Types.TUPLE`` output given as a ``Row`` (or list) becomes a tuple, as PyFlink's
    tuple serializer makes it (``execute_and_collect`` then returns tuples)."""

    __slots__ = ("declared", "fast", "operator", "serialize", "tuples")

    def __init__(self, operator: str, declared: Any) -> None:
        self.operator = operator
        self.declared = declared
        self.serialize = serializer_for(declared).serialize
        self.fast = fast_check(declared)
        self.tuples = isinstance(declared, TupleTypeInfo)

    def __call__(self, values: list[Any]) -> list[Any]:
        fast = self.fast
        if fast is not None:
            converted = False
            for v in values:
                if not fast(v):
                    self._check(v)  # the serializer says why (or accepts an exotic fit)
                    converted = converted or (self.tuples and type(v) is not tuple)
            return [tuple(v) for v in values] if converted else values
        for v in values:
            self._check(v)
        if self.tuples and any(type(v) is not tuple and v is not None for v in values):
            return [v if v is None else tuple(v) for v in values]
        return values

    def _check(self, v: Any) -> None:
        try:
            self.serialize(v)
        except Exception as e:  # noqa: BLE001 - every serializer error is a type mismatch here
            raise OutputTypeError(
                f"operator {self.operator!r} declared output_type={self.declared!r} but "
                f"produced {type(v).__name__} {v!r:.80} ({type(e).__name__}: {e}). Return "
                f"values of the declared type, or declare the type the function returns"
            ) from None
