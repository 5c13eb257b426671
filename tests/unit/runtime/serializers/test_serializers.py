"""Serializers: round trips, snapshots, errors, the default key serializer, compatibility."""

from __future__ import annotations

import datetime as dt
import math
import os
import pickle
import subprocess
import sys
from decimal import Decimal
from enum import IntEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamstate.common import Instant, Row, RowKind, Types
from streamstate.common.typeinfo import TypeInformation
from streamstate.errors import ConfigurationError, StateMigrationError
from streamstate.runtime.serializers import (
    Compatibility,
    PickleSerializer,
    TypeSerializer,
    TypeSerializerSnapshot,
    default_key_serializer,
    register_serializer,
    resolve_compatibility,
    restore_serializer,
    serializer_for,
)
from streamstate.runtime.serializers.basic import FieldSerializer, read_varint, write_varint

# -- strategies: a type info together with values of it ----------------------------------------

_I = lambda bits: st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)  # noqa: E731

BASIC: dict[str, tuple[TypeInformation, st.SearchStrategy[Any]]] = {
    "BOOLEAN": (Types.BOOLEAN(), st.booleans()),
    "BYTE": (Types.BYTE(), _I(8)),
    "SHORT": (Types.SHORT(), _I(16)),
    "INT": (Types.INT(), _I(32)),
    "LONG": (Types.LONG(), _I(64)),
    "FLOAT": (Types.FLOAT(), st.floats(width=32, allow_nan=False)),
    "DOUBLE": (Types.DOUBLE(), st.floats(allow_nan=False)),
    "CHAR": (Types.CHAR(), st.characters()),
    "STRING": (Types.STRING(), st.text()),
    "BIG_INT": (Types.BIG_INT(), st.integers()),
    "BIG_DEC": (Types.BIG_DEC(), st.decimals(allow_nan=False)),
    "SQL_DATE": (Types.SQL_DATE(), st.dates()),
    "SQL_TIME": (Types.SQL_TIME(), st.times()),
    "SQL_TIMESTAMP": (Types.SQL_TIMESTAMP(), st.datetimes()),
    "INSTANT": (
        Types.INSTANT(),
        st.builds(Instant, _I(48), st.integers(0, 999_999_999)),
    ),
    "PICKLED": (Types.PICKLED_BYTE_ARRAY(), st.one_of(st.none(), st.integers(), st.text())),
}
NULLABLE = {"STRING", "BIG_INT", "BIG_DEC", "SQL_DATE", "SQL_TIME", "SQL_TIMESTAMP", "INSTANT"}
PRIMITIVE = ["BOOLEAN", "BYTE", "SHORT", "INT", "LONG", "FLOAT", "DOUBLE", "CHAR"]


def _nullable(s: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), s)


def _extend(
    children: st.SearchStrategy[tuple[TypeInformation, st.SearchStrategy[Any]]],
) -> st.SearchStrategy[tuple[TypeInformation, st.SearchStrategy[Any]]]:
    def row(fields: list[tuple[TypeInformation, Any]]) -> Any:
        ti = Types.ROW([t for t, _ in fields])

        def positional(vs: tuple[Any, ...]) -> Row:
            r = Row(*vs)
            r.set_field_names([f"f{i}" for i in range(len(vs))])  # Types.ROW's names, as PyFlink
            return r

        return ti, st.tuples(*[_nullable(v) for _, v in fields]).map(positional)

    def row_named(fields: list[tuple[TypeInformation, Any]]) -> Any:
        names = [f"f_{i}" for i in range(len(fields))]
        ti = Types.ROW_NAMED(names, [t for t, _ in fields])
        values = st.tuples(*[_nullable(v) for _, v in fields])

        def make(vs: tuple[Any, ...]) -> Row:
            r = Row(*vs)
            r.set_field_names(names)
            return r

        return ti, values.map(make)

    def tup(fields: list[tuple[TypeInformation, Any]]) -> Any:
        return Types.TUPLE([t for t, _ in fields]), st.tuples(*[v for _, v in fields])

    def lst(c: tuple[TypeInformation, Any]) -> Any:
        return Types.LIST(c[0]), st.lists(_nullable(c[1]), max_size=5)

    def mp(c: tuple[TypeInformation, Any]) -> Any:
        return Types.MAP(Types.STRING(), c[0]), st.dictionaries(
            st.text(), _nullable(c[1]), max_size=4
        )

    fields = st.lists(children, min_size=0, max_size=4)
    return st.one_of(
        fields.map(row), fields.map(row_named), fields.map(tup), children.map(lst), children.map(mp)
    )


