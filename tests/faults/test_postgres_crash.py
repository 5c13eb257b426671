"""PostgreSQL exactly-once sink under SIGKILL (issue 15): kill the job (driver and, with
the in-process runner, its worker) during an epoch, right after a PREPARE TRANSACTION,
between ``_metadata`` and COMMIT PREPARED, and during the commits; restore with
``streamstate run --from-checkpoint``; the table then holds exactly the failure-free
run's rows and no transaction is left prepared. Occurrences are drawn from a seeded RNG
(``STREAMSTATE_CRASH_SEED``), two per point."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.postgres import postgres_server

JOB = str(Path(__file__).with_name("pg_crash_job.py"))
ROOT = str(Path(__file__).resolve().parents[2])
SEED = int(os.environ.get("STREAMSTATE_CRASH_SEED", "15"))
#: point -> occurrences in a failure-free run (upper bound of the draw)
POINTS = {"record": 390, "pre-commit": 20, "after-metadata": 4, "commit": 20}
PER_POINT = 2


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env.pop("CRASH_AT", None)
    env.update(extra or {})
    return env


@pytest.fixture(scope="module")
def pg() -> Iterator[str]:
    with postgres_server() as url:
        yield url


def new_table(pg: str, name: str) -> str:
    with psycopg.connect(pg, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (i INT PRIMARY KEY, k TEXT, total BIGINT)")
    return name


def table_rows(pg: str, name: str) -> list[tuple[int, str, int]]:
    with psycopg.connect(pg) as c:
        return list(c.execute(f"SELECT i, k, total FROM {name} ORDER BY i").fetchall())


def prepared(pg: str) -> list[str]:
    with psycopg.connect(pg) as c:
        return [r[0] for r in c.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]


@pytest.fixture(scope="module")
def expected(pg: str, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, str, int]]:
    d = tmp_path_factory.mktemp("failure-free")
    t = new_table(pg, "failure_free")
    subprocess.run(
        [sys.executable, JOB, pg, t, str(d / "chk")], env=_env(), check=True, timeout=120
    )
    rows = table_rows(pg, t)
    assert [r[0] for r in rows] == list(range(400))
    return rows


def kill_points() -> list[tuple[str, int]]:
    rng = random.Random(SEED)
    return [
        (point, n)
        for point, count in POINTS.items()
        for n in sorted(rng.sample(range(1, count + 1), PER_POINT))
    ]


@pytest.mark.parametrize(("point", "n"), kill_points(), ids=lambda x: str(x))
def test_sigkill_then_restore_leaves_exactly_the_failure_free_rows(
    pg: str, expected: list[tuple[int, str, int]], tmp_path: Path, point: str, n: int
):
    t = new_table(pg, f"t_{point.replace('-', '_')}_{n}")
    chk = tmp_path / "chk"
    crashed = subprocess.run(
        [sys.executable, JOB, pg, t, str(chk)],
        env=_env({"CRASH_AT": f"{point}:{n}"}),
        timeout=120,
        capture_output=True,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr.decode()[-2000:]
    cli = [os.path.join(os.path.dirname(sys.executable), "streamstate"), "run"]
    if any(chk.glob("*/chk-*/_metadata")):
        cli += ["--from-checkpoint", str(chk)]
    else:
        assert table_rows(pg, t) == []  # nothing committed before the first checkpoint
    restored = subprocess.run(
        [*cli, JOB, pg, t, str(chk)], env=_env(), timeout=120, capture_output=True
    )
    assert restored.returncode == 0, restored.stderr.decode()[-3000:]
    assert table_rows(pg, t) == expected
    assert [g for g in prepared(pg) if g.startswith(t + "-")] == []
