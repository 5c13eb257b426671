"""State namespaces: the void namespace of plain keyed state and window namespaces.

Shared by every backend and by the snapshot formats (``runtime/state/format/``).
"""

from __future__ import annotations

import pickle
from typing import Any

from streamstate.runtime.serializers.base import TypeSerializer

__all__ = ["VOID_NAMESPACE", "NamespaceSerializer", "VoidNamespace", "VoidNamespaceSerializer"]


class VoidNamespace:
    """The namespace of state that is not scoped to a window (a singleton)."""

    _instance: VoidNamespace | None = None

    def __new__(cls) -> VoidNamespace:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __reduce__(self) -> tuple[Any, ...]:
        return (VoidNamespace, ())

    def __repr__(self) -> str:
        return "VoidNamespace"


VOID_NAMESPACE = VoidNamespace()


class VoidNamespaceSerializer(TypeSerializer):
    """Serializer of :data:`VOID_NAMESPACE` (zero bytes)."""

    name = "void-namespace"
    version = 1

    def serialize(self, value: Any) -> bytes:
        if value is not VOID_NAMESPACE:
            raise TypeError(f"expected VoidNamespace, got {type(value).__name__}")
        return b""

    def deserialize(self, data: bytes) -> Any:
        return VOID_NAMESPACE


class NamespaceSerializer(TypeSerializer):
    """Serializer of state namespaces: the void namespace or any picklable window.

    ``VOID_NAMESPACE`` is zero bytes (as :class:`VoidNamespaceSerializer`, so
    void-namespace state reads the same); any other namespace (a window) is a
    ``0x01`` tag followed by its pickle.
    """

    name = "namespace"
    version = 1

    def serialize(self, value: Any) -> bytes:
        if value is VOID_NAMESPACE:
            return b""
        return b"\x01" + pickle.dumps(value, protocol=5)

    def deserialize(self, data: bytes) -> Any:
        if not data:
            return VOID_NAMESPACE
        if data[:1] != b"\x01":
            raise ValueError(f"unknown namespace tag {data[:1]!r}")
        return pickle.loads(data[1:])
