"""Type serializers (see :mod:`.base` for the contract, :mod:`.registry` for lookup)."""

from streamstate.runtime.serializers.base import (
    PickleSerializer,
    TypeSerializer,
    TypeSerializerSnapshot,
)
from streamstate.runtime.serializers.compat import Compatibility, resolve_compatibility
from streamstate.runtime.serializers.key import default_key_serializer
from streamstate.runtime.serializers.registry import (
    register_serializer,
    restore_serializer,
    serializer_for,
)

__all__ = [
    "Compatibility",
    "PickleSerializer",
    "TypeSerializer",
    "TypeSerializerSnapshot",
    "default_key_serializer",
    "register_serializer",
    "resolve_compatibility",
    "restore_serializer",
    "serializer_for",
]
