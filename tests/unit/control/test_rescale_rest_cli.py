"""Rescaling through the REST API (Flink's PUT /jobs/<id>/resource-requirements) and the
CLI (``streamstate rescale`` in another process), against a real running job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.control import Gate, cli, http, running_job


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Any, Gate, Any]]:
    with running_job(tmp_path) as job:
        yield job


def parallelism(rec: Any) -> dict[str, int]:
    status, doc = http(f"{rec.address}/jobs/{rec.job_id}/resource-requirements")
    assert status == 200
    return {uid: v["parallelism"]["upperBound"] for uid, v in doc.items()}


def test_put_resource_requirements_rescales_at_the_next_boundary(running):
    client, gate, rec = running
    url = f"{rec.address}/jobs/{rec.job_id}/resource-requirements"
    before = parallelism(rec)
    assert before["sum"] == 2
    body = {"sum": {"parallelism": {"lowerBound": 1, "upperBound": 3}}}
    status, _ = http(url, "PUT", body=body)
    assert status == 401  # mutating: the job's token
    status, doc = http(
        url, "PUT", token=rec.token, body={"sum": {"parallelism": {"upperBound": 999}}}
    )
    assert status == 400 and "exceeds its max parallelism 128" in doc["errors"][0]
    status, doc = http(
        url, "PUT", token=rec.token, body={"nope": {"parallelism": {"upperBound": 2}}}
    )
    assert status == 400 and "no operator with uid 'nope'" in doc["errors"][0]
    status, doc = http(url, "PUT", token=rec.token, body={"sum": 3})
    assert status == 400 and "upperBound" in doc["errors"][0]
    status, _ = http(url, "PUT", token=rec.token, body=body)
    assert status == 202
    assert parallelism(rec)["sum"] == 2  # the job is held at an epoch boundary: not yet
    gate.pace = 0.1
    gate.release()
    out = cli("rescale", rec.job_id, "--operator", "sum=3", "--timeout", "60")
    assert out.returncode == 0, out.stderr
    assert parallelism(rec)["sum"] == 3
    out = cli("rescale", rec.job_id, "1", "--timeout", "60")
    assert out.returncode == 0, out.stderr
    assert "sum 3->1" in out.stdout
    assert set(parallelism(rec).values()) == {1}
    assert client.get_accumulators().result()["rescales"] == 2
    out = cli("rescale", rec.job_id, "--operator", "sum=x")
    assert out.returncode == 2 and "UID=N" in out.stderr
