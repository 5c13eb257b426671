"""The serializers recorded with keyed state: which ones a state has, and the checks on restore.

:class:`StateSerializers` are a state's key, namespace, value (and map user-key)
serializers; their snapshots go into every snapshot's meta. On restore a serializer is
rebuilt from its recorded snapshot (:func:`restore_serializer`) and a newly registered
descriptor's serializer is checked against it (:func:`check_serializer_compatibility`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamstate.errors import StateMigrationError
from streamstate.runtime.serializers.base import TypeSerializer, TypeSerializerSnapshot
from streamstate.runtime.serializers.compat import resolve_compatibility
from streamstate.runtime.serializers.registry import restore_serializer as _registry_restore
from streamstate.runtime.serializers.registry import serializer_for
from streamstate.runtime.serializers.ttl import TTL_SERIALIZER_NAME
from streamstate.runtime.state.format.namespaces import NamespaceSerializer, VoidNamespaceSerializer

__all__ = [
    "STATE_KINDS",
    "StateSerializers",
    "check_serializer_compatibility",
    "restore_serializer",
    "serializer_for_type_info",
]

#: the kinds of keyed state, as recorded in snapshots
STATE_KINDS = ("value", "list", "map", "reducing", "aggregating")


@dataclass
class StateSerializers:
    """The serializers of one state.

    ``value`` serializes the stored value; for list state it is the element
    serializer, for map state the serializer of the map's values (``user_key``
    is then the serializer of the map's keys).
    """

    key: TypeSerializer
    namespace: TypeSerializer
    value: TypeSerializer
    user_key: TypeSerializer | None = None

    def to_meta(self) -> dict[str, Any]:
        meta = {
            "key_serializer": self.key.snapshot_configuration().to_dict(),
            "namespace_serializer": self.namespace.snapshot_configuration().to_dict(),
            "value_serializer": self.value.snapshot_configuration().to_dict(),
        }
        if self.user_key is not None:
            meta["user_key_serializer"] = self.user_key.snapshot_configuration().to_dict()
        return meta


def serializer_for_type_info(type_info: Any) -> TypeSerializer:
    """The serializer of ``type_info`` (``None``: pickle), from the serializer registry."""
    return serializer_for(type_info)


def restore_serializer(snapshot: dict[str, Any], state_name: str) -> TypeSerializer:
    """Rebuild the serializer a checkpoint recorded (``snapshot`` is its ``to_dict()``).

    Raises ``StateMigrationError`` naming the state when no reader exists.
    """
    snap = TypeSerializerSnapshot.from_dict(snapshot)
    if (
        snap.name == VoidNamespaceSerializer.name
        and snap.version == VoidNamespaceSerializer.version
    ):
        return VoidNamespaceSerializer()
    if snap.name == NamespaceSerializer.name and snap.version == NamespaceSerializer.version:
        return NamespaceSerializer()
    try:
        return _registry_restore(snap)
    except StateMigrationError as e:
        raise StateMigrationError(f"state {state_name!r}: {e}") from e


def _describe(snapshot: TypeSerializerSnapshot) -> str:
    return f"{snapshot.name!r} (version {snapshot.version}, params {snapshot.params})"


def check_serializer_compatibility(
    state_name: str,
    role: str,
    new: TypeSerializer,
    old_snapshot: dict[str, Any],
    require_as_is: bool = False,
) -> None:
    """Raise ``StateMigrationError`` if ``new`` cannot take over state written by ``old``.

    Uses :func:`streamstate.runtime.serializers.compat.resolve_compatibility`:
    "compatible after migration" is accepted (the heap backend reads with the
    recorded serializer and writes with the new one) unless ``require_as_is``
    (used for keys: their bytes decide the key group, so they must not change).
    """
    old = TypeSerializerSnapshot.from_dict(old_snapshot)
    old_ttl, new_ttl = old.name == TTL_SERIALIZER_NAME, new.name == TTL_SERIALIZER_NAME
    if old_ttl != new_ttl:
        if old_ttl:
            raise StateMigrationError(
                f"state {state_name!r} was written with state TTL (its values carry expiration "
                f"timestamps), but the new descriptor has no TTL. Enable TTL on the descriptor "
                f"(descriptor.enable_time_to_live(StateTtlConfig.new_builder(ttl).build())), "
                f"or give the state a new name."
            )
        raise StateMigrationError(
            f"state {state_name!r} was written without state TTL, but the new descriptor "
            f"enables TTL; state cannot switch TTL on across a restore (as in Flink). Remove "
            f"enable_time_to_live() from the descriptor, or give the state a new name."
        )
    result = resolve_compatibility(old, new)
    ok = result.is_compatible_as_is() if require_as_is else not result.is_incompatible()
    if ok:
        return
    new_desc = _describe(new.snapshot_configuration())
    if require_as_is:
        raise StateMigrationError(
            f"state {state_name!r}: the checkpoint's {role} serializer {_describe(old)} and the "
            f"job's {role} serializer {new_desc} do not produce the same bytes, so keys would "
            f"land in other key groups. Keep the key type (key_by's key_type) of the checkpoint."
        )
    raise StateMigrationError(
        f"state {state_name!r}: the {role} serializer {new_desc} of the new descriptor cannot "
        f"read data written by the restored {role} serializer {_describe(old)}. Use a type "
        f"information compatible with the checkpoint, or a new state name."
    )
