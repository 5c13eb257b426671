"""benchmarks/compare_revisions.py cleans up after a failed or interrupted run: a command
that fails leaves no process in the measuring cgroup, and the cgroup itself goes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.compare_revisions import CGROUP_ROOT, CpuMeter


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_failed_command_s_leftover_process_is_killed_and_the_cgroup_removed(tmp_path):
    meter = CpuMeter()
    if meter.cgroup is None:
        pytest.skip(f"no writable cpuacct hierarchy at {CGROUP_ROOT}")
    cgroup = meter.cgroup
    pid_file = tmp_path / "pid"
    # the command starts a process that outlives it (as a subtask-host zygote does), then fails
    script = f"sleep 600 >/dev/null 2>&1 & echo $! > {pid_file}; exit 3"
    with pytest.raises(RuntimeError, match=r"failed \(3\)"):
        meter.run(["sh", "-c", script], tmp_path, dict(os.environ))
    leftover = int(pid_file.read_text())
    assert _alive(leftover)
    meter.close()
    deadline = time.monotonic() + 10
    while _alive(leftover) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(leftover)
    assert not cgroup.exists()


def test_sigterm_ends_a_run_through_its_cleanup():
    """The handler turns SIGTERM into SystemExit, so ``finally`` blocks run."""
    code = (
        "import os, signal, sys\n"
        "from benchmarks.compare_revisions import _exit_on_signal\n"
        "signal.signal(signal.SIGTERM, _exit_on_signal)\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    signal.pause()\n"
        "finally:\n"
        "    print('cleaned up', flush=True)\n"
    )
    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.stdout == "cleaned up\n"
    assert proc.returncode == 128 + signal.SIGTERM


def test_an_idle_process_left_by_a_successful_command_is_killed(tmp_path):
    """A process that outlives the command but spends no CPU (an idle zygote) does not
    hold the measurement up: it is killed and the figure is taken."""
    meter = CpuMeter()
    if meter.cgroup is None:
        pytest.skip(f"no writable cpuacct hierarchy at {CGROUP_ROOT}")
    pid_file = tmp_path / "pid"
    try:
        script = f"sleep 600 >/dev/null 2>&1 & echo $! > {pid_file}"
        cpu, _ = meter.run(["sh", "-c", script], tmp_path, dict(os.environ))
        assert cpu >= 0
        assert not _alive(int(pid_file.read_text()))
        assert not (meter.cgroup / "cgroup.procs").read_text().strip()
    finally:
        meter.close()
