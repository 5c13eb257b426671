"""Progress output of execute() and the first-hour checks of the Spark session (no JVM)."""

from __future__ import annotations

import io
import os
import re
import stat
import sys

import pytest

from streamstate.common import JobStatus
from streamstate.control.progress import ProgressObserver, progress_observer
from streamstate.datastream.connectors.collect import DiscardingSink
from streamstate.errors import ConfigurationError
from streamstate.runtime.job_status import EpochStats
from streamstate.spark import session
from tests.support import envs


def run_job(capsys, mode: str) -> str:
    env = envs.make_env(2, max_records=10, conf={"execution.progress": mode})
    env.enable_checkpointing(1)
    env.from_collection(list(range(100))).key_by(lambda v: v % 3).reduce(
        lambda a, b: a + b
    ).sink_to(DiscardingSink())
    capsys.readouterr()
    env.execute("progress-job")
    return capsys.readouterr().err


def test_lines_mode_writes_a_final_line_with_epochs_records_and_checkpoint(capsys):
    err = run_job(capsys, "lines")
    lines = [x for x in err.splitlines() if x.startswith("progress-job:")]
    assert lines, err
    assert re.match(
        r"progress-job: FINISHED epoch 1[01], 100 records, [1-9][\d,]*/s, "
        r"checkpoint \d+, 0 restarts, \d+s$",
        lines[-1],
    ), lines[-1]


def test_none_mode_writes_no_progress(capsys):
    assert "progress-job:" not in run_job(capsys, "none")


def test_live_mode_redraws_one_line_with_rich():
    out = io.StringIO()
    p = ProgressObserver("live-job", live=True, stream=out)
    for e in (1, 2, 3):
        p.on_epoch("j", EpochStats(e, 0, 0, 100.0, e, {}, source_records=50))
    p.on_status_change("j", JobStatus.FINISHED, 0)
    text = out.getvalue()
    assert "live-job: FINISHED epoch 3, 150 records, 500/s, checkpoint 3, 0 restarts" in text
    assert p._live is None  # stopped at the end


def test_bad_progress_mode_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="execution.progress"):
        progress_observer("loud", "x")
    env = envs.make_env(1, conf={"execution.progress": "loud"})
    env.from_collection([1]).sink_to(DiscardingSink())
    with pytest.raises(ConfigurationError, match="execution.progress"):
        env.execute()


def test_the_submitted_master_wins_over_a_default(monkeypatch):
    monkeypatch.delenv("STREAMSTATE_SPARK_MASTER", raising=False)
    assert session.resolve_master({}, launched=True, default_master="local[2]") is None
    assert session.resolve_master({}, launched=False, default_master="local[2]") == "local[2]"
    assert session.resolve_master({}, launched=False) == "local[*]"
    assert session.resolve_master({"spark.master": "local[3]"}, launched=True) == "local[3]"
    monkeypatch.setenv("STREAMSTATE_SPARK_MASTER", "local[1]")
    assert session.resolve_master({}, launched=False, default_master="local[2]") == "local[1]"


def test_missing_java_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigurationError) as e:
        session.check_java()
    assert "Java 17" in str(e.value) and "execution.runner: local" in str(e.value)


def test_a_worker_python_without_streamstate_is_named(monkeypatch, tmp_path):
    fake = tmp_path / "python-without-streamstate"
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PYSPARK_PYTHON", str(fake))
    with pytest.raises(ConfigurationError) as e:
        session.check_worker_python("local[2]")
    msg = str(e.value)
    assert str(fake) in msg and "No module named 'streamstate'" in msg and "pip install" in msg
    session.check_worker_python("spark://elsewhere:7077")  # a cluster's workers: not probed here
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    session.check_worker_python("local[2]")
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
