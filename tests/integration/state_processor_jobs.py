"""Jobs and functions of the State Processor API tests (importable by Spark workers)."""

from __future__ import annotations

from typing import Any

from streamstate.common import Duration, Row, TimestampAssigner, Types, WatermarkStrategy
from streamstate.datastream import KeyedProcessFunction, ProcessWindowFunction
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from streamstate.datastream.window import SlidingEventTimeWindows, TumblingEventTimeWindows
from streamstate.state_processor import (
    BroadcastStateBootstrapFunction,
    KeyedStateBootstrapFunction,
    KeyedStateReaderFunction,
    StateBootstrapFunction,
    WindowReaderFunction,
)
from streamstate.testing import TickingClock
from tests.support import envs
from tests.support.backends import fast_local_dir

# -- a running sum per key, with a timer per key ----------------------------------------------

TOTAL = ValueStateDescriptor("total", Types.LONG())
SEEN = ListStateDescriptor("seen", Types.LONG())
TIMER_AT = 1_000_000  # never reached before the end of input: stays registered
DATA = [(f"k{(i * 7) % 23}", i) for i in range(400)]


class RunningSum(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(TOTAL)
        self.seen = ctx.get_list_state(SEEN)

    def process_element(self, value: Any, ctx: Any) -> Any:
        t = (self.total.value() or 0) + value[1]
        self.total.update(t)
        self.seen.add(value[1])
        ctx.timer_service().register_event_time_timer(TIMER_AT + value[1] % 3)
        yield value[0], t


def sum_job(
    parallelism: int = 2,
    backend: str = "hashmap",
    uid: str = "sum",
    sink: CollectSink | None = None,
    **conf: str,
) -> Any:
    """The running-sum job on the in-process runner."""
    keys = {"state.backend.type": backend, **conf}
    if backend == "rocksdb":
        keys["state.backend.rocksdb.localdir"] = fast_local_dir()
    env = envs.make_env(parallelism, max_records=40, conf=keys)
    env.set_clock(TickingClock())
    env.from_collection(DATA).key_by(lambda v: v[0]).process(RunningSum()).uid(uid).sink_to(
        sink or CollectSink()
    )
    return env


def sum_outputs(records: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """What the running-sum job outputs for ``records`` (in order, one per record)."""
    totals: dict[str, int] = {}
    out = []
    for k, v in records:
        totals[k] = totals.get(k, 0) + v
        out.append((k, totals[k]))
    return out


SUM_ROW = Types.ROW_NAMED(
    ["key", "total", "seen", "timers"],
    [Types.STRING(), Types.LONG(), Types.INT(), Types.LIST(Types.LONG())],
)


class SumReader(KeyedStateReaderFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(TOTAL)
        self.seen = ctx.get_list_state(SEEN)

    def read_key(self, key: Any, ctx: Any, out: Any) -> None:
        timers = sorted(ctx.registered_event_time_timers())
        out.collect(
            Row(key=key, total=self.total.value(), seen=len(list(self.seen.get())), timers=timers)
        )


# -- bootstrapping account balances ---------------------------------------------------------

BALANCE = ValueStateDescriptor("balance", Types.LONG())
AUDIT_AT = 5_000


class BalanceBootstrapper(KeyedStateBootstrapFunction):
    """Writes each account's balance and an audit timer the job fires at the end."""

    def open(self, ctx: Any) -> None:
        self.balance = ctx.get_state(BALANCE)

    def process_element(self, row: Any, ctx: Any) -> None:
        self.balance.update((self.balance.value() or 0) + row.balance)
        ctx.timer_service().register_event_time_timer(AUDIT_AT)


class ApplyTransactions(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.balance = ctx.get_state(BALANCE)

    def process_element(self, value: Any, ctx: Any) -> Any:
        b = (self.balance.value() or 0) + value[1]
        self.balance.update(b)
        yield f"{value[0]},{b}"

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield f"audit,{ctx.get_current_key()},{self.balance.value()},{timestamp}"


class BalanceReader(KeyedStateReaderFunction):
    def open(self, ctx: Any) -> None:
        self.balance = ctx.get_state(BALANCE)

    def read_key(self, key: Any, ctx: Any, out: Any) -> Any:
        yield key, self.balance.value()


# -- operator state --------------------------------------------------------------------------

OFFSETS = ListStateDescriptor("offsets", Types.LONG())
RULES = MapStateDescriptor("rules", Types.STRING(), Types.DOUBLE())


class OffsetsBootstrapper(StateBootstrapFunction):
    """List state (or union list state): the ``offset`` column of its partition's rows."""

    def __init__(self, union: bool = False) -> None:
        self.union = union
        self.buffer: list[int] = []

    def initialize_state(self, context: Any) -> None:
        store = context.get_operator_state_store()
        get = store.get_union_list_state if self.union else store.get_list_state
        self.state = get(OFFSETS)

    def process_element(self, value: Any, ctx: Any) -> None:
        self.buffer.append(value.offset)

    def snapshot_state(self, context: Any) -> None:
        self.state.update(self.buffer)


class RulesBootstrapper(BroadcastStateBootstrapFunction):
    def process_element(self, value: Any, ctx: Any) -> None:
        ctx.get_broadcast_state(RULES).put(value.name, value.threshold)


# -- windows ---------------------------------------------------------------------------------

WINDOW_EVENTS = [(f"w{i % 4}", 1_000 + i * 37, i) for i in range(240)]
TUMBLE_MS, SLIDE_SIZE_MS, SLIDE_MS = 1_000, 2_000, 1_000


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[1])


class Sum:
    def reduce(self, a: Any, b: Any) -> Any:
        return (a[0], a[1], a[2] + b[2])


class CollectAll(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        yield key, sorted(e[2] for e in elements)


def window_job() -> Any:
    """Tumbling (reduce) and sliding (process) event-time windows that never fire before
    the end of input (no watermarks): all their contents stay in state."""
    env = envs.make_env(2, max_records=40)
    env.set_clock(TickingClock())
    ds = env.from_collection(WINDOW_EVENTS).assign_timestamps_and_watermarks(
        WatermarkStrategy.no_watermarks().with_timestamp_assigner(EventTime())
    )
    keyed = ds.key_by(lambda e: e[0])
    keyed.window(TumblingEventTimeWindows.of(Duration.of_millis(TUMBLE_MS))).reduce(Sum()).uid(
        "tumbling"
    ).sink_to(CollectSink())
    keyed.window(
        SlidingEventTimeWindows.of(Duration.of_millis(SLIDE_SIZE_MS), Duration.of_millis(SLIDE_MS))
    ).process(CollectAll()).uid("sliding").sink_to(CollectSink())
    return env


class WindowContents(WindowReaderFunction):
    def read_window(self, key: Any, ctx: Any, elements: Any, out: Any) -> None:
        w = ctx.window()
        values = [e[2] for e in elements]
        out.collect(
            (key, w.start, w.end, sorted(values), sorted(ctx.registered_event_time_timers()))
        )


WINDOW_ROW = Types.TUPLE(
    [Types.STRING(), Types.LONG(), Types.LONG(), Types.LIST(Types.LONG()), Types.LIST(Types.LONG())]
)


class TotalReader(KeyedStateReaderFunction):
    """Only the running total: a plain value per key."""

    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(TOTAL)

    def read_key(self, key: Any, ctx: Any, out: Any) -> None:
        out.collect(self.total.value())


class NothingReader(KeyedStateReaderFunction):
    """Emits nothing (no schema to infer)."""

    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(TOTAL)

    def read_key(self, key: Any, ctx: Any, out: Any) -> None:
        return None
