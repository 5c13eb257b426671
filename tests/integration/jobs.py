"""Jobs shared by the integration tests (importable by Spark workers through cloudpickle)."""

from __future__ import annotations

from typing import Any

from streamstate.common import Types
from streamstate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import ValueStateDescriptor
from tests.support import envs


class CountPerKey(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield value[0], c


def records(n: int, keys: int) -> list[tuple[str, int]]:
    return [(f"k{(i * 7919) % keys}", 1) for i in range(n)]


def make_env(spark: Any, epoch_records: int = 50, **conf: str) -> StreamExecutionEnvironment:
    """A local[2] job environment: parallelism 2, bounded restarts."""
    return envs.make_env(spark=spark, max_records=epoch_records, restarts=3, conf=conf)


def count_job(env: StreamExecutionEnvironment, data: list[Any], pre: Any = None) -> CollectSink:
    ds = env.from_collection(data)
    if pre is not None:
        ds = ds.map(pre).name("inject")
    sink = CollectSink()
    ds.key_by(lambda v: v[0]).process(CountPerKey()).uid("counter").sink_to(sink)
    return sink


def final_counts(outputs: list[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, c in outputs:
        out[k] = max(out.get(k, 0), c)
    return out
