"""Runs every stage of an epoch in this process: the same task code, no Spark.

Used by unit tests and small local runs (``execution.runner: local``). Stages
run in topological order (stage ids increase along edges); records move
between them exactly as the Spark runner's shuffles would move them.
"""

from __future__ import annotations

import pickle
from typing import Any

from streamstate.runtime.epoch_runner import EpochRunner
from streamstate.runtime.gc_pause import gc_paused
from streamstate.runtime.graph import ExecutionPlan
from streamstate.runtime.job_end import end_job
from streamstate.runtime.protocol import DRIVER, EpochSpec, SubtaskAck
from streamstate.runtime.task import run_stage_partition

__all__ = ["LocalEpochRunner"]


class LocalEpochRunner(EpochRunner):
    def __init__(self, drop_cache_each_epoch: bool = False) -> None:
        self.blobs: dict[int, Any] = {}
        self.drop_cache_each_epoch = drop_cache_each_epoch

    def start(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None:
        self.blobs = {sid: (job_id, sid, blob) for sid, blob in specs.items()}

    def run_epoch(self, plan: ExecutionPlan, epoch_specs: dict[int, EpochSpec]) -> list[SubtaskAck]:
        if self.drop_cache_each_epoch:
            from streamstate.runtime.worker.host import HOST

            HOST.close_instances()
        meta = {s.id: (s.parallelism, s.max_parallelism) for s in plan.stages}
        inbox: dict[int, list[list[Any]]] = {
            s.id: [[] for _ in range(s.parallelism)] for s in plan.stages
        }
        acks: list[SubtaskAck] = []
        for st in plan.stages:
            for i in range(st.parallelism):
                items = [(i, payload) for payload in inbox[st.id][i]]
                # as on Spark's workers: no cyclic collection while a subtask runs its
                # epoch (runtime/gc_pause.py), so both runners cost alike per record
                with gc_paused():
                    for dest, part, payload in run_stage_partition(
                        self.blobs[st.id], meta, epoch_specs[st.id], i, items
                    ):
                        if dest == DRIVER:
                            acks.append(pickle.loads(payload[1]))
                        else:
                            inbox[dest][part].append(payload)
        return acks

    def stop(self) -> None:
        jobs = {blob[0] for blob in self.blobs.values()}
        self.blobs = {}
        for job_id in jobs:
            end_job(job_id)  # its instances closed, RocksDB local copies removed
