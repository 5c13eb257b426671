"""Taking savepoints of running test jobs at a chosen epoch."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from streamstate.runtime.job_status import EpochStats, JobObserver

__all__ = ["PauseAt", "stop_with_savepoint", "trigger_savepoint"]


class PauseAt(JobObserver):
    """Holds the driver after epoch ``n`` until the test has asked for its savepoint."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.reached = threading.Event()
        self.go = threading.Event()

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        if stats.epoch == self.n:
            self.reached.set()
            assert self.go.wait(30)


def stop_with_savepoint(env: Any, where: Path, at: int, **kw: Any) -> str:
    """Run ``env``'s job, stop it with a savepoint after epoch ``at``; the savepoint's path."""
    pause = PauseAt(at)
    env.add_job_observer(pause)
    client = env.execute_async("to-stop")
    assert pause.reached.wait(30)
    future = client.stop_with_savepoint(savepoint_directory=str(where), **kw)
    pause.go.set()
    path = future.result(timeout=60)
    client.get_job_execution_result().result(60)
    return str(path)


def trigger_savepoint(env: Any, where: Path, at: int, **kw: Any) -> str:
    """Run ``env``'s job to its end, taking a savepoint after epoch ``at``; its path."""
    pause = PauseAt(at)
    env.add_job_observer(pause)
    client = env.execute_async("with-a-savepoint")
    assert pause.reached.wait(30)
    future = client.trigger_savepoint(str(where), **kw)
    pause.go.set()
    path = future.result(timeout=60)
    client.get_job_execution_result().result(60)
    return str(path)
