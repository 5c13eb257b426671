"""Keyed ``ValueState`` in a ``FlatMapFunction`` (the shape of the state page's
"Using Keyed State" example, in our own words): per key, the mean of every two readings,
the state cleared after each pair. A complete program: ``python keyed_state_average.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamstate.common.typeinfo import Types
from streamstate.datastream import FlatMapFunction, RuntimeContext, StreamExecutionEnvironment
from streamstate.datastream.state import ValueStateDescriptor

READINGS = [("pump", 8), ("fan", 3), ("pump", 4), ("fan", 6), ("pump", 9), ("fan", 1), ("pump", 2)]


class PairMean(FlatMapFunction):
    """Keeps ``(seen, total)`` per key; emits ``(key, total // 2)`` at every second reading."""

    def __init__(self) -> None:
        self.pending: Any = None

    def open(self, runtime_context: RuntimeContext) -> None:
        self.pending = runtime_context.get_state(
            ValueStateDescriptor("pending-pair", Types.PICKLED_BYTE_ARRAY())
        )

    def flat_map(self, value: tuple[str, int]) -> Iterator[tuple[str, int]]:
        seen, total = self.pending.value() or (0, 0)
        seen, total = seen + 1, total + value[1]
        if seen < 2:
            self.pending.update((seen, total))
            return
        self.pending.clear()
        yield value[0], int(total / seen)


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection(READINGS).key_by(lambda reading: reading[0]).flat_map(PairMean()).print()
    env.execute()


if __name__ == "__main__":
    main()
