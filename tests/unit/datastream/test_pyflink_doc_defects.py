"""Defects found by running PyFlink's documented programs (tests/pyflink_docs), issue 10."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from streamstate.common import Types
from streamstate.datastream import ProcessAllWindowFunction, ProcessWindowFunction
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.functions import KeyedProcessFunction
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend
from streamstate.datastream.window import TimeWindow
from tests.support.envs import make_env


def test_window_function_contexts_are_generic_as_pyflinks() -> None:
    # PyFlink's examples annotate ``context: ProcessWindowFunction.Context[TimeWindow]``
    assert ProcessWindowFunction.Context[TimeWindow] is not None
    assert ProcessAllWindowFunction.Context[TimeWindow] is not None


def test_type_serializer_is_generic_as_pyflinks() -> None:
    # the custom WindowAssigner of PyFlink's windows page: -> TypeSerializer[TimeWindow]
    from streamstate.common.serializer import TypeSerializer

    assert TypeSerializer[TimeWindow] is not None


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


class FloatSum(KeyedProcessFunction):
    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("s", Types.FLOAT()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.state.update((self.state.value() or 0) + value[1])
        yield value[0], self.state.value()


@pytest.mark.parametrize("backend", [HashMapStateBackend, EmbeddedRocksDBStateBackend])
def test_a_float_value_state_keeps_float32_values_on_every_backend(
    backend: Any, tmp_path: Any
) -> None:
    env = make_env(1, conf={"execution.progress": "none", "rest.enabled": "false"})
    env.set_state_backend(backend())
    sink = CollectSink()
    data = [("a", 110.1), ("a", 20.1), ("a", 0.1)]
    env.from_collection(data).key_by(lambda v: v[0]).process(FloatSum()).sink_to(sink)
    env.execute()
    expected, acc = [], 0.0
    for k, v in data:
        acc = _f32(acc + v)  # PyFlink: every state write goes through the FLOAT serializer
        expected.append((k, acc))
    assert sink.get_results() == expected