TYPED = st.recursive(st.sampled_from(list(BASIC.values())), _extend, max_leaves=8)


@st.composite
def typed_values(draw: st.DrawFn) -> tuple[TypeInformation, list[Any]]:
    ti, values = draw(TYPED)
    return ti, draw(st.lists(values, max_size=4))


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BASIC))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_basic_round_trip(name: str, data: st.DataObject) -> None:
    ti, values = BASIC[name]
    s = serializer_for(ti)
    vs = data.draw(st.lists(values, max_size=5))
    for v in vs:
        assert s.deserialize(s.serialize(v)) == v
    if name in NULLABLE:
        vs = [*vs, None]
        assert s.deserialize(s.serialize(None)) is None
    assert s.deserialize_many(s.serialize_many(vs)) == vs
    assert s.deserialize_many(s.serialize_many([])) == []


@settings(max_examples=200, deadline=None)
@given(typed_values())
def test_composite_round_trip(tv: tuple[TypeInformation, list[Any]]) -> None:
    ti, vs = tv
    s = serializer_for(ti)
    for v in vs:
        assert s.deserialize(s.serialize(v)) == v
    assert s.deserialize_many(s.serialize_many(vs)) == vs
    if getattr(s, "nullable", True):  # composites and nullable basic types
        assert s.deserialize(s.serialize(None)) is None
    r = restore_serializer(s.snapshot_configuration())
    assert r == s
    for v in vs:
        assert r.deserialize(s.serialize(v)) == v
    assert pickle.loads(pickle.dumps(s)) == s


@pytest.mark.parametrize("name", PRIMITIVE)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_primitive_array_round_trip(name: str, data: st.DataObject) -> None:
    ti, values = BASIC[name]
    s = serializer_for(Types.PRIMITIVE_ARRAY(ti))
    v = data.draw(st.lists(values, max_size=20))
    if name == "BYTE":  # PyFlink: byte[] is bytes
        v = bytes(x & 0xFF for x in v)
    assert s.deserialize(s.serialize(v)) == v
    assert s.deserialize_many(s.serialize_many([v, v])) == [v, v]


def test_basic_and_object_arrays() -> None:
    s = serializer_for(Types.BASIC_ARRAY(Types.STRING()))
    assert s.deserialize(s.serialize(["a", None, ""])) == ["a", None, ""]
    o = serializer_for(Types.OBJECT_ARRAY(Types.ROW([Types.INT()])))
    # a Types.ROW row reads back with Flink's field names f0, f1, ... (as PyFlink's coder)
    assert o.deserialize(o.serialize([Row(1), None])) == [Row(f0=1), None]
    assert s != serializer_for(Types.LIST(Types.STRING()))  # different registry names


def test_special_values() -> None:
    d = serializer_for(Types.DOUBLE())
    assert math.isnan(d.deserialize(d.serialize(float("nan"))))
    assert d.deserialize(d.serialize(float("-inf"))) == float("-inf")
    bd = serializer_for(Types.BIG_DEC())
    for v in ("NaN", "-sNaN", "Infinity", "-Infinity", "-0", "1E+10", "-0.000120"):
        assert str(bd.deserialize(bd.serialize(Decimal(v)))) == str(Decimal(v))
    assert bd.deserialize(bd.serialize(7)) == Decimal(7)
    assert serializer_for(Types.STRING()).serialize(None) == b"\xff"
    st_ = serializer_for(Types.STRING())
    assert st_.deserialize(st_.serialize("\ud800x")) == "\ud800x"  # lone surrogate
    inst = serializer_for(Types.INSTANT())
    aware = dt.datetime(2024, 5, 1, 12, 0, 0, 5, tzinfo=dt.UTC)
    assert inst.deserialize(inst.serialize(aware)) == Instant.from_datetime(aware)


def test_row_named_accepts_dict_and_reordered_row() -> None:
    s = serializer_for(Types.ROW_NAMED(["b", "a"], [Types.STRING(), Types.LONG()]))
    expected = Row(b="x", a=1)
    assert s.deserialize(s.serialize(Row(a=1, b="x"))) == expected
    assert s.deserialize(s.serialize({"a": 1, "b": "x"})) == expected
    assert s.deserialize(s.serialize(("x", 1))) == expected
    r = Row(b="x", a=1)
    r.set_row_kind(RowKind.DELETE)
    assert s.deserialize(s.serialize(r)).get_row_kind() is RowKind.DELETE
    with pytest.raises(ValueError, match="no field 'b'"):
        s.serialize(Row(a=1, c="x"))
    with pytest.raises(ValueError, match="lacks row fields"):
        s.serialize({"a": 1})


