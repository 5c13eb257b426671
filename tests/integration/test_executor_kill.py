"""An executor JVM killed with SIGKILL in the middle of a job on a cluster (local-cluster:
two executor JVMs): the job recovers and its output equals the failure-free run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.cluster]

HERE = os.path.dirname(os.path.abspath(__file__))


def test_killing_an_executor_jvm_mid_run_keeps_the_output_exact(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(HERE, "executor_kill_job.py"),
            "local-cluster[2,1,1024]",
            str(tmp_path / "chk"),
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    report = json.loads(lines[-1][len("REPORT ") :])
    assert len(report["executors_before"]) == 2, report
    assert report["killed_executor"] is not None, report
    # the kill fell in the middle of the job, not after it
    assert report["killed_after_epochs"] < report["clean_epochs"], report
    # the standalone worker started a new executor for the lost one
    assert report["killed_executor"] not in report["executors_after"], report
    assert report["records"] == 1000 and report["equal"], report
    assert report["same_order_per_key"], report
