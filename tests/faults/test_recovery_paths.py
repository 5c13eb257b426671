"""Exactly-once on the recovery paths that restore *behind* committed output (issue 27):
the automatic fallback to an older checkpoint or to the start when the newest checkpoint
is damaged, a user resuming an older retained checkpoint, and a trial restore into another
output directory. The job (``recovery_job.py``) writes running sums into a FileSink that
rolls on every checkpoint (or by size), run as a user runs it: ``python job.py`` and
``streamstate run --from-checkpoint``. Exact means: the committed lines equal the
failure-free run's, none twice, none missing.

Where a replay cannot skip what was committed (epochs cut by time, a rescale), the restore
is refused with ``DuplicateOutputError`` unless the user allows the duplicates by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.faults.recovery_job import expected_lines
from tests.support.files import committed_lines

JOB = str(Path(__file__).with_name("recovery_job.py"))
ROOT = str(Path(__file__).resolve().parents[2])
CLI = os.path.join(os.path.dirname(sys.executable), "streamstate")
RECORDS = 600


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    for k in ("CRASH_AT", "DAMAGE_AT", "DAMAGE"):
        env.pop(k, None)
    env.update(extra or {})
    return env


def run(
    out: Path, chk: Path, *args: str, start: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """One run of the job (``start``: ``--from-checkpoint`` that path, through the CLI)."""
    cmd = (
        [sys.executable, JOB]
        if start is None
        else [CLI, "run", "--from-checkpoint", start, JOB, "--"]
    )
    cmd += [str(out), str(chk), *args]
    return subprocess.run(cmd, env=_env(env), capture_output=True, text=True, timeout=300)


def ok(p: subprocess.CompletedProcess[str]) -> None:
    assert p.returncode == 0, p.stderr[-3000:]


def checkpoint(chk: Path, n: int) -> str:
    (path,) = chk.glob(f"*/chk-{n}")
    return str(path)


def assert_exact(out: Path) -> None:
    lines = committed_lines(out)
    dup = {k: v for k, v in Counter(lines).items() if v > 1}
    assert not dup, f"{len(dup)} lines committed twice, e.g. {sorted(dup)[:3]}"
    assert lines == expected_lines(RECORDS)
    assert sorted(f.name for f in out.rglob(".*") if f.is_file()) == []


# -- 1. the automatic fallback --------------------------------------------------------------


@pytest.mark.parametrize("damage", ["newest", "all"])
def test_a_fallback_behind_committed_output_writes_nothing_twice(tmp_path, damage):
    """The newest checkpoint (``all``: every checkpoint) is damaged, then a worker fails:
    the restart falls back to an older checkpoint (or to the start) and replays epochs
    whose parts were committed; the FileSink skips their records."""
    out, chk = tmp_path / "out", tmp_path / "chk"
    p = run(out, chk, env={"DAMAGE_AT": "9", "DAMAGE": damage})
    ok(p)
    assert (chk / "damaged").exists()
    assert "restarting" in p.stderr and "skipping checkpoint" in p.stderr
    assert_exact(out)


def test_a_fallback_that_cannot_replay_exactly_is_refused_unless_allowed(tmp_path):
    """With epochs cut by time (``execution.epoch.interval``) a replay may cut them
    elsewhere, so nothing tells which replayed records were committed: the fallback fails
    the job naming the option; with the option it completes, duplicating but losing
    nothing."""
    out, chk = tmp_path / "out", tmp_path / "chk"
    p = run(out, chk, "--epoch-interval", "1 h", env={"DAMAGE_AT": "9"})
    assert p.returncode != 0
    assert "DuplicateOutputError" in p.stderr and "allow-duplicate-output" in p.stderr
    assert set(committed_lines(out)) < set(expected_lines(RECORDS))  # nothing written twice
    assert len(committed_lines(out)) == len(set(committed_lines(out)))

    out2, chk2 = tmp_path / "out2", tmp_path / "chk2"
    allowed = ["-D", "execution.state-recovery.allow-duplicate-output=true"]
    p = subprocess.run(
        [CLI, "run", *allowed, JOB, "--", str(out2), str(chk2), "--epoch-interval", "1 h"],
        env=_env({"DAMAGE_AT": "9"}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    ok(p)
    lines = committed_lines(out2)
    assert set(lines) == set(expected_lines(RECORDS)) and len(lines) > RECORDS


# -- 2. resuming an older retained checkpoint -----------------------------------------------


@pytest.mark.parametrize(
    ("parallelism", "rocksdb"), [(2, False), (1, False), (3, True)], ids=["p2", "p1", "rocksdb-p3"]
)
def test_resuming_an_older_checkpoint_writes_nothing_twice(tmp_path, parallelism, rocksdb):
    """The job ran to its end; the user resumes its third checkpoint: the epochs after it
    are replayed and their committed parts are not written again."""
    out, chk = tmp_path / "out", tmp_path / "chk"
    args = ["--parallelism", str(parallelism), *(["--rocksdb"] if rocksdb else [])]
    ok(run(out, chk, *args))
    assert_exact(out)
    ok(run(out, tmp_path / "chk-resumed", *args, start=checkpoint(chk, 3)))
    assert_exact(out)


def test_resuming_an_older_checkpoint_rescaled_is_refused_unless_allowed(tmp_path):
    """At another parallelism the replay cannot tell which records the committed parts
    hold: refused, naming the parts and the option; allowed, it duplicates, loses nothing."""
    out, chk = tmp_path / "out", tmp_path / "chk"
    ok(run(out, chk))
    p = run(out, tmp_path / "chk-a", "--parallelism", "3", start=checkpoint(chk, 3))
    assert p.returncode != 0
    assert "DuplicateOutputError" in p.stderr and "--allow-duplicate-output" in p.stderr
    assert_exact(out)  # the refused restore changed nothing
    p = subprocess.run(
        [CLI, "run", "--allow-duplicate-output", "--from-checkpoint", checkpoint(chk, 3), JOB,
         "--", str(out), str(tmp_path / "chk-b"), "--parallelism", "3"],
        env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    ok(p)
    lines = committed_lines(out)
    assert set(lines) == set(expected_lines(RECORDS)) and len(lines) > RECORDS


# -- 3. a trial restore into another directory ----------------------------------------------


def test_a_trial_restore_into_another_directory_is_refused_and_steals_nothing(tmp_path):
    """The driver dies right after a checkpoint (parts pending, others in progress: size
    rolling). Restoring that checkpoint with the sink writing elsewhere is refused before
    anything moves; restoring it into the original directory afterwards is exact."""
    out, chk = tmp_path / "out", tmp_path / "chk"
    crashed = run(out, chk, "--rolling", "size", env={"CRASH_AT": "after-metadata:3"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    hidden = sorted(f.name for f in out.rglob(".*") if f.is_file())
    assert any(n.endswith(".pending") for n in hidden) and any(
        n.endswith(".inprogress") for n in hidden
    )
    trial = run(tmp_path / "trial", tmp_path / "chk-trial", "--rolling", "size",
                start=checkpoint(chk, 3))  # fmt: skip
    assert trial.returncode != 0
    assert "FileSinkRestoreError" in trial.stderr and str(out) in trial.stderr
    assert committed_lines(tmp_path / "trial") == []
    assert sorted(f.name for f in out.rglob(".*") if f.is_file()) == hidden  # untouched
    ok(run(out, tmp_path / "chk-2", "--rolling", "size", start=checkpoint(chk, 3)))
    assert_exact(out)


def test_a_restore_whose_pending_part_is_gone_fails_loudly(tmp_path):
    """A pending part the checkpoint names was deleted and its target was never committed:
    the restore fails naming it, instead of finishing with rows missing."""
    out, chk = tmp_path / "out", tmp_path / "chk"
    crashed = run(out, chk, env={"CRASH_AT": "after-metadata:3"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    pending = [f for f in out.rglob(".*.pending")] + [f for f in out.rglob(".*.inprogress")]
    assert pending
    pending[0].unlink()
    p = run(out, tmp_path / "chk-2", start=checkpoint(chk, 3))
    assert p.returncode != 0
    assert "FileSinkRestoreError" in p.stderr and "never committed" in p.stderr


def test_a_trial_restore_of_committed_output_into_another_directory_is_harmless(tmp_path):
    """A checkpoint whose parts are all committed (the job ran on past it) restores into a
    new directory: the new directory gets the output after the checkpoint, the original
    one is not touched."""
    out, chk = tmp_path / "out", tmp_path / "chk"
    ok(run(out, chk, "--rolling", "size"))
    before = {f: f.read_bytes() for f in out.rglob("*") if f.is_file()}
    trial = tmp_path / "trial"
    ok(run(trial, tmp_path / "chk-trial", "--rolling", "size", start=checkpoint(chk, 3)))
    assert {f: f.read_bytes() for f in out.rglob("*") if f.is_file()} == before
    after = set(expected_lines(RECORDS)) - set(committed_lines(trial))
    assert committed_lines(trial) and set(committed_lines(trial)) < set(expected_lines(RECORDS))
    assert len(committed_lines(trial)) == len(set(committed_lines(trial)))
    assert after  # what the original run committed before the checkpoint is not repeated