def test_nested_pickle_in_composite() -> None:
    s = serializer_for(Types.LIST(Types.PICKLED_BYTE_ARRAY()))
    v = [{1, 2}, None, Row(a=1)]
    assert s.deserialize(s.serialize(v)) == v


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ti", "value", "exc", "match"),
    [
        (Types.LONG(), "1", TypeError, "LONG serializer expects int, got str"),
        (Types.LONG(), True, TypeError, "LONG serializer expects int, got bool"),
        (Types.LONG(), 2**63, ValueError, "out of range for LONG"),
        (Types.BYTE(), 128, ValueError, "out of range for BYTE"),
        (Types.INT(), 1.5, TypeError, "INT serializer expects int"),
        (Types.LONG(), None, TypeError, "not nullable"),
        (Types.FLOAT(), 1e300, ValueError, "out of range for FLOAT"),
        (Types.DOUBLE(), "x", TypeError, "DOUBLE serializer expects float"),
        (Types.BOOLEAN(), 1, TypeError, "BOOLEAN serializer expects bool"),
        (Types.CHAR(), "ab", TypeError, "CHAR serializer expects a str of length 1"),
        (Types.STRING(), b"x", TypeError, "STRING serializer expects str, got bytes"),
        (Types.BIG_INT(), 1.0, TypeError, "BIG_INT serializer expects int"),
        (Types.BIG_DEC(), 1.5, TypeError, "BIG_DEC serializer expects decimal.Decimal"),
        (Types.SQL_DATE(), dt.datetime(2020, 1, 1), TypeError, "SQL_DATE serializer expects"),
        (Types.SQL_TIMESTAMP(), dt.datetime(2020, 1, 1, tzinfo=dt.UTC), TypeError, "INSTANT"),
        (Types.SQL_TIME(), "12:00", TypeError, "SQL_TIME serializer expects"),
        (Types.INSTANT(), dt.datetime(2020, 1, 1), TypeError, "INSTANT serializer expects"),
        (Types.ROW([Types.LONG()]), 5, TypeError, "ROW serializer expects"),
        (Types.ROW([Types.LONG()]), (1, 2), ValueError, "expects 1 fields, got 2"),
        (Types.ROW([Types.LONG()]), ("x",), TypeError, "row field 0: LONG serializer"),
        (Types.TUPLE([Types.INT()]), [1, 2], ValueError, "TUPLE serializer expects 1 fields"),
        (Types.LIST(Types.INT()), "abc", TypeError, "LIST serializer expects a list"),
        (Types.LIST(Types.INT()), [1, "x"], TypeError, "LIST element 1: INT serializer"),
        (Types.MAP(Types.STRING(), Types.INT()), [1], TypeError, "MAP serializer expects a dict"),
        (Types.MAP(Types.STRING(), Types.INT()), {None: 1}, ValueError, "keys must not be None"),
        (Types.MAP(Types.STRING(), Types.INT()), {"k": "v"}, TypeError, "value for key 'k'"),
        (Types.PRIMITIVE_ARRAY(Types.INT()), [1, None], TypeError, "must not be None"),
        (Types.PRIMITIVE_ARRAY(Types.INT()), [1, "x"], TypeError, "INT serializer expects"),
        (Types.PRIMITIVE_ARRAY(Types.INT()), [1, 2**40], ValueError, "out of range for INT"),
        (Types.PRIMITIVE_ARRAY(Types.BYTE()), [1, 2], TypeError, "expects bytes"),
    ],
)
def test_wrong_values_are_rejected(ti: TypeInformation, value: Any, exc: type, match: str) -> None:
    s = serializer_for(ti)
    with pytest.raises(exc, match=match):
        s.serialize(value)


def test_corrupt_data() -> None:
    s = serializer_for(Types.ROW([Types.STRING(), Types.LONG()]))
    b = s.serialize(("abc", 1))
    with pytest.raises(ValueError, match="corrupt"):
        s.deserialize(b[:-2])
    with pytest.raises(ValueError, match="trailing"):
        s.deserialize(b + b"\x00")
    with pytest.raises(ValueError, match="corrupt"):
        serializer_for(Types.LONG()).deserialize(b"\x00")


