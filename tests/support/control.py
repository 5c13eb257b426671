"""Helpers of the control-plane tests: a gate that holds a job's driver, HTTP calls, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from streamstate.control.registry import list_jobs
from streamstate.datastream.connectors.collect import DiscardingSink
from streamstate.errors import JobExecutionError
from streamstate.runtime.job_status import EpochStats, JobObserver
from streamstate.testing import TickingClock
from tests.support import envs

__all__ = ["FailOnce", "Gate", "cli", "http", "record_of", "running_job", "start_job"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FailOnce:
    """A map function that raises on record ``(key, at)`` the first time only (the marker
    file survives the restart, and is seen by every worker process)."""

    def __init__(self, marker: Path, at: int) -> None:
        self.marker = marker
        self.at = at

    def __call__(self, v: Any) -> Any:
        if v[1] == self.at and not self.marker.exists():
            self.marker.write_text("failed")
            raise ValueError(f"injected failure at record {v[1]}")
        return v


class Gate(JobObserver):
    """Holds the driver after every epoch from ``hold_from`` on until :meth:`step` lets one
    more epoch run (so a test sees a running job in a known state)."""

    def __init__(self, hold_from: int, pace: float = 0.0) -> None:
        self.hold_from = hold_from
        #: seconds every epoch takes after release() (keeps the job running for a while)
        self.pace = pace
        self.reached = threading.Semaphore(0)
        self.permits = threading.Semaphore(0)
        self.released = threading.Event()
        self.epoch = 0

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        self.epoch = stats.epoch
        if self.released.is_set() and self.pace:
            time.sleep(self.pace)
        if stats.epoch >= self.hold_from and not self.released.is_set():
            self.reached.release()
            while not self.released.is_set() and not self.permits.acquire(timeout=0.05):
                pass

    def wait(self, timeout: float = 60) -> None:
        assert self.reached.acquire(timeout=timeout), "the job did not reach the gate"

    def step(self) -> None:
        """One more epoch, then hold again."""
        self.permits.release()
        self.wait()

    def release(self) -> None:
        self.released.set()


def http(
    url: str, method: str = "GET", token: str | None = None, body: Any = None
) -> tuple[int, Any]:
    """(status, parsed JSON or text) of one call."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, raw, ctype = r.status, r.read(), r.headers.get("content-type", "")
    except urllib.error.HTTPError as e:
        status, raw, ctype = e.code, e.read(), e.headers.get("content-type", "")
    if "json" in ctype:
        return status, json.loads(raw) if raw else None
    return status, raw.decode()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``streamstate ARGS`` in another process (same registry: STREAMSTATE_HOME)."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from streamstate.cli.main import main; sys.exit(main())",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=dict(os.environ),
    )


#: the REST tests' job input: 100 epochs of 20 records over 5 keys
DATA = [(f"k{i % 5}", i) for i in range(2000)]


def start_job(
    tmp_path: Path, gate: Gate, fail_at: int | None = None, clock: Any = None, **conf: str
) -> Any:
    """A keyed sum over ``DATA`` (in-process runner, parallelism 2, a checkpoint every
    epoch, REST on), held by ``gate``; ``fail_at`` fails record ``fail_at`` once."""
    env = envs.make_env(
        2,
        max_records=20,
        restarts=2,
        conf={"execution.checkpointing.savepoint-dir": str(tmp_path / "sp"), **conf},
    )
    env.set_clock(clock or TickingClock())
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    ds = env.from_collection(DATA).key_by(lambda v: v[0])
    if fail_at is not None:
        ds = ds.map(FailOnce(tmp_path / "failed", fail_at)).uid("fail-once").key_by(lambda v: v[0])
    ds.reduce(lambda a, b: (a[0], a[1] + b[1])).uid("sum").sink_to(DiscardingSink())
    env.add_job_observer(gate)
    return env.execute_async("rest-test")


def record_of(job_id: str) -> Any:
    """The job registry's record of a running job (its REST address and token)."""
    (rec,) = [r for r in list_jobs() if r.job_id == job_id]
    return rec


@contextmanager
def running_job(tmp_path: Path) -> Iterator[tuple[Any, Gate, Any]]:
    """``(client, gate, registry record)`` of a job held at epoch 3; cancelled at the end."""
    gate = Gate(3)
    client = start_job(tmp_path, gate)
    gate.wait()
    try:
        yield client, gate, record_of(client.get_job_id())
    finally:
        gate.release()
        client.cancel()
        try:
            client.get_job_execution_result().result(60)
        except JobExecutionError:
            pass
