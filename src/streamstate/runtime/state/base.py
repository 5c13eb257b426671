"""The keyed state backend contract used by the operator runtime.

A :class:`KeyedStateBackend` holds the keyed state of one subtask: every state
registered through :meth:`KeyedStateBackend.get_partitioned_state`, for the
key groups of its :class:`~streamstate.runtime.keygroups.KeyGroupRange`.

Per epoch the runtime calls :meth:`~KeyedStateBackend.set_current_key` once per
record and runs the user function, which reads and writes state through the
handles. At the end of the epoch it commits a state version: either
:meth:`~KeyedStateBackend.snapshot_delta` (changes since the last version) or,
when a checkpoint is taken, :meth:`~KeyedStateBackend.snapshot` (everything).
Recovery is :meth:`~KeyedStateBackend.restore` from the last full snapshot(s)
followed by :meth:`~KeyedStateBackend.apply_delta` for each later delta.

This module also holds the serializer plumbing shared by backends: choosing a
serializer for a type information, rebuilding one from a checkpoint's recorded
snapshot, and the compatibility check used on restore.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamstate.datastream.state import State, StateDescriptor
from streamstate.runtime.checkpoint.handles import KeyGroupsStateHandle
from streamstate.runtime.errors import StateMigrationError
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import (
    PickleSerializer,
    TypeSerializer,
    TypeSerializerSnapshot,
)

__all__ = [
    "VOID_NAMESPACE",
    "KeyedSnapshot",
    "KeyedStateBackend",
    "VoidNamespace",
    "VoidNamespaceSerializer",
    "check_serializer_compatibility",
    "restore_serializer",
    "serializer_for_type_info",
]


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


@dataclass(frozen=True)
class KeyedSnapshot:
    """A full keyed snapshot of one backend.

    ``data`` is written to checkpoint storage as one stream; ``offsets[kg] =
    (offset, length)`` locates key group ``kg``'s section inside ``data`` (key
    groups without state are absent); ``meta`` is JSON-compatible state metadata
    (state names, kinds, serializer snapshots, format version). The caller builds
    ``KeyGroupsStateHandle(stream, key_group_range, offsets, meta)`` from it.
    """

    data: bytes
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


class KeyedStateBackend(ABC):
    """Keyed state of one subtask (the key groups of ``key_group_range``).

    Not thread-safe: one subtask drives it from one thread.
    """

    def __init__(
        self,
        operator_name: str,
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        key_serializer: TypeSerializer,
    ) -> None:
        self.operator_name = operator_name
        self.key_group_range = key_group_range
        self.max_parallelism = max_parallelism
        self.key_serializer = key_serializer

    @abstractmethod
    def set_current_key(self, key: Any, key_group: int) -> None:
        """Scope every state handle to ``key`` (HOT PATH: once per record).

        ``key_group`` is the key's group, precomputed by the shuffle; it must lie
        in this backend's key group range. Raises ``KeySerializationError`` for an
        unhashable key and ``StateAccessError`` for a key group outside the range.
        """

    @abstractmethod
    def get_current_key(self) -> Any:
        """The key set by the last :meth:`set_current_key` (``None`` before any)."""

    @abstractmethod
    def get_partitioned_state(self, descriptor: StateDescriptor) -> State:
        """Get or create the state handle of ``descriptor`` (void namespace).

        The same name registered again with another kind or other type information
        raises ``StateDescriptorConflictError``; a descriptor incompatible with
        restored state of that name raises ``StateMigrationError``.
        """

    @abstractmethod
    def get_keys(self, state_name: str) -> Iterator[Any]:
        """The keys that have a value in state ``state_name`` (a copy: safe to modify state)."""

    @abstractmethod
    def snapshot(self) -> KeyedSnapshot:
        """Full snapshot of all state; resets the delta tracking.

        Raises ``StateSerializationError`` if a key or value cannot be serialized
        (the delta tracking is then left untouched).
        """

    @abstractmethod
    def snapshot_delta(self) -> bytes:
        """The changes (puts and deletes) since the last snapshot/delta; resets tracking."""

    @abstractmethod
    def restore(self, handles: Sequence[KeyGroupsStateHandle]) -> None:
        """Load the key groups of this backend's range from every intersecting handle.

        Call on a fresh backend, before any state is registered.
        """

    @abstractmethod
    def apply_delta(self, data: bytes) -> None:
        """Replay a delta from :meth:`snapshot_delta` (entries outside the range are skipped)."""

    @abstractmethod
    def dispose(self) -> None:
        """Release all state; the backend must not be used afterwards."""


# ------------------------------------------------------------------ serializer plumbing


def serializer_for_type_info(type_info: Any) -> TypeSerializer:
    """The serializer of ``type_info`` (``None``: pickle).

    Uses ``streamstate.runtime.serializers.registry.serializer_for`` when it is
    available; without it every value is pickled.
    """
    if type_info is None:
        return PickleSerializer()
    try:
        from streamstate.runtime.serializers.registry import (  # type: ignore[import-not-found]
            serializer_for,
        )
    except ImportError:
        return PickleSerializer()
    return serializer_for(type_info)


def restore_serializer(snapshot: dict[str, Any], state_name: str) -> TypeSerializer:
    """Rebuild the serializer a checkpoint recorded (``snapshot`` is its ``to_dict()``)."""
    snap = TypeSerializerSnapshot.from_dict(snapshot)
    if snap.name == VoidNamespaceSerializer.name and snap.version == 1:
        return VoidNamespaceSerializer()
    try:
        from streamstate.runtime.serializers.registry import (  # type: ignore[import-not-found]
            restore_serializer as _restore,
        )
    except ImportError:
        _restore = None
    if _restore is not None:
        try:
            return _restore(snap)
        except Exception as e:
            if snap.name != PickleSerializer.name:
                raise StateMigrationError(
                    f"cannot rebuild serializer {snap.name!r} (version {snap.version}) recorded "
                    f"for state {state_name!r}: {e}"
                ) from e
    if snap.name == PickleSerializer.name and snap.version == PickleSerializer.version:
        return PickleSerializer()
    raise StateMigrationError(
        f"cannot rebuild serializer {snap.name!r} (version {snap.version}) recorded for state "
        f"{state_name!r}: no serializer registry knows it"
    )


def _describe(snapshot: TypeSerializerSnapshot) -> str:
    return f"{snapshot.name!r} (version {snapshot.version}, params {snapshot.params})"


def check_serializer_compatibility(
    state_name: str, role: str, new: TypeSerializer, old_snapshot: dict[str, Any]
) -> None:
    """Raise ``StateMigrationError`` if ``new`` cannot take over state written by ``old``.

    Uses ``streamstate.runtime.serializers.compat.resolve_compatibility`` when
    available (pickle on either side is then compatible after migration: the heap
    backend reads with the recorded serializer and writes with the new one);
    otherwise the serializers must agree on name and version.
    """
    old = TypeSerializerSnapshot.from_dict(old_snapshot)
    new_snap = new.snapshot_configuration()
    incompatible: bool
    try:
        from streamstate.runtime.serializers.compat import (  # type: ignore[import-not-found]
            resolve_compatibility,
        )
    except ImportError:
        resolve_compatibility = None
    if resolve_compatibility is not None:
        incompatible = _is_incompatible(resolve_compatibility(old, new))
    else:
        incompatible = (new_snap.name, new_snap.version) != (old.name, old.version)
    if incompatible:
        raise StateMigrationError(
            f"state {state_name!r}: the {role} serializer {_describe(new_snap)} of the new "
            f"descriptor cannot read the restored {role} serializer {_describe(old)}'s data. "
            f"Use a type information compatible with the checkpoint, or start without it."
        )


def _is_incompatible(result: Any) -> bool:
    """Interpret a compatibility result (object with ``is_incompatible``, enum, bool or str)."""
    probe = getattr(result, "is_incompatible", None)
    if probe is not None:
        return bool(probe() if callable(probe) else probe)
    if isinstance(result, bool):
        return not result
    name = getattr(result, "name", result)
    return str(name).upper() == "INCOMPATIBLE"
