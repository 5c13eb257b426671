"""streamstate.common: Types, Row, Time/Duration/Instant, Configuration."""

from __future__ import annotations

import copy
import datetime as dt
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

import streamstate.common as common
from streamstate.common import (
    Configuration,
    Duration,
    Instant,
    Row,
    RowKind,
    Time,
    Types,
    parse_duration_ms,
    to_millis,
)
from streamstate.common.typeinfo import RowTypeInfo, TypeInformation
from streamstate.errors import ConfigurationError

# -- Types -------------------------------------------------------------------------------------

ALL_TYPES = [
    Types.STRING(),
    Types.BYTE(),
    Types.BOOLEAN(),
    Types.SHORT(),
    Types.INT(),
    Types.LONG(),
    Types.FLOAT(),
    Types.DOUBLE(),
    Types.CHAR(),
    Types.BIG_INT(),
    Types.BIG_DEC(),
    Types.SQL_DATE(),
    Types.SQL_TIME(),
    Types.SQL_TIMESTAMP(),
    Types.INSTANT(),
    Types.PICKLED_BYTE_ARRAY(),
    Types.ROW([Types.LONG(), Types.STRING()]),
    Types.ROW_NAMED(["a", "b"], [Types.LONG(), Types.LIST(Types.STRING())]),
    Types.TUPLE([Types.INT(), Types.DOUBLE()]),
    Types.PRIMITIVE_ARRAY(Types.INT()),
    Types.PRIMITIVE_ARRAY(Types.BYTE()),
    Types.BASIC_ARRAY(Types.STRING()),
    Types.OBJECT_ARRAY(Types.ROW([Types.INT()])),
    Types.LIST(Types.MAP(Types.STRING(), Types.LONG())),
    Types.MAP(Types.STRING(), Types.TUPLE([Types.INT()])),
]


@pytest.mark.parametrize("ti", ALL_TYPES, ids=repr)
def test_type_info_value_semantics(ti: TypeInformation) -> None:
    assert isinstance(ti, TypeInformation)
    assert pickle.loads(pickle.dumps(ti)) == ti
    assert eval(repr(ti), {"Types": Types}) == ti  # repr is the Types call
    assert str(ti) == repr(ti)
    assert {ti: 1}[copy.deepcopy(ti)] == 1
    with pytest.raises(AttributeError):
        ti.x = 1  # type: ignore[attr-defined]


def test_type_info_equality() -> None:
    assert Types.LONG() == Types.LONG()
    assert Types.LONG() != Types.INT()
    assert Types.LIST(Types.LONG()) != Types.BASIC_ARRAY(Types.LONG())
    assert Types.ROW([Types.INT()]) != Types.ROW_NAMED(["f0"], [Types.INT()])
    assert Types.ROW([Types.INT()]) == Types.ROW((Types.INT(),))
    assert len(set(map(repr, ALL_TYPES))) == len(ALL_TYPES)


def test_row_type_info_accessors() -> None:
    ti = Types.ROW_NAMED(["a", "b"], [Types.LONG(), Types.STRING()])
    assert isinstance(ti, RowTypeInfo)
    assert ti.get_field_names() == ["a", "b"]
    assert ti.get_field_types() == [Types.LONG(), Types.STRING()]
    assert ti.get_field_index("b") == 1 and ti.get_field_index("zz") == -1
    assert ti.get_arity() == 2
    positional = Types.ROW([Types.LONG()])
    assert isinstance(positional, RowTypeInfo)
    assert positional.get_field_names() == ["f0"]


def test_serializer_names() -> None:
    assert Types.LONG().serializer_name == "long"
    assert Types.PRIMITIVE_ARRAY(Types.BYTE()).serializer_name == "bytes"
    assert Types.PRIMITIVE_ARRAY(Types.LONG()).serializer_params() == {"element": Types.LONG()}
    assert Types.MAP(Types.INT(), Types.STRING()).serializer_params() == {
        "key": Types.INT(),
        "value": Types.STRING(),
    }


def test_common_all_sorted() -> None:
    assert common.__all__ == sorted(common.__all__)
    for name in common.__all__:
        assert hasattr(common, name)


# -- Row ---------------------------------------------------------------------------------------


def test_row_named_and_positional() -> None:
    r = Row(a=1, b="x")
    assert r.a == 1 and r["b"] == "x" and r[0] == 1 and r[-1] == "x"
    assert list(r) == [1, "x"] and len(r) == 2
    assert r.as_dict() == {"a": 1, "b": "x"}
    assert repr(r) == "Row(a=1, b='x')"
    assert Row(b=1, a=2).as_dict() == {"b": 1, "a": 2}  # keyword order is kept
    p = Row(1, 2)
    assert p[1] == 2 and repr(p) == str(p) == "<Row(1, 2)>"  # PyFlink's repr
    assert p.get_field_names() is None
    with pytest.raises(TypeError):
        p.as_dict()
    with pytest.raises(AttributeError):
        _ = r.zz
    with pytest.raises(KeyError):
        _ = r["zz"]
    with pytest.raises(ValueError):
        Row(1, a=2)
    assert 1 in r and "a" not in r


