"""A savepoint that cannot be written fails its request with a typed error naming the
place, while the job goes on to the end with its output intact; nothing that looks like a
complete savepoint is left behind."""

from __future__ import annotations

import os

import pytest

from streamstate.errors import StreamStateError
from tests.support.files import committed_lines
from tests.support.savepoints import PauseAt
from tests.unit.runtime.checkpoint import test_savepoints as S

expected = S.expected


def test_a_failed_savepoint_leaves_the_job_running_and_nothing_complete(tmp_path, expected):
    blocked = tmp_path / "sp"
    blocked.write_text("a file where the savepoint directory would go")
    env = S.job(tmp_path / "out")
    pause = PauseAt(4)
    env.add_job_observer(pause)
    client = env.execute_async("savepoint-fails")
    assert pause.reached.wait(30)
    future = client.trigger_savepoint(str(blocked))
    pause.go.set()
    with pytest.raises(StreamStateError) as e:
        future.result(timeout=60)
    assert str(blocked) in str(e.value)
    result = client.get_job_execution_result().result(60)
    assert committed_lines(tmp_path / "out") == expected  # the job went on to the end
    assert result.get_accumulator_result("savepoints") in (0, None)
    found = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if f == "_metadata"]
    assert not [p for p in found if "savepoint" in p]


def test_a_savepoint_whose_files_cannot_be_written_fails_alone(tmp_path, expected):
    where = tmp_path / "sp"
    where.mkdir()
    env = S.job(tmp_path / "out")
    pause = PauseAt(4)
    env.add_job_observer(pause)
    client = env.execute_async("savepoint-write-fails")
    assert pause.reached.wait(30)
    future = client.trigger_savepoint(str(where))
    (target,) = list(where.iterdir())  # created at the request, on the driver
    target.rmdir()
    target.write_text("")  # its files cannot be written (even by root): it fails in the epoch
    pause.go.set()
    with pytest.raises(StreamStateError):
        future.result(timeout=60)
    client.get_job_execution_result().result(60)
    assert committed_lines(tmp_path / "out") == expected  # the job went on, every record once
    # the failed savepoint was discarded: nothing under the directory looks complete
    assert not any(p.name == "_metadata" for p in where.rglob("*"))
