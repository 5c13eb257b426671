"""What a worker process keeps between epochs: one :class:`WorkerHost` per process.

A PySpark worker (or a subtask host, ``runtime/host_process.py``) is reused across tasks,
so a subtask that lands on the same process in the next epoch finds its operators and
state here instead of restoring them. Everything the worker side keeps from one task to
the next is an attribute of :data:`HOST`; no other module of the worker keeps mutable
state at module level.
"""

from __future__ import annotations

import os
import pickle
import socket
from collections.abc import Mapping
from typing import Any

from streamstate.runtime.protocol import StageTaskSpec, Token, check_protocol_version
from streamstate.runtime.worker.instance import SubtaskInstance

__all__ = ["HOST", "InstanceKey", "SpecKey", "WorkerHost", "spec_key"]

#: ``(job id, stage id, subtask index)``
InstanceKey = tuple[str, int, int]

#: ``(job id, stage id, the plan's (stage id, (parallelism, max parallelism)) pairs)``:
#: what a cached stage spec is valid for (a rescaled job ships new specs: runtime/rescale.py)
SpecKey = tuple[str, int, tuple[tuple[int, tuple[int, int]], ...]]


def spec_key(job_id: str, stage_id: int, stages_meta: Mapping[int, tuple[int, int]]) -> SpecKey:
    """The key of the job's stage spec at the plan's parallelisms ``stages_meta``."""
    return (job_id, stage_id, tuple(sorted(stages_meta.items())))


class WorkerHost:
    """The stage specs and subtask instances of this process (one job at a time)."""

    def __init__(self) -> None:
        #: ``"host:pid"``: named in every ack
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        #: the unpickled spec of each stage, at the plan's parallelisms
        self.specs: dict[SpecKey, StageTaskSpec] = {}
        #: (job id, stage id, subtask) -> the subtask's operators and state
        self.instances: dict[InstanceKey, SubtaskInstance] = {}

    def has_spec(
        self, job_id: str, stage_id: int, stages_meta: Mapping[int, tuple[int, int]]
    ) -> bool:
        return spec_key(job_id, stage_id, stages_meta) in self.specs

    def stage_spec(
        self, spec_blob: Any, stages_meta: Mapping[int, tuple[int, int]]
    ) -> StageTaskSpec:
        """The stage spec of ``spec_blob`` = ``(job id, stage id, bytes or broadcast)``,
        unpickled once per process and plan parallelism (the stage's spec at a previous
        parallelism goes). A new job's first spec drops older jobs' specs and instances
        (one job per worker at a time)."""
        job_id, stage_id, blob = spec_blob
        key = spec_key(job_id, stage_id, stages_meta)
        spec = self.specs.get(key)
        if spec is not None:
            return spec
        for stale in [k for k in self.specs if k[:2] == (job_id, stage_id)]:
            del self.specs[stale]
        if not isinstance(blob, (bytes, bytearray)):
            blob = blob.value  # a Spark broadcast, or the DataFrame runner's file spec
        spec = pickle.loads(blob)
        check_protocol_version(spec)
        if spec.storage_options is not None:
            spec.storage_options.install()
        self.specs[key] = spec
        self._forget_jobs_other_than(job_id)
        return spec

    def forget_job(self, job_id: str) -> None:
        """The job ended: close its subtask instances in this process (a RocksDB database
        and its directory go, a SourceFunction's thread stops) and forget its stage specs."""
        for key in [k for k in self.instances if k[0] == job_id]:
            self.discard(key)
        for stage_key in [k for k in self.specs if k[0] == job_id]:
            del self.specs[stage_key]

    def _forget_jobs_other_than(self, job_id: str) -> None:
        for key in [k for k in self.specs if k[0] != job_id]:
            del self.specs[key]
        for ikey in [k for k in self.instances if k[0] != job_id]:
            # closing stops e.g. a SourceFunction's thread
            self.instances.pop(ikey).close()

    def cached_instance(self, key: InstanceKey, token: Token) -> SubtaskInstance | None:
        """The instance of ``key`` if it is at version ``token`` (it ran the epoch before
        in this attempt); a stale one is closed and forgotten."""
        inst = self.instances.get(key)
        if inst is not None and inst.token == token:
            return inst
        self.discard(key)
        return None

    def take_stale(self, key: InstanceKey, token: Token) -> SubtaskInstance | None:
        """The instance of ``key`` at a version other than ``token``, out of the cache:
        the caller builds the new one from it (a rescale in place keeps key groups) and
        then closes it."""
        inst = self.instances.get(key)
        if inst is None or inst.token == token:
            return None
        return self.instances.pop(key)

    def keep(self, key: InstanceKey, inst: SubtaskInstance) -> None:
        self.instances[key] = inst

    def discard(self, key: InstanceKey) -> None:
        """Close and forget ``key``'s instance (a half-processed one never serves again)."""
        inst = self.instances.pop(key, None)
        if inst is not None:
            inst.close()

    def close_instances(self) -> None:
        """Close every instance (the process exits, or a test rebuilds every epoch)."""
        for key in list(self.instances):
            self.discard(key)


#: the host state of this process
HOST = WorkerHost()
