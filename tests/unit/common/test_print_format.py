"""``print()`` writes records as PyFlink does (issue 10): typed streams as Java's
toString of the typed value, untyped ones as ``str(value)``; ``str(Row(...))`` as
PyFlink's Row."""

from __future__ import annotations

from typing import Any

import pytest

from streamstate.common import Row, Types
from streamstate.common.java_strings import flink_string, java_double_string, java_float_string
from streamstate.datastream import StreamExecutionEnvironment
from tests.support.envs import make_env

QUIET = {"execution.progress": "none", "rest.enabled": "false"}


def printed(env: StreamExecutionEnvironment, capfd: pytest.CaptureFixture[str]) -> list[str]:
    capfd.readouterr()
    env.execute()
    return capfd.readouterr().out.splitlines()


@pytest.mark.parametrize(
    ("value", "double", "float32"),
    [
        (1.0, "1.0", "1.0"),
        (110.1, "110.1", "110.1"),
        (0.1 + 0.2, "0.30000000000000004", "0.3"),
        (1e7, "1.0E7", "1.0E7"),
        (9999999.0, "9999999.0", "9999999.0"),
        (0.001, "0.001", "0.001"),
        (0.0001, "1.0E-4", "1.0E-4"),
        (-2.5e-12, "-2.5E-12", "-2.5E-12"),
        (0.0, "0.0", "0.0"),
        (float("nan"), "NaN", "NaN"),
        (float("-inf"), "-Infinity", "-Infinity"),
    ],
)
def test_java_floating_point_strings(value: float, double: str, float32: str) -> None:
    assert java_double_string(value) == double
    assert java_float_string(value) == float32


def test_typed_values_render_as_java_objects() -> None:
    tup = Types.TUPLE([Types.STRING(), Types.INT(), Types.BOOLEAN(), Types.DOUBLE()])
    assert flink_string(("hi", 3, True, 2.0), tup) == "(hi,3,true,2.0)"
    assert flink_string(("hi", None, False, 1e8), tup) == "(hi,null,false,1.0E8)"
    row = Types.ROW_NAMED(["id", "info"], [Types.INT(), Types.STRING()])
    assert flink_string(Row(id=1, info="x"), row) == "+I[1, x]"
    nested = Types.TUPLE([Types.LIST(Types.INT()), Types.MAP(Types.STRING(), Types.LONG())])
    assert flink_string(([1, 2], {"a": 1}), nested) == "([1, 2],{a=1})"
    # untyped (pickled) records print as Python shows them
    assert flink_string(("hi", 3), None) == "('hi', 3)"
    assert flink_string("text", Types.PICKLED_BYTE_ARRAY()) == "text"


def test_time_values_render_as_java_time_objects() -> None:
    import datetime as dt

    from streamstate.common.time import Instant

    ts = Types.TUPLE([Types.SQL_TIMESTAMP(), Types.SQL_DATE(), Types.SQL_TIME(), Types.INSTANT()])
    value = (dt.datetime(2024, 1, 2, 3, 4, 5, 120000), dt.date(2024, 1, 2), dt.time(3, 4, 5))
    assert (
        flink_string((*value, Instant(1, 5_000_000)), ts)
        == "(2024-01-02 03:04:05.12,2024-01-02,03:04:05,1970-01-01T00:00:01.005Z)"
    )
    assert flink_string(dt.datetime(2024, 1, 2), Types.SQL_TIMESTAMP()) == "2024-01-02 00:00:00.0"


def test_str_of_row_is_pyflinks() -> None:
    assert str(Row("Alice", 11)) == "<Row('Alice', 11)>"
    assert str(Row(name="Alice", age=11)) == "Row(name='Alice', age=11)"


def test_print_of_a_typed_word_count(capfd: pytest.CaptureFixture[str]) -> None:
    env = make_env(1, conf=QUIET)
    (
        env.from_collection(["a b", "b"])
        .flat_map(lambda s: s.split())
        .map(lambda w: (w, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))  # keeps the tuple type
        .filter(lambda t: True)
        .print()
    )
    assert printed(env, capfd) == ["(a,1)", "(b,1)", "(b,2)"]


def test_print_of_an_untyped_stream_is_str(capfd: pytest.CaptureFixture[str]) -> None:
    env = make_env(1, conf=QUIET)
    env.from_collection([("a", 1.5), ("b", None)]).print()
    assert printed(env, capfd) == ["('a', 1.5)", "('b', None)"]


def test_print_of_typed_collection_rows_and_window_output_types(
    capfd: pytest.CaptureFixture[str],
) -> None:
    from streamstate.datastream import ProcessWindowFunction
    from streamstate.datastream.window import CountWindow

    class Count(ProcessWindowFunction[tuple, tuple, str, CountWindow]):
        def process(self, key: str, context: Any, elements: Any) -> Any:
            return [(key, len(list(elements)))]

    env = make_env(1, conf=QUIET)
    ds = env.from_collection(
        [(1, "x"), (2, "x")], type_info=Types.ROW_NAMED(["id", "k"], [Types.INT(), Types.STRING()])
    )
    ds.print()
    ds.key_by(lambda r: r.k).count_window(2).process(
        Count(), Types.TUPLE([Types.STRING(), Types.INT()])
    ).print("win")
    out = printed(env, capfd)
    assert sorted(out) == sorted(["+I[1, x]", "+I[2, x]", "win> (x,2)"])
