"""The serializers recorded with keyed state: which ones a state has, and the checks on restore.

:class:`StateSerializers` are a state's key, namespace, value (and map user-key)
serializers; their snapshots go into every snapshot's meta. On restore a serializer is
rebuilt from its recorded snapshot (:func:`restore_serializer`) and a newly registered
descriptor's serializer is checked against it (:func:`check_serializer_compatibility`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamstate.common.serializer import NESTED_SNAPSHOT_KEY, compare_snapshots
from streamstate.errors import StateMigrationError
from streamstate.runtime.serializers.base import TypeSerializer, TypeSerializerSnapshot
from streamstate.runtime.serializers.registry import restore_serializer as _registry_restore
from streamstate.runtime.serializers.registry import serializer_for
from streamstate.runtime.serializers.ttl import TTL_SERIALIZER_NAME
from streamstate.runtime.state.format.namespaces import NamespaceSerializer, VoidNamespaceSerializer

__all__ = [
    "STATE_KINDS",
    "StateSerializers",
    "check_serializer_compatibility",
    "describe_schema",
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


def _schema(name: str, params: dict[str, Any]) -> str:
    def nested(d: Any) -> str:
        if isinstance(d, dict) and NESTED_SNAPSHOT_KEY in d:
            return _schema(d[NESTED_SNAPSHOT_KEY], d.get("params", {}))
        return repr(d)

    if "fields" in params and isinstance(params["fields"], list):
        names = params.get("names") or [f"f{i}" for i in range(len(params["fields"]))]
        inner = ", ".join(
            f"{n}: {nested(f)}" for n, f in zip(names, params["fields"], strict=False)
        )
        label = params.get("class") or params.get("record") or name
        return f"{label}({inner})"
    parts = [nested(v) for v in params.values() if isinstance(v, dict) and NESTED_SNAPSHOT_KEY in v]
    return f"{name}<{', '.join(parts)}>" if parts else name


def describe_schema(serializer: Any) -> str:
    """A one-line schema of a serializer (or snapshot / its dict form):
    ``long``, ``list<string>``, ``mod:Cls(x: long, y: double)``."""
    snap = serializer
    if isinstance(snap, TypeSerializer):
        snap = snap.snapshot_configuration()
    elif isinstance(snap, dict):
        snap = TypeSerializerSnapshot.from_dict(snap)
    return _schema(snap.name, snap.params)


def _describe(snapshot: TypeSerializerSnapshot) -> str:
    return describe_schema(snapshot)


def check_serializer_compatibility(
    state_name: str,
    role: str,
    new: TypeSerializer,
    old_snapshot: dict[str, Any],
    require_as_is: bool = False,
) -> list[str]:
    """Raise ``StateMigrationError`` if ``new`` cannot take over state written by ``old``;
    else return what changed (empty: nothing).

    "Compatible after migration" is accepted (restore converts every value once,
    ``runtime/state/migration.py``) unless ``require_as_is`` (used for keys: their
    bytes decide the key group, so they must not change).
    """
    old = TypeSerializerSnapshot.from_dict(old_snapshot)
    old_ttl, new_ttl = old.name == TTL_SERIALIZER_NAME, new.name == TTL_SERIALIZER_NAME
    if old_ttl != new_ttl and require_as_is:
        raise StateMigrationError(f"state {state_name!r}: the {role} serializer cannot carry TTL")
    result, reasons = compare_snapshots(old, new.snapshot_configuration())
    ok = result.is_compatible_as_is() if require_as_is else not result.is_incompatible()
    if ok:
        return reasons
    new_desc = _describe(new.snapshot_configuration())
    why = "; ".join(reasons) or "the serializers differ"
    if require_as_is:
        raise StateMigrationError(
            f"state {state_name!r}: the checkpoint's {role} serializer {_describe(old)} and the "
            f"job's {role} serializer {new_desc} do not produce the same bytes ({why}), so keys "
            f"would land in other key groups. Keep the key type (key_by's key_type) of the "
            f"checkpoint."
        )
    raise StateMigrationError(
        f"state {state_name!r}: the {role} serializer of the new descriptor cannot read data "
        f"written by the restored one: old schema {_describe(old)}, new schema {new_desc}; "
        f"{why}. Use a type compatible with the checkpoint (add, remove or reorder fields, "
        f"or register a conversion with "
        f"streamstate.common.serializer.register_type_migration), or a new state name."
    )
