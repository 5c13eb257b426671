"""The job of the bed's remote-access scenarios (tests/cluster/test_remote_access.py): a
running sum per key whose state is queryable (``totals``), held at gates as the
machine-loss job is (tests/cluster/fault_job.py), a checkpoint every epoch on S3, output
discarded (the scenarios check the state itself); heap or RocksDB (incremental); prints
``REPORT {"job_id", "checkpoint"}`` (its last checkpoint) when it ends::

    streamstate run --master spark://MASTER:7077 -p 3 remote_job.py -- --backend rocksdb \\
        --checkpoints s3://bed/RUN/chk --gates s3://bed/RUN/gates --records 600 --gate 200
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from streamstate.common import Types
from streamstate.datastream import (
    KeyedProcessFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors.collect import DiscardingSink
from streamstate.datastream.state import ValueStateDescriptor
from tests.cluster.fault_job import checkpoint_every_epoch, gate_reached

KEYS = 12
#: the keyed state: ``total`` of operator ``sums``, queryable as ``totals``
TOTAL = ValueStateDescriptor("total", Types.LONG())


def records(count: int) -> list[tuple[str, int]]:
    return [(f"k{i % KEYS}", i) for i in range(count)]


def totals_after(count: int) -> dict[str, int]:
    """Each key's total once the first ``count`` records were summed."""
    out: dict[str, int] = {}
    for key, value in records(count):
        out[key] = out.get(key, 0) + value
    return out


class QueryableSum(KeyedProcessFunction):
    def __init__(self, gates: str, values: list[int]) -> None:
        self.gates, self.values = gates, frozenset(values)

    def open(self, ctx: Any) -> None:
        descriptor = ValueStateDescriptor("total", Types.LONG())
        descriptor.set_queryable("totals")
        self.total = ctx.get_state(descriptor)

    def process_element(self, value: Any, ctx: Any) -> Any:
        if value[1] in self.values:
            gate_reached(self.gates, value[1])
        total = (self.total.value() or 0) + value[1]
        self.total.update(total)
        yield value[0], total


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="remote_job.py")
    p.add_argument("--checkpoints", required=True)
    p.add_argument("--gates", required=True)
    p.add_argument("--records", type=int, default=600)
    p.add_argument("--gate", type=int, action="append", default=[])
    p.add_argument("--backend", choices=["hashmap", "rocksdb"], required=True)
    args = p.parse_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    checkpoint_every_epoch(env, args.checkpoints, args.backend)
    (
        env.from_collection(records(args.records))
        .key_by(lambda v: v[0], key_type=Types.STRING())
        .process(QueryableSum(args.gates, args.gate))
        .uid("sums")
        .sink_to(DiscardingSink())
    )
    result = env.execute("bed-remote")
    acc = result.get_all_accumulator_results()
    report = {"job_id": str(result.get_job_id()), "checkpoint": acc.get("latest-checkpoint")}
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