def test_row_equality_hash_pickle_kind() -> None:
    assert Row(a=1) == Row(a=1)
    assert Row(a=1) != Row(b=1)
    assert Row(1) != Row(a=1)
    assert Row(1, 2) != (1, 2)
    assert len({Row(a=1), Row(a=1)}) == 1
    r = Row(a=1, b=[1, 2])
    r.set_row_kind(RowKind.UPDATE_AFTER)
    assert r != Row(a=1, b=[1, 2])
    back = pickle.loads(pickle.dumps(r))
    assert back == r and back.get_row_kind() is RowKind.UPDATE_AFTER
    assert RowKind.UPDATE_AFTER.short_string() == "+U"
    assert RowKind.from_byte_value(3) is RowKind.DELETE
    with pytest.raises(TypeError):
        r.set_row_kind(1)  # type: ignore[arg-type]


def test_row_mutation_and_helpers() -> None:
    r = Row(a=1, b=Row(c=2))
    r["a"] = 5
    r[1] = Row(c=3)
    assert r == Row(a=5, b=Row(c=3))
    assert r.as_dict(recursive=True) == {"a": 5, "b": {"c": 3}}
    person = Row("name", "age")
    assert person("Alice", 11) == Row(name="Alice", age=11)
    p = Row(1, 2)
    p.set_field_names(["x", "y"])
    assert p == Row(x=1, y=2)
    with pytest.raises(ValueError):
        p.set_field_names(["x"])


# -- Time / Duration / Instant -----------------------------------------------------------------


def test_time() -> None:
    assert Time.seconds(2).to_milliseconds() == 2000
    assert Time.minutes(1) == Time.milliseconds(60_000)
    assert Time.hours(1).to_milliseconds() == 3_600_000
    assert Time.days(1).to_milliseconds() == 86_400_000
    assert Time.from_timedelta(dt.timedelta(seconds=1, microseconds=1500)) == Time(1001)
    assert Time.seconds(3).to_timedelta() == dt.timedelta(seconds=3)
    assert Time.seconds(1) < Time.seconds(2)
    assert pickle.loads(pickle.dumps(Time(5))) == Time(5)
    with pytest.raises(TypeError):
        Time.seconds(1.5)  # type: ignore[arg-type]


def test_duration() -> None:
    assert Duration.of_millis(1500).to_milliseconds() == 1500
    assert Duration.of_seconds(2) == Duration.of_millis(2000)
    assert Duration.of_minutes(1).to_milliseconds() == 60_000
    assert Duration.of_hours(1).to_milliseconds() == 3_600_000
    assert Duration.of_days(1).to_milliseconds() == 86_400_000
    assert Duration.of_nanos(1_999_999).to_milliseconds() == 1
    assert Duration.of_nanos(-1).to_milliseconds() == -1  # floored like Java
    assert Duration.from_timedelta(dt.timedelta(milliseconds=5)) == Duration.of_millis(5)
    assert Duration.of_seconds(90).to_timedelta() == dt.timedelta(seconds=90)
    assert {Duration.of_seconds(1): 1}[Duration.of_millis(1000)] == 1
    assert pickle.loads(pickle.dumps(Duration.of_nanos(7))) == Duration.of_nanos(7)
    assert repr(Duration.of_seconds(1)) == "Duration.of_millis(1000)"


@given(st.timedeltas(min_value=dt.timedelta(0)))
def test_timedelta_round_trip(td: dt.timedelta) -> None:
    assert Duration.from_timedelta(td).to_timedelta() == td
    assert to_millis(td) == to_millis(Duration.from_timedelta(td))
    assert to_millis(td) == td // dt.timedelta(milliseconds=1)


