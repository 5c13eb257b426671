"""``fast_key_selector``: ``lambda v: v[c]`` runs as ``itemgetter(c)``, nothing else does."""

from __future__ import annotations

from operator import itemgetter

import pytest

from streamstate.datastream.functions import KeySelector
from streamstate.runtime.subscript_keys import fast_key_selector


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
