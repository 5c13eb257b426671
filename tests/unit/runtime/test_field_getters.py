"""``field_getter``: ``lambda v: v[c]`` runs as ``itemgetter(c)``, ``lambda v: v.name`` as
``attrgetter("name")``, nothing else changes."""

from __future__ import annotations

from operator import attrgetter, itemgetter
from types import SimpleNamespace

import pytest

from streamstate.datastream.functions import KeySelector
from streamstate.runtime.field_getters import fast_key_selector, field_getter


class ByName(KeySelector):
    def get_key(self, value):
        return value["name"]


class Row(dict):
    """A record whose subscript is its own code: the itemgetter must call it as v[c] does."""

    def __getitem__(self, key):
        return ("via", super().__getitem__(key))


OFFSET = 1


@pytest.mark.parametrize(
    ("selector", "const"),
    [
        (lambda v: v[0], 0),
        (lambda v: v[-1], -1),
        (lambda v: v["k"], "k"),
        (ByName().get_key, "name"),
    ],
)
def test_a_constant_subscript_becomes_an_itemgetter(selector, const):
    fast = fast_key_selector(selector)
    assert type(fast) is itemgetter
    record = {0: "a", -1: "z", "k": "kk", "name": "n"}
    assert fast(record) == selector(record) == record[const]
    row = Row(record)
    assert fast(row) == selector(row) == ("via", record[const])


@pytest.mark.parametrize(
    "selector",
    [
        lambda v: v[0:2],  # a slice
        lambda v: v[OFFSET],  # a global: may change
        lambda v: v[0][1],  # two subscripts
        lambda v: v[True],  # a bool constant: not an exact int
        lambda v: v[1.0],
        lambda v: v,
        lambda v, *rest: v[0],
        lambda w, v=(1,): v[0],  # subscripts another argument
        lambda v: (v[0], v[1]),
        len,
    ],
)
def test_anything_else_is_left_as_it_is(selector):
    assert fast_key_selector(selector) is selector


def test_a_closure_is_left_as_it_is():
    i = 0
    selector = lambda v: v[i]  # noqa: E731 - the closure is the point
    assert fast_key_selector(selector) is selector


def test_errors_are_the_same():
    for selector in (lambda v: v[3], lambda v: v["x"]):
        fast = fast_key_selector(selector)
        for record in ((1, 2), {"y": 1}, None):
            with pytest.raises(Exception) as slow_err:
                selector(record)
            with pytest.raises(Exception) as fast_err:
                fast(record)
            assert type(fast_err.value) is type(slow_err.value)
            assert str(fast_err.value) == str(slow_err.value)


def test_an_attribute_read_becomes_an_attrgetter():
    class ByAttr(KeySelector):
        def get_key(self, value):
            return value.user

    record = SimpleNamespace(user="u1", ts=5)
    for selector in (lambda v: v.user, ByAttr().get_key):
        fast = fast_key_selector(selector)
        assert type(fast) is attrgetter
        assert fast(record) == selector(record) == "u1"
    for selector in (lambda v: v.user.name, lambda v: v.get(), lambda v: v.user[0]):
        assert fast_key_selector(selector) is selector


class Stamps:
    def extract_timestamp(self, value, record_timestamp):
        return value[1]

    def uses_the_record_timestamp(self, value, record_timestamp):
        return record_timestamp


def test_a_timestamp_assigner_reading_a_field_is_a_getter_of_the_value():
    assert field_getter(Stamps().extract_timestamp, 2)(("k", 7)) == 7
    assert field_getter(lambda e, ts: e[1], 2)(("k", 8)) == 8
    assert field_getter(lambda e, ts: e.ts, 2)(SimpleNamespace(ts=9)) == 9
    assert field_getter(Stamps().uses_the_record_timestamp, 2) is None
    assert field_getter(lambda e, ts: ts[1], 2) is None  # reads the second argument
    assert field_getter(lambda e: e[1], 2) is None  # not a two-argument function
    assert field_getter(Stamps().extract_timestamp, 1) is None
