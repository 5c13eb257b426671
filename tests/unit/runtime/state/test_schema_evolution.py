"""State schema evolution on every keyed backend and in operator state: rows and
dataclasses gain, lose and reorder fields across a restore and are migrated eagerly;
a changed field type is a StateMigrationError naming operator, state, both schemas
and the field, unless a registered migration converts it; a conversion failing half
way changes neither the checkpoint nor the restored state."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from streamstate.common.row import Row
from streamstate.common.serializer import (
    TypeSerializerSchemaCompatibility,
    register_type_migration,
)
from streamstate.common.typeinfo import Types
from streamstate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from streamstate.errors import StateMigrationError
from streamstate.runtime.serializers.registry import restore_serializer, serializer_for
from streamstate.runtime.state.operator import DefaultOperatorStateStore
from streamstate.runtime.state.registry import registered_keyed_backends
from tests.support.restore import KEYS, checkpoint, fresh, kg, write_then_restore

C = TypeSerializerSchemaCompatibility


@dataclasses.dataclass
class SensorV1:
    id: str
    temp: float
    count: int = 0


@dataclasses.dataclass
class SensorV2:  # 'count' removed, 'unit' added with a default, fields reordered
    temp: float
    id: str
    unit: str = "C"
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, slots=True)
class Frozen:
    a: int
    b: str | None = None


@pytest.fixture(autouse=True)
def _no_leftover_migrations() -> Any:
    from streamstate.common import serializer

    saved = dict(serializer._MIGRATIONS)
    yield
    serializer._MIGRATIONS.clear()
    serializer._MIGRATIONS.update(saved)


@dataclasses.dataclass(frozen=True)
class FrozenDict:
    a: int
    b: str | None = None


ROW_V1 = Types.ROW_NAMED(["id", "temp", "count"], [Types.STRING(), Types.DOUBLE(), Types.LONG()])
ROW_V2 = Types.ROW_NAMED(["temp", "id", "unit"], [Types.DOUBLE(), Types.STRING(), Types.STRING()])


def row_v1(k: int) -> Row:
    return Row(id=f"s{k}", temp=k / 2, count=k)


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_named_row_fields_added_removed_reordered_are_migrated(backend: str) -> None:
    nb, _ = write_then_restore(backend, ValueStateDescriptor("s", ROW_V1), row_v1)
    try:
        st = nb.get_partitioned_state(ValueStateDescriptor("s", ROW_V2))
        for k in KEYS:
            nb.set_current_key(k, kg(k))
            v = st.value()
            assert (v.temp, v.id, v.unit) == (k / 2, f"s{k}", None)
            assert v.as_dict() == {"temp": k / 2, "id": f"s{k}", "unit": None}
        assert nb.migrated_entries == {"s": len(KEYS)}
        # the next checkpoint records the new schema and restores without migration
        again = fresh(backend)
        again.restore([checkpoint(nb)])
        st2 = again.get_partitioned_state(ValueStateDescriptor("s", ROW_V2))
        again.set_current_key(3, kg(3))
        assert st2.value().id == "s3"
        assert again.migrated_entries == {}
        again.dispose()
    finally:
        nb.dispose()


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_dataclass_fields_get_their_defaults(backend: str) -> None:
    old = ValueStateDescriptor("s", Types.DATACLASS(SensorV1))
    nb, _ = write_then_restore(backend, old, lambda k: SensorV1(f"s{k}", k * 1.5, k))
    try:
        st = nb.get_partitioned_state(ValueStateDescriptor("s", Types.DATACLASS(SensorV2)))
        for k in KEYS:
            nb.set_current_key(k, kg(k))
            assert st.value() == SensorV2(k * 1.5, f"s{k}", "C", [])
    finally:
        nb.dispose()


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_positional_row_grows_at_the_end_and_list_and_map_states_migrate(backend: str) -> None:
    old_row = Types.ROW([Types.LONG(), Types.STRING()])
    new_row = Types.ROW([Types.LONG(), Types.STRING(), Types.DOUBLE()])
    b = fresh(backend)
    lst = b.get_partitioned_state(ListStateDescriptor("l", old_row))
    mp = b.get_partitioned_state(MapStateDescriptor("m", Types.STRING(), ROW_V1))
    for k in KEYS:
        b.set_current_key(k, kg(k))
        lst.add(Row(k, "a"))
        lst.add(Row(k, None))
        mp.put("x", row_v1(k))
        mp.put("y", None)
    nb = fresh(backend)
    nb.restore([checkpoint(b)])
    b.dispose()
    try:
        lst = nb.get_partitioned_state(ListStateDescriptor("l", new_row))
        mp = nb.get_partitioned_state(MapStateDescriptor("m", Types.STRING(), ROW_V2))
        for k in KEYS:
            nb.set_current_key(k, kg(k))
            assert [tuple(r) for r in lst.get()] == [(k, "a", None), (k, None, None)]
            assert tuple(mp.get("x")) == (k / 2, f"s{k}", None)
            assert mp.get("y") is None
        assert nb.migrated_entries["l"] == len(KEYS)
    finally:
        nb.dispose()


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_changed_field_type_is_rejected_naming_operator_state_schemas_and_field(
    backend: str,
) -> None:
    changed = Types.ROW_NAMED(
        ["id", "temp", "count"], [Types.STRING(), Types.DOUBLE(), Types.STRING()]
    )
    nb, _ = write_then_restore(backend, ValueStateDescriptor("s", ROW_V1), row_v1)
    try:
        with pytest.raises(StateMigrationError) as e:
            nb.get_partitioned_state(ValueStateDescriptor("s", changed))
        msg = str(e.value)
        for part in ("'op'", "'s'", "count: long", "count: string", "field 'count'"):
            assert part in msg, (part, msg)
        # nothing changed: the old descriptor still reads the restored values
        st = nb.get_partitioned_state(ValueStateDescriptor("s", ROW_V1))
        nb.set_current_key(4, kg(4))
        assert st.value() == row_v1(4)
    finally:
        nb.dispose()


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_registered_migration_converts_a_changed_field_type(backend: str) -> None:
    register_type_migration(Types.LONG(), Types.STRING(), lambda v: f"#{v}")
    changed = Types.ROW_NAMED(["id", "count"], [Types.STRING(), Types.STRING()])
    nb, _ = write_then_restore(backend, ValueStateDescriptor("s", ROW_V1), row_v1)
    try:
        st = nb.get_partitioned_state(ValueStateDescriptor("s", changed))
        nb.set_current_key(7, kg(7))
        assert st.value().as_dict() == {"id": "s7", "count": "#7"}
    finally:
        nb.dispose()


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_a_migration_failing_half_way_changes_nothing(backend: str) -> None:
    def convert(v: Any) -> Any:
        if v == 17:
            raise ValueError("seventeen is not allowed")
        return float(v)

    register_type_migration(Types.LONG(), Types.FLOAT(), convert)
    nb, h = write_then_restore(backend, ValueStateDescriptor("v", Types.LONG()), lambda k: k)
    before = h.stream.read()
    try:
        with pytest.raises(StateMigrationError, match="seventeen") as e:
            nb.get_partitioned_state(ValueStateDescriptor("v", Types.FLOAT()))
        assert "'op'" in str(e.value) and "'v'" in str(e.value)
        assert h.stream.read() == before  # the checkpoint is untouched
        again = fresh(backend)
        again.restore([h])
        st = again.get_partitioned_state(ValueStateDescriptor("v", Types.LONG()))
        for k in KEYS:
            again.set_current_key(k, kg(k))
            assert st.value() == k
        again.dispose()
    finally:
        nb.dispose()


def test_compatibility_outcomes_and_reasons() -> None:
    from streamstate.common.serializer import compare_snapshots

    def cmp(a: Any, b: Any) -> tuple[C, list[str]]:
        return compare_snapshots(
            serializer_for(a).snapshot_configuration(), serializer_for(b).snapshot_configuration()
        )

    assert cmp(ROW_V1, ROW_V1) == (C.COMPATIBLE_AS_IS, [])
    result, why = cmp(ROW_V1, ROW_V2)
    assert result is C.COMPATIBLE_AFTER_MIGRATION
    assert "fields added: ['unit']" in why and "fields removed: ['count']" in why
    reordered = Types.ROW_NAMED(
        ["temp", "id", "count"], [Types.DOUBLE(), Types.STRING(), Types.LONG()]
    )
    assert cmp(ROW_V1, reordered)[0] is C.COMPATIBLE_AFTER_MIGRATION
    assert cmp(Types.DATACLASS(SensorV1), Types.DATACLASS(SensorV2))[
        0
    ].is_compatible_after_migration()
    nested_old = Types.LIST(ROW_V1)
    nested_new = Types.LIST(ROW_V2)
    assert cmp(nested_old, nested_new)[0] is C.COMPATIBLE_AFTER_MIGRATION
    assert cmp(Types.LONG(), Types.STRING())[0] is C.INCOMPATIBLE


def test_dataclass_serializer_round_trips_and_rebuilds_from_its_snapshot() -> None:
    for t, v in (
        (Types.DATACLASS(SensorV2), SensorV2(1.5, "x", "F", ["a", "b"])),
        (Types.DATACLASS(Frozen), Frozen(3, None)),
    ):
        s = serializer_for(t)
        assert s.deserialize(s.serialize(v)) == v
        r = restore_serializer(s.snapshot_configuration())
        assert r == s and r.deserialize(s.serialize(v)) == v
    # bulk (column-wise) paths, with nulls, frozen classes, one value and none
    for t, vs in (
        (Types.DATACLASS(FrozenDict), [FrozenDict(1, "é"), FrozenDict(2), FrozenDict(3, "")]),
        (Types.DATACLASS(Frozen), [Frozen(1, "x"), Frozen(2)]),
        (Types.DATACLASS(SensorV2), [SensorV2(1.0, "a", "F", ["t"])]),
        (Types.DATACLASS(SensorV2), []),
    ):
        s = serializer_for(t)
        assert s.deserialize_many(s.serialize_many(vs)) == vs
    with pytest.raises(TypeError, match="SensorV1"):
        serializer_for(Types.DATACLASS(SensorV1)).serialize_many([SensorV2(1.0, "a")])
    # a snapshot of a class that no longer exists reads named rows, migrated on restore
    gone = serializer_for(Types.DATACLASS(SensorV1)).snapshot_configuration()
    gone = type(gone)(gone.name, gone.version, {**gone.params, "class": "no.such:Sensor"})
    r = restore_serializer(gone)
    row = r.deserialize(serializer_for(Types.DATACLASS(SensorV1)).serialize(SensorV1("a", 1.0, 2)))
    assert row.as_dict() == {"id": "a", "temp": 1.0, "count": 2}
    new = serializer_for(Types.DATACLASS(SensorV1))
    assert new.migrate(row, r) == SensorV1("a", 1.0, 2)
    with pytest.raises(TypeError, match="SensorV1"):
        new.serialize(SensorV2(1.0, "a"))


def test_operator_state_rows_and_dataclasses_migrate(caplog: Any) -> None:
    old = DefaultOperatorStateStore("src", allow_broadcast=True)
    old.get_list_state(ListStateDescriptor("offsets", ROW_V1)).update([row_v1(1), row_v1(2)])
    bc = old.get_broadcast_state(
        MapStateDescriptor("rules", Types.STRING(), Types.DATACLASS(SensorV1))
    )
    bc.put("r", SensorV1("r", 2.0, 5))
    data = old.snapshot()

    new = DefaultOperatorStateStore("src", allow_broadcast=True)
    _restore(new, data)
    with caplog.at_level(logging.INFO, logger="streamstate.migration"):
        lst = new.get_list_state(ListStateDescriptor("offsets", ROW_V2))
        rules = new.get_broadcast_state(
            MapStateDescriptor("rules", Types.STRING(), Types.DATACLASS(SensorV2))
        )
    assert [r.as_dict() for r in lst.get()] == [
        {"temp": 0.5, "id": "s1", "unit": None},
        {"temp": 1.0, "id": "s2", "unit": None},
    ]
    assert rules.get("r") == SensorV2(2.0, "r")
    assert new.migrated_entries == {"offsets": 2, "rules": 1}
    assert "operator state 'offsets' migrated" in caplog.text

    bad = DefaultOperatorStateStore("src", allow_broadcast=True)
    _restore(bad, data)
    changed = Types.ROW_NAMED(["id", "temp"], [Types.LONG(), Types.DOUBLE()])
    with pytest.raises(StateMigrationError, match="'src'.*'offsets'.*field 'id'"):
        bad.get_list_state(ListStateDescriptor("offsets", changed))


def _restore(store: DefaultOperatorStateStore, data: bytes) -> None:
    from streamstate.runtime.state.operator import decode_operator_snapshot

    store.restore(decode_operator_snapshot(data))


def test_rocksdb_native_checkpoint_migrates_on_restore_and_stays_untouched(
    rocks: Any, tmp_path: Any
) -> None:
    # a native (incremental) RocksDB checkpoint or savepoint: restored SST files, then
    # the state's column family is rewritten in the restoring backend's own database
    import hashlib

    from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
    from tests.support import backends as H

    storage = FileSystemCheckpointStorageAccess(str(tmp_path / "chk"))
    storage.initialize_job("job1")
    b = rocks.backend()
    b.incremental = True
    st = b.get_partitioned_state(ValueStateDescriptor("s", ROW_V1))
    for k in KEYS:
        H.at(b, k)
        st.update(row_v1(k))
    h = b.snapshot_incremental(storage, 1, "op-0")

    def digest() -> dict[str, str]:
        root = tmp_path / "chk"
        return {
            str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }

    before = digest()
    r = rocks.backend()
    r.restore([h])
    st2 = r.get_partitioned_state(ValueStateDescriptor("s", ROW_V2))
    for k in KEYS:
        H.at(r, k)
        assert st2.value().as_dict() == {"temp": k / 2, "id": f"s{k}", "unit": None}
    assert r.migrated_entries == {"s": len(KEYS)}
    assert digest() == before
    H.at(b, 3)
    assert st.value() == row_v1(3)  # the checkpointing backend still reads the old schema
