"""The suite's Spark Connect server goes with the test session, also when a test failed
and when the run was terminated (SIGTERM: a CI timeout, ``timeout``, ``kill``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from streamstate.spark.local_server_watchdog import group_alive
from tests.support.waits import wait_until

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("connect_fixture_cases.py")


def test_the_server_goes_with_a_failed_and_terminated_run(tmp_path):
    env = {**os.environ, "CONNECT_FIXTURE_OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("STREAMSTATE_HOME", None)  # the inner session makes its own
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            lambda: (tmp_path / "waiting").exists() or run.poll() is not None,
            600,
            "the inner run did not reach its waiting test",
        )
        assert run.poll() is None, run.communicate()[0]
        server_pid = json.loads((tmp_path / "server.json").read_text())["pid"]
        assert group_alive(server_pid)
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=300)  # a hang guard
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert "1 failed" in out and "KeyboardInterrupt" in out, out
    # stopped by the session's end before the process exited, not later by its watchdog
    assert not group_alive(server_pid), out
    assert "left things behind" not in out, out
