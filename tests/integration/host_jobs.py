"""Functions of the subtask-host tests (importable by Spark workers and hosts)."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from streamstate.datastream import MapFunction
from streamstate.datastream.functions import ParallelSourceFunction


class CallsSoFar(MapFunction):
    """A plain instance field (no state): in Flink it lives as long as the task."""

    def open(self, runtime_context: Any) -> None:
        self.calls = 0
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value: Any) -> Any:
        self.calls += 1
        return self.index, self.calls


class StartCountingSource(ParallelSourceFunction):
    """No operator state: each call of ``run`` leaves a file in ``marker_dir``; emits
    ``per_subtask`` records slowly, so the job spans many epochs."""

    def __init__(self, marker_dir: str, per_subtask: int) -> None:
        self.marker_dir = marker_dir
        self.per_subtask = per_subtask
        self.running = True

    def run(self, ctx: Any) -> None:
        with open(os.path.join(self.marker_dir, f"run-{uuid.uuid4().hex}"), "w"):
            pass
        for i in range(self.per_subtask):
            if not self.running:
                return
            ctx.collect(i)
            time.sleep(0.005)

    def cancel(self) -> None:
        self.running = False
