"""Jobs shared by the integration tests (importable by Spark workers through cloudpickle)."""

from __future__ import annotations

from typing import Any

from streamstate.common import Configuration, Types
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import ValueStateDescriptor


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
    c = Configuration()
    c.set_string("execution.epoch.max-records", str(epoch_records))
    for k, v in conf.items():
        c.set_string(k, v)
    env = StreamExecutionEnvironment.get_execution_environment(c, spark=spark)
    env.set_parallelism(2)
    # bounded retries: a deterministic bug must fail the test, not restart forever
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    return env


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
