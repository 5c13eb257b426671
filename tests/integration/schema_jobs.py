"""The job of the Spark schema evolution test (importable by Spark's Python workers).

Version 1 of the job keeps, per key, a ``Reading`` dataclass (value state) and a
``Types.ROW_NAMED`` history (list state), and per subtask the records it saw as rows
(operator list state). Version 2 changes every one of these classes: ``ReadingV2``
drops ``sensor``, adds ``unit`` (default ``"C"``) and reorders; the history row gains
``source`` and loses ``note``; the operator state row is reordered and gains ``ok``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from streamstate.common import Row, Types
from streamstate.datastream import CheckpointedFunction, KeyedProcessFunction
from streamstate.datastream.state import ListStateDescriptor, ValueStateDescriptor


@dataclasses.dataclass
class Reading:
    sensor: str
    total: int
    count: int


@dataclasses.dataclass
class ReadingV2:
    count: int
    total: int
    unit: str = "C"


HIST_V1 = Types.ROW_NAMED(["v", "note"], [Types.LONG(), Types.STRING()])
HIST_V2 = Types.ROW_NAMED(["v", "source"], [Types.LONG(), Types.STRING()])
SEEN_V1 = Types.ROW_NAMED(["key", "v"], [Types.STRING(), Types.LONG()])
SEEN_V2 = Types.ROW_NAMED(["v", "key", "ok"], [Types.LONG(), Types.STRING(), Types.BOOLEAN()])


class Tracker(KeyedProcessFunction, CheckpointedFunction):
    def __init__(self, version: int) -> None:
        self.version = version

    def initialize_state(self, context: Any) -> None:
        t = SEEN_V2 if self.version == 2 else SEEN_V1
        self.seen = context.get_operator_state_store().get_list_state(
            ListStateDescriptor("seen", t)
        )

    def snapshot_state(self, context: Any) -> None:
        pass

    def open(self, ctx: Any) -> None:
        v2 = self.version == 2
        cls = ReadingV2 if v2 else Reading
        self.reading = ctx.get_state(ValueStateDescriptor("reading", Types.DATACLASS(cls)))
        self.hist = ctx.get_list_state(ListStateDescriptor("hist", HIST_V2 if v2 else HIST_V1))

    def process_element(self, value: Any, ctx: Any) -> Any:
        key, v = value
        cur = self.reading.value()
        total = (cur.total if cur is not None else 0) + v
        count = (cur.count if cur is not None else 0) + 1
        if self.version == 2:
            self.reading.update(ReadingV2(count, total))
            self.hist.add(Row(v=v, source="v2"))
            self.seen.add(Row(v=v, key=key, ok=True))
        else:
            self.reading.update(Reading(key, total, count))
            self.hist.add(Row(v=v, note=f"n{v}"))
            self.seen.add(Row(key=key, v=v))
        yield key, total
