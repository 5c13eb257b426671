"""The test session's leftover check (tests/support/leftovers.py) with two sessions in one
temp dir: the other session's private home is not this session's leftover while that
session runs; anything else new of streamstate's is."""

from __future__ import annotations

import subprocess
import sys
import tempfile

from tests.support.leftovers import HOME_PREFIX, Baseline, leftover_files


def test_a_running_sessions_home_is_not_a_leftover_of_another(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    baseline = Baseline()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    try:
        for name in (f"{HOME_PREFIX}{other.pid}-a1", f"{HOME_PREFIX}{ended.pid}-b2"):
            (tmp_path / name / "jobs" / "root").mkdir(parents=True)
            (tmp_path / name / "checkpoint.key").write_text("k")
        (tmp_path / "streamstate-0").mkdir()
        found = leftover_files(baseline)
    finally:
        other.kill()
        other.wait()
    # the running session's home is its own (removed when it ends); an ended session's
    # home and a runtime dir are left behind
    assert sorted(found) == sorted([f"{HOME_PREFIX}{ended.pid}-b2", "streamstate-0"])
    assert f"{HOME_PREFIX}{other.pid}-a1" in leftover_files(baseline)  # now it ended
