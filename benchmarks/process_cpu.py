"""CPU seconds per kind of process of a benchmark's Spark jobs, from cgroup-v1 ``cpuacct``.

A benchmark of a Spark job on this machine spends CPU in four kinds of process: the JVM,
PySpark's Python workers (with their daemon), streamstate's subtask hosts (with their
zygote) and the driver's Python. :class:`KindMeter` puts each kind in a ``cpuacct``
cgroup of its own (processes forked later stay in their parent's group, exited ones
still count), so a job's CPU per kind is the difference of two readings; ``measured``
takes them around one job. Needs a writable cgroup-v1 ``cpuacct`` hierarchy (root on
Linux); without one every figure is 0 and the meter does nothing.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["CGROUP_ROOT", "KINDS", "KindMeter", "measured"]

CGROUP_ROOT = Path("/sys/fs/cgroup/cpuacct")
KINDS = ("jvm", "pyspark", "hosts", "driver")


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _descendants(pid: int) -> list[int]:
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            kids = _children(p)
            seen.append(p)
            todo += kids
    return seen


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class KindMeter:
    """CPU nanoseconds per process kind, from one cpuacct cgroup per kind."""

    def __init__(self, name: str) -> None:
        """``name``: the benchmark's, in its cgroups' names (``streamstate-NAME-PID``)."""
        self.base: Path | None = None
        if not (CGROUP_ROOT / "cgroup.procs").exists() or not os.access(CGROUP_ROOT, os.W_OK):
            return
        base = CGROUP_ROOT / f"streamstate-{name}-{os.getpid()}"
        try:
            for kind in KINDS:
                (base / kind).mkdir(parents=True, exist_ok=True)
        except OSError:
            return
        self.base = base

    def place(self) -> None:
        """Put this process's tree in the kinds' cgroups (after the warm-up started it)."""
        if self.base is None:
            return
        me = os.getpid()
        for pid in _descendants(me):
            cmd = _cmdline(pid)
            if pid == me:
                kind = "driver"
            elif "java" in cmd.split(" ", 1)[0] or "SparkSubmit" in cmd:
                kind = "jvm"
            elif "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
                kind = "pyspark"
            elif "streamstate.runtime.host_process" in cmd:
                kind = "hosts"
            else:
                continue
            with contextlib.suppress(OSError):
                (self.base / kind / "cgroup.procs").write_text(str(pid))
        # zygotes run in a session of their own, outside this process's tree
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and "streamstate.runtime.host_process" in _cmdline(
                int(entry.name)
            ):
                env = b""
                with contextlib.suppress(OSError):
                    env = (entry / "environ").read_bytes()
                if os.environ.get("TMPDIR", "\0").encode() in env:
                    with contextlib.suppress(OSError):
                        (self.base / "hosts" / "cgroup.procs").write_text(entry.name)

    def read(self) -> dict[str, float]:
        if self.base is None:
            return {}
        return {k: int((self.base / k / "cpuacct.usage").read_text()) / 1e9 for k in KINDS}

    def close(self) -> None:
        """Move the processes back to the root cgroup and remove the kinds' cgroups."""
        if self.base is None:
            return
        for kind in KINDS:
            group = self.base / kind
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (CGROUP_ROOT / "cgroup.procs").write_text(pid)
            with contextlib.suppress(OSError):
                group.rmdir()
        with contextlib.suppress(OSError):
            self.base.rmdir()


def measured(meter: KindMeter, fn: Any) -> tuple[float, dict[str, float]]:
    """``fn()``'s records/s and the CPU seconds per kind it used (1 s of settling after:
    the runner's end-of-job work, e.g. stopping the subtask hosts, counts too)."""
    meter.place()  # processes started since (a new zygote, a worker) join their kind
    before = meter.read()
    rate = fn()
    time.sleep(1.0)
    after = meter.read()
    return rate, {k: after[k] - before[k] for k in after}
