"""Driver crash suite (issue 17): SIGKILL the driver at seeded points, then
``streamstate run --from-checkpoint <checkpoint dir>``; the committed output over both runs
equals a failure-free run: no record lost, none duplicated.

Kill points (``tests/faults/crash_job.py``): during an epoch, while ``_metadata`` is
written, between ``_metadata`` and the sink commit, and during the sink commit; the
occurrence of each point is drawn from a seeded RNG (``STREAMSTATE_CRASH_SEED`` changes
the seed), at least 20 kill points per run of the suite.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.files import committed_lines

JOB = str(Path(__file__).with_name("crash_job.py"))
ROOT = str(Path(__file__).resolve().parents[2])
SEED = int(os.environ.get("STREAMSTATE_CRASH_SEED", "17"))

#: point -> how many occurrences a failure-free run has (upper bound for the draw)
POINTS = {"record": 590, "metadata-write": 5, "after-metadata": 5, "commit": 9}
PER_POINT = 5


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env.pop("CRASH_AT", None)
    env.update(extra or {})
    return env


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    d = tmp_path_factory.mktemp("failure-free")
    subprocess.run(
        [sys.executable, JOB, str(d / "out"), str(d / "chk")], env=_env(), check=True, timeout=120
    )
    lines = committed_lines(d / "out")
    assert len(lines) == 600
    return lines


def kill_points() -> list[tuple[str, int]]:
    rng = random.Random(SEED)
    points = []
    for point, count in POINTS.items():
        points += [(point, n) for n in sorted(rng.sample(range(1, count + 1), min(PER_POINT, count)))]
    return points


def test_there_are_at_least_20_kill_points():
    assert len(kill_points()) >= 20


@pytest.mark.parametrize(("point", "n"), kill_points(), ids=lambda x: str(x))
def test_sigkill_of_the_driver_then_restore_loses_and_duplicates_nothing(
    tmp_path: Path, expected: list[str], point: str, n: int
):
    out, chk = tmp_path / "out", tmp_path / "chk"
    crashed = subprocess.run(
        [sys.executable, JOB, str(out), str(chk)],
        env=_env({"CRASH_AT": f"{point}:{n}"}),
        timeout=120,
        capture_output=True,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr.decode()[-2000:]
    cli = [os.path.join(os.path.dirname(sys.executable), "streamstate"), "run"]
    if any(chk.glob("*/chk-*/_metadata")):
        cli += ["--from-checkpoint", str(chk)]
    else:
        # killed before the first checkpoint completed: nothing was committed; start over
        assert committed_lines(out) == []
    restored = subprocess.run(
        [*cli, JOB, str(out), str(chk)], env=_env(), timeout=120, capture_output=True
    )
    assert restored.returncode == 0, restored.stderr.decode()[-3000:]
    assert committed_lines(out) == expected
