"""Declared types are checked where they are declared; what functions return is checked."""

from __future__ import annotations

from typing import Any

import pytest

from streamstate.common import RestartStrategies, Types
from streamstate.datastream import KeyedProcessFunction, ProcessFunction
from streamstate.errors import JobExecutionError, KeySerializationError, OutputTypeError
from tests.support import envs


def failing(build: Any) -> BaseException:
    env = envs.make_env(max_records=10)
    env.set_restart_strategy(RestartStrategies.no_restart())
    build(env).print()
    with pytest.raises(JobExecutionError) as ei:
        env.execute("declared-types")
    return ei.value.__cause__


def test_a_value_that_does_not_fit_the_declared_output_type_is_typed():
    # issue 17: the strings flowed on and a later sum concatenated them
    cause = failing(
        lambda env: (
            env.from_collection([("a", 1), ("b", 2)])
            .map(
                lambda v: (v[0], str(v[1])), output_type=Types.TUPLE([Types.STRING(), Types.LONG()])
            )
            .key_by(lambda v: v[0])
            .sum(1)
        )
    )
    assert isinstance(cause, OutputTypeError)
    text = str(cause)
    assert "'Map'" in text and "TUPLE" in text.upper() and "str" in text


def test_declared_long_output_rejects_strings_and_accepts_ints():
    cause = failing(lambda env: env.from_collection([1, 2]).map(str, output_type=Types.LONG()))
    assert isinstance(cause, OutputTypeError) and "LONG" in str(cause)
    env = envs.make_env(max_records=10)
    env.from_collection([1, 2]).map(lambda v: v * 10, output_type=Types.LONG()).print()
    env.execute("ok")


def test_a_str_key_with_a_long_key_type_names_the_declared_type():
    cause = failing(
        lambda env: (
            env.from_collection([("a", 1)])
            .key_by(lambda v: v[0], key_type=Types.LONG())
            .map(lambda v: v)
        )
    )
    assert isinstance(cause, KeySerializationError)
    assert "key_type=Types.LONG()" in str(cause) and "str 'a'" in str(cause)


class ReturnsInt(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        return value[1]  # should be `yield`


class ReturnsIntUnkeyed(ProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        return value[1]


@pytest.mark.parametrize("keyed", [True, False])
def test_process_element_returning_a_value_says_yield(keyed: bool):
    def build(env: Any) -> Any:
        ds = env.from_collection([("a", 1)])
        if keyed:
            return ds.key_by(lambda v: v[0]).process(ReturnsInt())
        return ds.process(ReturnsIntUnkeyed())

    cause = failing(build)
    assert isinstance(cause, OutputTypeError)
    text = str(cause)
    assert "yield" in text and "returned" in text
    assert ("ReturnsInt" in text) and ("Process" in text)


TYPES = [
    Types.LONG(),
    Types.INT(),
    Types.SHORT(),
    Types.BYTE(),
    Types.STRING(),
    Types.BOOLEAN(),
    Types.DOUBLE(),
    Types.TUPLE([Types.STRING(), Types.LONG()]),
    Types.TUPLE([Types.INT(), Types.TUPLE([Types.BOOLEAN(), Types.DOUBLE()])]),
]


@pytest.mark.parametrize("type_info", TYPES, ids=repr)
def test_the_fast_check_never_accepts_what_the_serializer_rejects(type_info: Any):
    # (FLOAT has no fast check: its range is 32-bit, only the serializer knows the edge)
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from streamstate.runtime.operators.output_types import fast_check
    from streamstate.runtime.serializers.registry import serializer_for

    check = fast_check(type_info)
    assert check is not None
    ser = serializer_for(type_info)
    leaf = st.one_of(
        st.integers(-(2**70), 2**70),
        st.text(max_size=5),
        st.booleans(),
        st.floats(allow_nan=False),
        st.none(),
        st.binary(max_size=3),
    )
    values = st.recursive(leaf, lambda c: st.tuples(c, c) | st.lists(c, max_size=2), max_leaves=4)

    @settings(max_examples=300, deadline=None)
    @given(values)
    def prop(v: Any) -> None:
        if check(v):
            ser.serialize(v)  # accepted

    prop()
