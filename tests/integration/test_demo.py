"""The README's showcase (examples/temperature_alerts.py) runs and stays exactly-once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def test_temperature_alerts_demo(tmp_path):
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "temperature_alerts.py"),
        "--readings", "120",
        "--epoch-records", "300",
        "--master", "local[2]",
        "--work-dir", str(tmp_path),
    ]  # fmt: skip
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{proc.stderr[-4000:]}"
    assert "alerts identical to the failure-free run: yes" in out, out
    assert "fired: yes" in out, out
    restarts = next(line for line in out.splitlines() if line.strip().startswith("restarts"))
    assert restarts.split()[1:] == ["0", "1"], out
    # the retained checkpoint of the failure run is where the report says it is
    assert list((tmp_path / "checkpoints" / "with-failure").glob("*/chk-*/_metadata")), out
