"""Can state written with one serializer be read into a state that declares another?

The rules live in :mod:`streamstate.common.serializer` (public); this module keeps
the runtime's names for them.

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

from typing import Any

from streamstate.common.serializer import (
    TypeSerializer,
    TypeSerializerSchemaCompatibility,
    TypeSerializerSnapshot,
)

__all__ = [
    "Compatibility",
    "resolve_compatibility",
]

#: the runtime's name for :class:`TypeSerializerSchemaCompatibility`
Compatibility = TypeSerializerSchemaCompatibility


def resolve_compatibility(
    old: TypeSerializerSnapshot | dict[str, Any], new: TypeSerializer
) -> TypeSerializerSchemaCompatibility:
    """How state written under snapshot ``old`` can be read by serializer ``new``
    (:meth:`TypeSerializerSnapshot.resolve_schema_compatibility`)."""
    if isinstance(old, dict):
        old = TypeSerializerSnapshot.from_dict(old)
    return old.resolve_schema_compatibility(new)