def test_instant() -> None:
    i = Instant.of_epoch_milli(-1)
    assert (i.seconds, i.nanos) == (-1, 999_000_000)
    assert i.to_epoch_milli() == -1
    assert Instant(1, 2_000_000_001) == Instant(3, 1)
    aware = dt.datetime(2024, 1, 1, 0, 0, 1, 5, tzinfo=dt.UTC)
    assert Instant.from_datetime(aware).to_datetime() == aware
    with pytest.raises(ValueError):
        Instant.from_datetime(dt.datetime(2024, 1, 1))
    assert Instant(1, 0) < Instant(1, 1)
    assert pickle.loads(pickle.dumps(i)) == i


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        (0, 0),
        (1500, 1500),
        (dt.timedelta(seconds=2), 2000),
        (dt.timedelta(microseconds=2500), 2),
        (Time.seconds(3), 3000),
        (Duration.of_minutes(1), 60_000),
    ],
)
def test_to_millis(value: object, ms: int) -> None:
    assert to_millis(value) == ms


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (1.5, "got float"),
        (True, "got bool"),
        ("10 s", "got str"),
        (None, "got NoneType"),
        (-1, "must not be negative"),
        (dt.timedelta(seconds=-1), "must not be negative"),
        (Duration.of_millis(-5), "must not be negative"),
    ],
)
def test_to_millis_rejects(value: object, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        to_millis(value, "checkpoint interval")
    with pytest.raises(ConfigurationError, match="checkpoint interval"):
        to_millis(value, "checkpoint interval")


# -- durations and Configuration ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("10 s", 10_000),
        ("10s", 10_000),
        ("1min", 60_000),
        ("1 m", 60_000),
        ("500 ms", 500),
        ("2 h", 7_200_000),
        ("1000", 1000),
        ("3 d", 259_200_000),
        ("  7 SECONDS ", 7000),
        ("1 day", 86_400_000),
        ("2500 us", 2),
        ("3000000 ns", 3),
        ("1 minutes", 60_000),
    ],
)
def test_parse_duration(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "s", "-1 s", "1.5 s", "10 fortnights", "ten s", "1 s 2"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ConfigurationError, match="duration"):
        parse_duration_ms(text)


def test_parse_duration_int_passthrough() -> None:
    assert parse_duration_ms(42) == 42
    with pytest.raises(ConfigurationError):
        parse_duration_ms(-1)
    with pytest.raises(ConfigurationError):
        parse_duration_ms(1.5)  # type: ignore[arg-type]


def test_configuration_typed_api() -> None:
    c = Configuration()
    c.set_string("s", "v")
    c.set_integer("i", 42)
    c.set_boolean("b", True)
    c.set_float("f", 1.5)
    assert c.get_string("s", "d") == "v" and c.get_string("zz", "d") == "d"
    assert c.get_integer("i", 0) == 42 and c.get_integer("zz", 7) == 7
    assert c.get_boolean("b", False) is True
    assert c.get_float("f", 0.0) == 1.5
    assert c.to_dict() == {"s": "v", "i": "42", "b": "true", "f": "1.5"}
    assert c.contains_key("s") and "s" in c and not c.contains_key("zz")
    assert c.keys() == ["s", "i", "b", "f"] and c.key_set() == {"s", "i", "b", "f"}
    assert c.remove_config("s") is True and c.remove_config("s") is False
    with pytest.raises(ConfigurationError, match="'s2' = 'x' is not an integer"):
        c.set_string("s2", "x").get_integer("s2", 0)
    with pytest.raises(ConfigurationError, match="not a boolean"):
        c.get_boolean("s2", False)
    with pytest.raises(ConfigurationError):
        c.set_integer("i", "1")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        c.set_string("", "x")


def test_configuration_get_set_helpers() -> None:
    c = Configuration.from_dict(
        {"n": 3, "flag": False, "iv": dt.timedelta(seconds=10), "t": "30 s", "l": ["a", "b"]}
    )
    assert c.to_dict() == {"n": "3", "flag": "false", "iv": "10000 ms", "t": "30 s", "l": "a;b"}
    assert c.get("n", 0) == 3
    assert c.get("flag", True) is False
    assert c.get("n") == "3"
    assert c.get("zz", 5) == 5
    assert c.get("t", dt.timedelta(0)) == dt.timedelta(seconds=30)
    assert c.get_duration_ms("iv") == 10_000 and c.get_duration_ms("zz", 1) == 1
    c.set("x", 2.5).set("d", Duration.of_seconds(1))
    assert c.get("x", 0.0) == 2.5 and c.get_string("d") == "1000 ms"
    with pytest.raises(ConfigurationError, match="configuration values must be"):
        c.set("bad", object())
    with pytest.raises(ConfigurationError, match="'t'"):
        Configuration({"t": "soon"}).get_duration_ms("t")


def test_configuration_copy_add_all_eq() -> None:
    a = Configuration({"x": "1"})
    b = Configuration(a)
    assert a == b and a is not b
    b.set_string("y", "2")
    assert a != b
    c = Configuration().add_all(b, prefix="p.")
    assert c.to_dict() == {"p.x": "1", "p.y": "2"}
    d: dict[str, str] = {}
    b.add_all_to_dict(d)
    assert d == {"x": "1", "y": "2"}
    e = copy.deepcopy(b)
    e.set_string("x", "9")
    assert b.get_string("x") == "1"
    assert len(b) == 2 and sorted(b) == ["x", "y"]
    assert repr(a) == "Configuration({'x': '1'})"
    with pytest.raises(TypeError):
        hash(a)
