"""A job whose keyed state is pickled (a ``ValueStateDescriptor`` without a type, as
PyFlink stores it): the last value per key, with retained checkpoints. The crafted
checkpoint suite (``test_crafted_checkpoints.py``) runs it as an attacker would, with
``--canary PATH``: the values are objects whose unpickling creates ``PATH``::

    python pickled_state_job.py OUT CHK [--canary PATH]
"""

from __future__ import annotations

import argparse
import io
import sys
from typing import Any

from streamstate.common import Configuration, Encoder
from streamstate.datastream import (
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors import FileSink, RollingPolicy
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.testing import TickingClock

UID = "last-values"
STATE = "last"
RECORDS = 200


class Payload:
    """Unpickling it opens ``path`` for appending: the file appears (code ran)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (io.open, (self.path, "a"))


class LastValue(KeyedProcessFunction):
    def __init__(self, canary: str | None) -> None:
        self.canary = canary

    def open(self, ctx: Any) -> None:
        self.last = ctx.get_state(ValueStateDescriptor(STATE))  # no type: pickled

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.last.update(Payload(self.canary) if self.canary else ("seen", value[1]))
        yield f"{value[0]},{value[1]}"


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("chk")
    p.add_argument("--canary")
    args = p.parse_args(argv)
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", "40")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.set_clock(TickingClock())
    env.enable_checkpointing(2500)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(args.chk)
    cc.set_num_retained_checkpoints(10)
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    sink = (
        FileSink.for_row_format(args.out, Encoder.simple_string_encoder())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )
    data = [(f"k{i % 7}", i) for i in range(RECORDS)]
    (
        env.from_collection(data)
        .key_by(lambda v: v[0])
        .process(LastValue(args.canary))
        .uid(UID)
        .sink_to(sink)
    )
    env.execute("pickled-state")


if __name__ == "__main__":
    main(sys.argv[1:])
