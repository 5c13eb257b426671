"""``streamstate local start|status|stop`` and ``streamstate run`` on the warm server, as a
user runs them: subprocesses, a real Spark Connect server, the README's job."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamstate.runtime.host_owner import start_time
from streamstate.spark.local_server import running_server, stop_server

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
CLI = os.path.join(os.path.dirname(sys.executable), "streamstate")

README_JOB = '''
from streamstate.common import Types
from streamstate.datastream import StreamExecutionEnvironment, KeyedProcessFunction
from streamstate.datastream.state import ValueStateDescriptor

class CountPerKey(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield value[0], self.count.value()

env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([("a", 1), ("b", 1), ("a", 1)]).key_by(lambda v: v[0]).process(CountPerKey()).print()
env.execute("count-per-key")
'''

#: the end of a job that stops the warm server it ran on (argv[1]: the streamstate CLI)
STOP_THE_SERVER = """
import subprocess, sys
stopped = subprocess.run([sys.argv[1], "local", "stop"], capture_output=True, text=True)
print("local stop:", stopped.stdout.strip(), file=sys.stderr)
"""

EXPECTED = sorted(["('a', 1)", "('b', 1)", "('a', 2)"])


def _printed(stdout: str) -> list[str]:
    """The printed records, without Flink's ``<subtask>>`` prefix (parallelism > 1)."""
    return sorted(re.sub(r"^\d+> ", "", line) for line in stdout.splitlines() if line.strip())


def _cli(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STREAMSTATE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("SPARK_REMOTE", None)
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def _watchdogs_of(group: int) -> list[str]:
    """The owners that watchdogs of the server's process ``group`` watch."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            raw = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        if "streamstate.spark.local_server_watchdog" in args and args[-1] == str(group):
            found.append(args[-2])
    return found


def test_local_start_run_status_stop(tmp_path):
    home = tmp_path / "home"
    job = tmp_path / "job.py"
    job.write_text(README_JOB)
    try:
        assert _cli(home, "local", "status").returncode == 1
        # owned by this test process: killed, it takes the server along (its watchdog)
        owner = ["--owner-pid", str(os.getpid())]
        started = _cli(home, "local", "start", "--port", "0", "--master", "local[2]", *owner)
        assert started.returncode == 0, started.stderr
        server = running_server(home)
        assert server is not None and server.url in started.stdout
        assert _watchdogs_of(server.pid) == [f"{os.getpid()}-{start_time(os.getpid())}"]
        again = _cli(home, "local", "start")
        assert again.returncode == 0 and "already running" in again.stdout
        status = _cli(home, "local", "status", "--json")
        assert json.loads(status.stdout)["url"] == server.url

        ran = _cli(home, "run", "--quiet", str(job))
        assert ran.returncode == 0, ran.stderr
        assert f"running on the Spark Connect session at {server.url}" in ran.stderr
        assert _printed(ran.stdout) == EXPECTED

        # --master local[...] asks for a classic session even while the server runs
        classic = _cli(home, "run", "--quiet", "--master", "local[1]", str(job))
        assert classic.returncode == 0, classic.stderr
        assert "Spark Connect" not in classic.stderr
        assert _printed(classic.stdout) == EXPECTED

        # a job that stops the server as soon as it is done (as `streamstate local stop`
        # right after a run does) still exits at once: its own Connect session was stopped
        # at the job's end, so pyspark's exit hook has no cleanup RPC to retry for minutes
        # against the stopped server (the bound below is a hang guard)
        stopping_job = tmp_path / "stopping_job.py"
        stopping_job.write_text(README_JOB + STOP_THE_SERVER)
        ran = _cli(home, "run", "--quiet", str(stopping_job), "--", CLI, timeout=120)
        assert ran.returncode == 0, ran.stderr
        assert _printed(ran.stdout) == EXPECTED
        assert "local stop: stopped" in ran.stderr, ran.stderr
        assert running_server(home) is None
        with pytest.raises(ProcessLookupError):
            os.kill(server.pid, 0)
        assert _cli(home, "local", "status").returncode == 1
        assert "not running" in _cli(home, "local", "stop").stdout
        while _watchdogs_of(server.pid):  # it saw the group gone (polls twice a second)
            time.sleep(0.1)
    finally:
        stop_server(home)
