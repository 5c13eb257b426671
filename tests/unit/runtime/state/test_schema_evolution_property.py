"""Property: a random change of a state's record schema (rows and dataclasses: fields
added, removed, reordered, retyped) either migrates on restore with every value
preserved field by field (kept fields equal, new fields None / their default) or is
rejected with a StateMigrationError naming the retyped field, on every keyed backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamstate.common.row import Row
from streamstate.common.serializer import compare_snapshots
from streamstate.common.typeinfo import Types
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.errors import StateMigrationError
from streamstate.runtime.serializers.registry import serializer_for
from streamstate.runtime.state.registry import registered_keyed_backends
from tests.support.restore import checkpoint, fresh, kg

#: field type name -> (type info, values)
TYPES: dict[str, tuple[Any, Any]] = {
    "long": (Types.LONG(), st.integers(-(2**63), 2**63 - 1)),
    "string": (Types.STRING(), st.text(max_size=8)),
    "double": (Types.DOUBLE(), st.floats(allow_nan=False)),
    "boolean": (Types.BOOLEAN(), st.booleans()),
    "list": (Types.LIST(Types.STRING()), st.lists(st.text(max_size=3), max_size=3)),
}
NAMES = ["a", "b", "c", "d", "e"]

fields_st = st.lists(
    st.tuples(st.sampled_from(NAMES), st.sampled_from(sorted(TYPES))),
    min_size=1,
    max_size=5,
    unique_by=lambda f: f[0],
)


def type_info(kind: str, fields: list[tuple[str, str]], tag: str) -> Any:
    if kind == "row":
        return Types.ROW_NAMED([n for n, _ in fields], [TYPES[t][0] for _, t in fields])
    cls = dataclasses.make_dataclass(
        f"Rec{tag}", [(n, Any, dataclasses.field(default=None)) for n, _ in fields]
    )
    return Types.DATACLASS(cls, {n: TYPES[t][0] for n, t in fields})


@st.composite
def schema_change(draw: Any) -> Any:
    old = draw(fields_st)
    new = draw(fields_st)
    values = draw(
        st.lists(
            st.fixed_dictionaries({n: st.one_of(st.none(), TYPES[t][1]) for n, t in old}),
            min_size=1,
            max_size=6,
        )
    )
    return old, new, values


def fields_of(v: Any) -> dict[str, Any]:
    if isinstance(v, Row):
        return v.as_dict()
    return {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}


@pytest.mark.parametrize("kind", ["row", "dataclass"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(change=schema_change())
def test_random_schema_change_on_the_heap_backend(kind: str, change: Any) -> None:
    check("hashmap", kind, change)


@pytest.mark.parametrize("kind", ["row", "dataclass"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(change=schema_change())
def test_random_schema_change_on_the_other_backends(kind: str, change: Any) -> None:
    for backend in registered_keyed_backends():  # a RocksDB database per example: fewer
        if backend != "hashmap":
            check(backend, kind, change)


def check(backend: str, kind: str, change: Any) -> None:
    """Either every value migrates field by field or the change is rejected."""
    old_fields, new_fields, values = change
    old_t, new_t = type_info(kind, old_fields, "Old"), type_info(kind, new_fields, "New")
    old_ser = serializer_for(old_t)

    def make(d: dict[str, Any]) -> Any:
        if kind == "row":
            return Row(**d)
        return old_ser.cls(**d)  # type: ignore[attr-defined]  # a dataclass serializer

    b = fresh(backend)
    try:
        s = b.get_partitioned_state(ValueStateDescriptor("s", old_t))
        for k, d in enumerate(values):
            b.set_current_key(k, kg(k))
            s.update(make(d))
        h = checkpoint(b)
    finally:
        b.dispose()
    result, _ = compare_snapshots(
        old_ser.snapshot_configuration(), serializer_for(new_t).snapshot_configuration()
    )
    old_types, new_types = dict(old_fields), dict(new_fields)
    retyped = [n for n in new_types if n in old_types and old_types[n] != new_types[n]]
    nb = fresh(backend)
    try:
        nb.restore([h])
        if retyped:
            assert result.is_incompatible()
            with pytest.raises(StateMigrationError) as e:
                nb.get_partitioned_state(ValueStateDescriptor("s", new_t))
            assert any(f"field {n!r}" in str(e.value) for n in retyped), str(e.value)
            return
        assert not result.is_incompatible()
        s = nb.get_partitioned_state(ValueStateDescriptor("s", new_t))
        for k, d in enumerate(values):
            nb.set_current_key(k, kg(k))
            got = fields_of(s.value())
            assert list(got) == [n for n, _ in new_fields]
            for n in got:
                assert got[n] == d.get(n), (n, got, d)  # kept: equal; added: None
    finally:
        nb.dispose()
