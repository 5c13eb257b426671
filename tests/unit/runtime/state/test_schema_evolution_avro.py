"""Avro state (Types.AVRO, fastavro): the writer schema is kept in the serializer
snapshot and a restore resolves it to the job's schema by Avro's rules, on every
keyed backend and in operator state; pickle-based state of a VersionedState class is
upgraded by its hook."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from streamstate.common.serializer import TypeSerializerSchemaCompatibility as C
from streamstate.common.serializer import VersionedState, compare_snapshots
from streamstate.common.typeinfo import AvroTypeInfo, Types
from streamstate.datastream.state import ListStateDescriptor, ValueStateDescriptor
from streamstate.errors import StateMigrationError
from streamstate.runtime.serializers.registry import restore_serializer, serializer_for
from streamstate.runtime.state.operator import DefaultOperatorStateStore, decode_operator_snapshot
from streamstate.runtime.state.registry import registered_keyed_backends
from tests.support.restore import KEYS, fresh, kg, write_then_restore

V1 = {
    "type": "record",
    "name": "Sensor",
    "namespace": "demo",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "temp", "type": "int"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "old", "type": ["null", "string"], "default": None},
    ],
}
V2 = {  # 'old' removed, 'unit' added with a default, 'temp' int -> long, reordered
    "type": "record",
    "name": "Sensor",
    "namespace": "demo",
    "fields": [
        {"name": "temp", "type": "long"},
        {"name": "id", "type": "string"},
        {"name": "unit", "type": "string", "default": "C"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}


def v1(k: int) -> dict[str, Any]:
    return {"id": f"s{k}", "temp": k, "kind": "AB"[k % 2], "tags": ["x"] * (k % 3), "old": None}


def with_fields(base: dict[str, Any], *fields: dict[str, Any]) -> dict[str, Any]:
    return {**base, "fields": [*base["fields"], *fields]}


def test_avro_round_trip_and_writer_schema_in_the_snapshot() -> None:
    s = serializer_for(Types.AVRO(V1))
    assert s.deserialize(s.serialize(v1(4))) == v1(4)
    snap = s.snapshot_configuration()
    assert snap.name == "avro" and '"name":"Sensor"' in snap.params["schema"]
    assert restore_serializer(snap).deserialize(s.serialize(v1(5))) == v1(5)
    assert Types.AVRO(V1) == AvroTypeInfo(__import__("json").dumps(V1))
    with pytest.raises(ValueError, match="does not match"):
        s.serialize({"id": 1})


@pytest.mark.parametrize(
    "new,outcome,reason",
    [
        (V1, C.COMPATIBLE_AS_IS, None),
        (V2, C.COMPATIBLE_AFTER_MIGRATION, "fields added: ['unit']"),
        (with_fields(V1, {"name": "n", "type": "int"}), C.INCOMPATIBLE, "without a default"),
        (
            {**V1, "fields": [{"name": "id", "type": "int"}]},
            C.INCOMPATIBLE,
            "type changed from string to int",
        ),
        (
            {
                **V1,
                "fields": [
                    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A"]}}
                ],
            },
            C.INCOMPATIBLE,
            "enum symbols ['B'] removed",
        ),
        (
            {**V1, "fields": [{"name": "temp", "type": ["null", "double"]}]},
            C.COMPATIBLE_AFTER_MIGRATION,
            None,
        ),
    ],
)
def test_avro_schema_resolution_rules(new: Any, outcome: C, reason: str | None) -> None:
    result, why = compare_snapshots(
        serializer_for(Types.AVRO(V1)).snapshot_configuration(),
        serializer_for(Types.AVRO(new)).snapshot_configuration(),
    )
    assert result is outcome, why
    if reason is not None:
        assert any(reason in w for w in why), why


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_avro_state_is_resolved_to_the_new_schema_on_restore(backend: str) -> None:
    nb, _ = write_then_restore(backend, ValueStateDescriptor("s", Types.AVRO(V1)), v1)
    try:
        st = nb.get_partitioned_state(ValueStateDescriptor("s", Types.AVRO(V2)))
        for k in KEYS:
            nb.set_current_key(k, kg(k))
            old = v1(k)
            assert st.value() == {
                "temp": old["temp"],
                "id": old["id"],
                "unit": "C",
                "kind": old["kind"],
                "tags": old["tags"],
            }
        assert nb.migrated_entries == {"s": len(KEYS)}
    finally:
        nb.dispose()


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_avro_field_without_default_is_rejected_with_the_rule(backend: str) -> None:
    bad = with_fields(V1, {"name": "n", "type": "int"})
    nb, _ = write_then_restore(backend, ValueStateDescriptor("s", Types.AVRO(V1)), v1)
    try:
        with pytest.raises(StateMigrationError, match="demo.Sensor|Sensor.n: field added"):
            nb.get_partitioned_state(ValueStateDescriptor("s", Types.AVRO(bad)))
    finally:
        nb.dispose()


def test_avro_operator_state_migrates() -> None:
    old = DefaultOperatorStateStore("src")
    old.get_list_state(ListStateDescriptor("l", Types.AVRO(V1))).update([v1(1), v1(2)])
    new = DefaultOperatorStateStore("src")
    new.restore(decode_operator_snapshot(old.snapshot()))
    got = list(new.get_list_state(ListStateDescriptor("l", Types.AVRO(V2))).get())
    assert [(g["id"], g["unit"]) for g in got] == [("s1", "C"), ("s2", "C")]


class Account(VersionedState):
    __state_version__ = 1

    def __init__(self, owner: str, cents: int) -> None:
        self.owner, self.cents = owner, cents


class AccountV2(VersionedState):
    """Version 2 of Account: 'cents' became 'balance' (a float), 'currency' added."""

    __state_version__ = 2
    currency = "EUR"

    @classmethod
    def upgrade_state(cls, state: dict[str, Any], from_version: int) -> dict[str, Any]:
        if from_version == 1:
            state["balance"] = state.pop("cents") / 100
        return state


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_pickled_versioned_state_is_upgraded_by_its_hook(backend: str, monkeypatch: Any) -> None:
    b = fresh(backend)
    st = b.get_partitioned_state(ValueStateDescriptor("acct"))  # no type info: pickle
    for k in KEYS:
        b.set_current_key(k, kg(k))
        st.update(Account(f"o{k}", k * 100))
    from tests.support.restore import checkpoint

    h = checkpoint(b)
    b.dispose()
    # the job's next version: the same class (module and name), now version 2
    AccountV2.__qualname__ = AccountV2.__name__ = "Account"
    monkeypatch.setattr(sys.modules[__name__], "Account", AccountV2)
    nb = fresh(backend)
    nb.restore([h])
    try:
        st = nb.get_partitioned_state(ValueStateDescriptor("acct"))
        for k in KEYS:
            nb.set_current_key(k, kg(k))
            a = st.value()
            assert type(a) is AccountV2
            assert (a.owner, a.balance, a.currency) == (f"o{k}", float(k), "EUR")
            assert not hasattr(a, "cents")
    finally:
        nb.dispose()
        AccountV2.__qualname__ = AccountV2.__name__ = "AccountV2"
