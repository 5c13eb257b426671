"""The keyed job state of the queryable-state tests: a count per key, queryable as ``counts``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from streamstate.common import Types
from streamstate.datastream import KeyedProcessFunction
from streamstate.datastream.state import ValueStateDescriptor

__all__ = ["COUNT", "QueryableCount", "counts"]

#: how a client or the state reader reads the count
COUNT = ValueStateDescriptor("count", Types.LONG())


class QueryableCount(KeyedProcessFunction):
    """Counts each key's records in value state ``count``, queryable as ``counts``."""

    def open(self, ctx: Any) -> None:
        d = ValueStateDescriptor("count", Types.LONG())
        d.set_queryable("counts")
        self.count = ctx.get_state(d)

    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        self.count.update((self.count.value() or 0) + 1)
        yield value


def counts(records: Iterable[Any]) -> dict[Any, int]:
    """What ``QueryableCount`` holds per key after ``records``."""
    out: dict[Any, int] = {}
    for k in records:
        out[k] = out.get(k, 0) + 1
    return out
