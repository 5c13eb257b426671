"""Can state written with one serializer be read into a state that declares another?

:func:`resolve_compatibility` compares the snapshot a checkpoint recorded with
the serializer the restored job declares:

* same name, version and parameters (nested serializers compared
  recursively) -> ``COMPATIBLE_AS_IS``;
* same name, older recorded version -> ``COMPATIBLE_AFTER_MIGRATION``
  (read with the old serializer, rewrite with the new one);
* pickle on either side -> ``COMPATIBLE_AFTER_MIGRATION`` (pickle reads back
  any value, and any value read can be offered to the new serializer, which
  reports values it cannot take);
* TTL on one side only (the ``"ttl"`` serializer wraps values of state with
  TTL) -> ``INCOMPATIBLE``, even against pickle, as in Flink: the stored
  form differs (values vs. ``TtlValue`` s);
* anything else (other name, newer recorded version, different non-serializer
  parameters such as row field names or arity) -> ``INCOMPATIBLE``.

A composite is as compatible as its least compatible nested serializer.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from streamstate.runtime.serializers.base import TypeSerializer, TypeSerializerSnapshot
from streamstate.runtime.serializers.composite import NESTED_SNAPSHOT_KEY

__all__ = [
    "Compatibility",
    "resolve_compatibility",
]

_PICKLE = "pickle"
_TTL = "ttl"


class Compatibility(Enum):
    """Outcome of a compatibility check, best first."""

    COMPATIBLE_AS_IS = 0
    COMPATIBLE_AFTER_MIGRATION = 1
    INCOMPATIBLE = 2

    def is_compatible_as_is(self) -> bool:
        return self is Compatibility.COMPATIBLE_AS_IS

    def is_compatible_after_migration(self) -> bool:
        return self is Compatibility.COMPATIBLE_AFTER_MIGRATION

    def is_incompatible(self) -> bool:
        return self is Compatibility.INCOMPATIBLE


def _worst(a: Compatibility, b: Compatibility) -> Compatibility:
    return a if a.value >= b.value else b


def _compare(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot) -> Compatibility:
    if old.name != new.name:
        if old.name == _TTL or new.name == _TTL:
            return Compatibility.INCOMPATIBLE
        if old.name == _PICKLE or new.name == _PICKLE:
            return Compatibility.COMPATIBLE_AFTER_MIGRATION
        return Compatibility.INCOMPATIBLE
    if old.version > new.version:
        return Compatibility.INCOMPATIBLE
    params = _compare_params(old.params, new.params)
    if old.version < new.version:
        return _worst(params, Compatibility.COMPATIBLE_AFTER_MIGRATION)
    return params


def _as_snapshot(d: dict[str, Any]) -> TypeSerializerSnapshot:
    return TypeSerializerSnapshot(d[NESTED_SNAPSHOT_KEY], int(d["version"]), d.get("params", {}))


def _compare_params(old: Any, new: Any) -> Compatibility:
    if isinstance(old, dict) and isinstance(new, dict):
        if NESTED_SNAPSHOT_KEY in old and NESTED_SNAPSHOT_KEY in new:
            return _compare(_as_snapshot(old), _as_snapshot(new))
        if old.keys() != new.keys():
            return Compatibility.INCOMPATIBLE
        result = Compatibility.COMPATIBLE_AS_IS
        for k in old:
            result = _worst(result, _compare_params(old[k], new[k]))
        return result
    if isinstance(old, list | tuple) and isinstance(new, list | tuple):
        if len(old) != len(new):
            return Compatibility.INCOMPATIBLE
        result = Compatibility.COMPATIBLE_AS_IS
        for o, n in zip(old, new, strict=True):
            result = _worst(result, _compare_params(o, n))
        return result
    return Compatibility.COMPATIBLE_AS_IS if old == new else Compatibility.INCOMPATIBLE


def resolve_compatibility(old: TypeSerializerSnapshot, new: TypeSerializer) -> Compatibility:
    """How state written under snapshot ``old`` can be read by serializer ``new``."""
    if isinstance(old, dict):
        old = TypeSerializerSnapshot.from_dict(old)
    return _compare(old, new.snapshot_configuration())
