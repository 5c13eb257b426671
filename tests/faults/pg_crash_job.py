"""A keyed job into PostgreSQL's exactly-once sink, SIGKILLed where ``CRASH_AT`` says.

Points (see ``crash_job.hit``): ``record`` (during an epoch), ``pre-commit`` (right after
a subtask's ``PREPARE TRANSACTION``), ``after-metadata`` (``_metadata`` stored, before
``COMMIT PREPARED``), ``commit`` (after the first ``COMMIT PREPARED`` of a commit round).
With the in-process runner the worker is this process, so each kill is also a worker
death at that step. Run ``python pg_crash_job.py URL TABLE CHK`` or through
``streamstate run ... --from-checkpoint CHK -- URL TABLE CHK``.
"""

from __future__ import annotations

import sys
from typing import Any

from streamstate.common import Configuration, Types
from streamstate.connectors import postgres
from streamstate.datastream import (
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
    JdbcSink,
)
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.testing import TickingClock
from tests.faults.crash_job import hit  # also installs the _metadata / after-metadata hooks

RECORDS = 400
KEYS = 11

_pre_commit = postgres.PostgresTwoPhaseCommitSink.pre_commit
_commit = postgres.PostgresTwoPhaseCommitSink.commit


def pre_commit(self: Any, transaction: str) -> None:
    _pre_commit(self, transaction)
    hit("pre-commit")


def commit(self: Any, transaction: str) -> None:
    _commit(self, transaction)
    hit("commit")


postgres.PostgresTwoPhaseCommitSink.pre_commit = pre_commit  # type: ignore[method-assign]
postgres.PostgresTwoPhaseCommitSink.commit = commit  # type: ignore[method-assign]


class RunningSum(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        hit("record")
        t = (self.total.value() or 0) + value[1]
        self.total.update(t)
        yield value[1], value[0], t


def main(url: str, table: str, chk: str) -> None:
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", "30")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.set_clock(TickingClock())
    env.enable_checkpointing(2500)  # every 2-3 epochs (the clock ticks 1 s per reading)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(chk)
    cc.set_num_retained_checkpoints(2)
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    data = [(f"k{i % KEYS}", i) for i in range(RECORDS)]
    sink = JdbcSink.exactly_once_sink(
        f"INSERT INTO {table} (i, k, total) VALUES (%s, %s, %s)",
        None,
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(url).build(),
        JdbcExecutionOptions.builder().with_batch_size(7).build(),
        JdbcExactlyOnceOptions.builder().with_transaction_id_prefix(table).build(),
    )
    env.from_collection(data).key_by(lambda v: v[0]).process(RunningSum()).add_sink(sink)
    env.execute("pg-crash-job")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