def test_type_info_validation() -> None:
    with pytest.raises(TypeError, match="primitive element type"):
        Types.PRIMITIVE_ARRAY(Types.STRING())
    with pytest.raises(TypeError, match="basic element type"):
        Types.BASIC_ARRAY(Types.LIST(Types.INT()))
    with pytest.raises(TypeError, match="TypeInformation"):
        Types.LIST(int)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="2 field names but 1"):
        Types.ROW_NAMED(["a", "b"], [Types.INT()])
    with pytest.raises(ConfigurationError, match="unique"):
        Types.ROW_NAMED(["a", "a"], [Types.INT(), Types.INT()])
    with pytest.raises(TypeError, match="TypeInformation"):
        serializer_for("LONG")  # type: ignore[arg-type]


# -- registry ----------------------------------------------------------------------------------


def test_pickle_defaults() -> None:
    assert serializer_for(None) == PickleSerializer()
    assert serializer_for(Types.PICKLED_BYTE_ARRAY()) == PickleSerializer()


@pytest.mark.parametrize("name", sorted(BASIC))
def test_restore_basic(name: str) -> None:
    s = serializer_for(BASIC[name][0])
    snap = s.snapshot_configuration()
    assert restore_serializer(snap) == s
    assert restore_serializer(TypeSerializerSnapshot.from_dict(snap.to_dict())) == s


def test_restore_nested_snapshot_is_json() -> None:
    import json

    ti = Types.MAP(
        Types.STRING(),
        Types.ROW_NAMED(["a", "b"], [Types.PRIMITIVE_ARRAY(Types.LONG()), Types.TUPLE([])]),
    )
    s = serializer_for(ti)
    d = json.loads(json.dumps(s.snapshot_configuration().to_dict()))
    r = restore_serializer(TypeSerializerSnapshot.from_dict(d))
    assert r == s
    v = {"k": Row(a=[1, 2], b=())}
    assert r.deserialize(s.serialize(v)) == v
    assert serializer_for(ti) is s  # cached


def test_restore_errors() -> None:
    with pytest.raises(StateMigrationError, match="no-such"):
        restore_serializer(TypeSerializerSnapshot("no-such", 1))
    with pytest.raises(StateMigrationError, match="version 9"):
        restore_serializer(TypeSerializerSnapshot("long", 9))


class _UpperSerializer(TypeSerializer):
    name = "test_upper"
    version = 2

    def serialize(self, value: Any) -> bytes:
        return value.upper().encode()

    def deserialize(self, data: bytes) -> Any:
        return data.decode()


class _UpperTypeInfo(TypeInformation):
    serializer_name = "test_upper"  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _UpperTypeInfo)

    def __hash__(self) -> int:
        return 7


class _UnhashableUpperTypeInfo(_UpperTypeInfo):
    __hash__ = None  # type: ignore[assignment]


def test_custom_registration_nests_in_composites() -> None:
    register_serializer("test_upper", lambda params: _UpperSerializer(), replace=True)
    with pytest.raises(ConfigurationError, match="already registered"):
        register_serializer("test_upper", lambda params: _UpperSerializer())
    s = serializer_for(Types.LIST(_UpperTypeInfo()))
    assert s.deserialize(s.serialize(["a", None])) == ["A", None]
    assert restore_serializer(s.snapshot_configuration()) == s
    assert serializer_for(_UnhashableUpperTypeInfo()) == _UpperSerializer()  # not cached
    # a reader for an old format version
    register_serializer("test_upper", lambda params: PickleSerializer(), version=1, replace=True)
    assert restore_serializer(TypeSerializerSnapshot("test_upper", 1)) == PickleSerializer()


class Color(IntEnum):
    RED = 1


# -- default key serializer --------------------------------------------------------------------

