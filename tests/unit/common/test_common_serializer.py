"""The public serializer contract (streamstate.common.serializer): a custom
TypeSerializer registered by name and reached through a TypeInformation is used by
a state descriptor on every keyed backend, its snapshot is recorded in the
checkpoint's metadata and it is rebuilt from that snapshot on restore."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from streamstate.common import serializer as public
from streamstate.common.serializer import (
    TypeSerializer,
    TypeSerializerSchemaCompatibility,
    TypeSerializerSnapshot,
)
from streamstate.common.typeinfo import TypeInformation, Types
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.serializers import base, compat
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.serializers.registry import (
    register_serializer,
    restore_serializer,
    serializer_for,
)
from streamstate.runtime.state.registry import registered_keyed_backends
from tests.support.restore import KEYS, kg, write_then_restore

C = TypeSerializerSchemaCompatibility
_POINT = struct.Struct(">dd")


class PointSerializer(TypeSerializer):
    """(x, y) float pairs as 16 bytes."""

    name = "test_point"
    version = 2

    def serialize(self, value: Any) -> bytes:
        return _POINT.pack(*value)

    def deserialize(self, data: bytes) -> Any:
        return _POINT.unpack(data)


class PointTypeInfo(TypeInformation):
    __slots__ = ()

    @property
    def serializer_name(self) -> str:
        return PointSerializer.name

    def __eq__(self, other: object) -> bool:
        return type(other) is PointTypeInfo

    def __hash__(self) -> int:
        return hash(PointTypeInfo)


register_serializer(PointSerializer.name, lambda params: PointSerializer(), replace=True)


def test_runtime_names_are_the_public_classes() -> None:
    assert base.TypeSerializer is public.TypeSerializer
    assert base.TypeSerializerSnapshot is public.TypeSerializerSnapshot
    assert compat.Compatibility is public.TypeSerializerSchemaCompatibility
    assert public.__all__ == sorted(public.__all__)


def test_custom_serializer_through_a_type_info() -> None:
    s = serializer_for(PointTypeInfo())
    assert isinstance(s, PointSerializer)
    assert s.deserialize(s.serialize((1.5, -2.0))) == (1.5, -2.0)
    assert s.deserialize_many(s.serialize_many([(1.0, 2.0), (3.0, 4.0)])) == [
        (1.0, 2.0),
        (3.0, 4.0),
    ]
    assert s.duplicate() == s
    snap = s.snapshot_configuration()
    assert snap == TypeSerializerSnapshot("test_point", 2, {})
    assert snap.get_current_version() == 2
    assert restore_serializer(snap) == s
    assert TypeSerializerSnapshot.from_dict(snap.to_dict()) == snap


def test_resolve_schema_compatibility() -> None:
    s = PointSerializer()
    assert s.snapshot_configuration().resolve_schema_compatibility(s) is C.compatible_as_is()
    older = TypeSerializerSnapshot("test_point", 1)
    assert older.resolve_schema_compatibility(s) is C.compatible_after_migration()
    newer = TypeSerializerSnapshot("test_point", 3)
    assert newer.resolve_schema_compatibility(s).is_incompatible()
    other = serializer_for(Types.STRING()).snapshot_configuration()
    assert other.resolve_schema_compatibility(s) is C.incompatible()
    pickled = PickleSerializer().snapshot_configuration()
    assert pickled.resolve_schema_compatibility(s).is_compatible_after_migration()
    # a composite is as compatible as its least compatible nested serializer
    row = serializer_for(Types.ROW([Types.LONG(), PointTypeInfo()]))
    assert row.snapshot_configuration().resolve_schema_compatibility(row).is_compatible_as_is()
    assert C.compatible_with_reconfigured_serializer().is_compatible_with_reconfigured_serializer()
    assert [c.value for c in C] == sorted(c.value for c in C)  # best first


def test_incomplete_serializer_cannot_be_created() -> None:
    class NoDeserialize(TypeSerializer):
        name = "broken"

        def serialize(self, value: Any) -> bytes:
            return b""

    with pytest.raises(TypeError):
        NoDeserialize()  # type: ignore[abstract]  # the point of the test


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_descriptor_with_custom_serializer_snapshots_and_restores(backend: str) -> None:
    nb, h = write_then_restore(
        backend, ValueStateDescriptor("pos", PointTypeInfo()), lambda i: (float(i), float(-i))
    )
    try:
        assert "test_point" in repr(h.meta)  # the serializer snapshot is in the checkpoint
        st = nb.get_partitioned_state(ValueStateDescriptor("pos", PointTypeInfo()))
        for i in KEYS:
            nb.set_current_key(i, kg(i))
            assert st.value() == (float(i), float(-i))
    finally:
        nb.dispose()
