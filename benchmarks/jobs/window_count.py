"""The user functions of ``benchmarks/window_count.py``'s job, in a module of their own.

Every subtask host imports the module its job's functions live in when it unpickles the
job (cloudpickle ships importable classes by reference). Kept apart from the benchmark's
driver code, a host imports these few lines instead of the driver and the result tooling
it imports (tens of ms per host and job when bytecode is not cached), as a job script of
a user would be.
"""

from __future__ import annotations

from typing import Any

from streamstate.common import TimestampAssigner
from streamstate.datastream.functions import AggregateFunction, WindowFunction

__all__ = ["Count", "KeyWindowCount", "Ts"]


class Ts(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return value[1]


class Count(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, acc_a: int, acc_b: int) -> int:
        return acc_a + acc_b


class KeyWindowCount(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        for c in inputs:
            yield key, window.start, c