KEYS = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(),
        st.binary(),
    ),
    lambda c: st.one_of(
        st.lists(c, max_size=4).map(tuple),
        st.lists(c, max_size=3).map(lambda vs: Row(*vs)),
        st.dictionaries(st.sampled_from("abc"), c, max_size=3).map(lambda d: Row(**d)),
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(KEYS)
def test_key_round_trip_and_determinism(key: Any) -> None:
    k = default_key_serializer()
    b = k.serialize(key)
    assert k.serialize(key) == b
    back = k.deserialize(b)
    assert back == key
    assert type(back) is type(key)
    assert k.serialize(back) == b
    assert k.deserialize_many(k.serialize_many([key, key])) == [key, key]


def test_key_type_tags_distinguish() -> None:
    k = default_key_serializer()
    keys = [1, "1", 1.0, True, b"1", (1,), Row(1), None, 0, False, 0.0, ""]
    encoded = {k.serialize(x) for x in keys}
    assert len(encoded) == len(keys)


def test_key_float_normalisation_and_big_ints() -> None:
    k = default_key_serializer()
    assert k.serialize(-0.0) == k.serialize(0.0)
    assert k.serialize(float("nan")) == k.serialize(-float("nan"))
    for n in (2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**40, -(10**40)):
        assert k.deserialize(k.serialize(n)) == n
        assert k.deserialize(k.serialize((n,))) == (n,)


def test_key_pickle_fallback_and_errors() -> None:
    import threading

    k = default_key_serializer()
    assert k.deserialize(k.serialize(dt.date(2020, 1, 1))) == dt.date(2020, 1, 1)
    assert k.serialize(Color.RED) != k.serialize(1)
    with pytest.raises(TypeError, match="cannot be serialized"):
        k.serialize(threading.Lock())
    with pytest.raises(TypeError, match="cannot be serialized"):
        k.serialize((1, threading.Lock()))


def test_key_serializer_registry_and_pickle() -> None:
    k = default_key_serializer()
    assert restore_serializer(k.snapshot_configuration()) is k
    assert pickle.loads(pickle.dumps(k)) is k


_SUBPROCESS = """
import sys
from streamstate.common import Row
from streamstate.runtime.serializers import default_key_serializer
k = default_key_serializer()
for key in ["user-42", ("a", 1, 2.5, None, b"x"), Row(a="x", b=(1, "y")), -7, 2**70]:
    sys.stdout.write(k.serialize(key).hex() + "\\n")
"""


def test_key_bytes_independent_of_hash_seed() -> None:
    outs = []
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        res = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS], env=env, capture_output=True, text=True, check=True
        )
        outs.append(res.stdout)
    assert outs[0] == outs[1]
    k = default_key_serializer()
    mine = [
        k.serialize(x).hex()
        for x in ["user-42", ("a", 1, 2.5, None, b"x"), Row(a="x", b=(1, "y")), -7, 2**70]
    ]
    assert outs[0].split() == mine


# -- varints and compatibility -----------------------------------------------------------------


@given(st.integers(min_value=0, max_value=2**80))
def test_varint_round_trip(n: int) -> None:
    out = bytearray(b"\x99")
    write_varint(out, n)
    assert read_varint(bytes(out), 1) == (n, len(out))


def test_field_serializers_are_field_serializers() -> None:
    for ti, _ in BASIC.values():
        s = serializer_for(ti)
        assert isinstance(s, FieldSerializer) or s == PickleSerializer()


def test_compatibility() -> None:
    long_ = serializer_for(Types.LONG())
    as_is = Compatibility.COMPATIBLE_AS_IS
    migrate = Compatibility.COMPATIBLE_AFTER_MIGRATION
    bad = Compatibility.INCOMPATIBLE
    assert resolve_compatibility(long_.snapshot_configuration(), long_) is as_is
    assert (
        resolve_compatibility(long_.snapshot_configuration(), serializer_for(Types.STRING())) is bad
    )
    old_version = TypeSerializerSnapshot("long", 0)
    assert resolve_compatibility(old_version, long_) is migrate
    assert resolve_compatibility(TypeSerializerSnapshot("long", 5), long_) is bad
    pick = PickleSerializer()
    assert resolve_compatibility(pick.snapshot_configuration(), long_) is migrate
    assert resolve_compatibility(long_.snapshot_configuration(), pick) is migrate

    def row(*types: TypeInformation, names: list[str] | None = None) -> TypeSerializer:
        ti = Types.ROW(list(types)) if names is None else Types.ROW_NAMED(names, list(types))
        return serializer_for(ti)

    r = row(Types.LONG(), Types.STRING())
    snap = r.snapshot_configuration()
    assert resolve_compatibility(snap, row(Types.LONG(), Types.STRING())) is as_is
    assert resolve_compatibility(snap, row(Types.LONG(), Types.INT())) is bad
    assert resolve_compatibility(snap, row(Types.LONG(), Types.PICKLED_BYTE_ARRAY())) is migrate
    # schema evolution: a field removed, names given to a positional row -> migration
    assert resolve_compatibility(snap, row(Types.LONG())) is migrate
    assert (
        resolve_compatibility(snap, row(Types.LONG(), Types.STRING(), names=["a", "b"])) is migrate
    )
    nested = serializer_for(Types.MAP(Types.STRING(), Types.LIST(Types.LONG())))
    assert resolve_compatibility(nested.snapshot_configuration().to_dict(), nested) is as_is  # type: ignore[arg-type]
    assert Compatibility.INCOMPATIBLE.is_incompatible()
