"""Jobs shared by the integration tests (importable by Spark workers through cloudpickle)."""

from __future__ import annotations

from typing import Any

from streamstate.common import Types
from streamstate.datastream import (
    CheckpointingMode,
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
)
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


def checkpointed_count(
    spark: Any,
    directory: Any,
    data: list[tuple[str, int]],
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE,
    failure: Any = None,
    **conf: str,
) -> tuple[list[Any], dict[Any, Any]]:
    """The keyed count of ``data`` in epochs of 40 records, a checkpoint every few epochs
    (with a ticking clock) into ``directory`` (retained), ``failure`` mapped after it:
    its collected output and the counts in its last checkpoint."""
    from streamstate.runtime.state_reader import list_checkpoints, read_keyed_state

    env = make_env(spark, epoch_records=40, **conf)
    env.enable_checkpointing(2500, mode)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(directory))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    ds = env.from_collection(data).key_by(lambda v: v[0]).process(CountPerKey()).uid("counter")
    if failure is not None:
        ds = ds.map(failure).name("fail-once")
    out = list(ds.execute_and_collect("checkpointed-count"))
    # the result of the last execute() is not returned by execute_and_collect: read the dir
    chks = [c for c in list_checkpoints(str(directory)) if c.valid]
    latest = max(chks, key=lambda c: c.checkpoint_id)
    state = read_keyed_state(latest.path, "counter", ValueStateDescriptor("count", Types.LONG()))
    return out, state
