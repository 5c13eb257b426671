"""Flink's max-parallelism rule across a restore: it fixes the key groups of keyed state."""

from __future__ import annotations

import pytest

from streamstate.errors import StateMigrationError
from tests.support.files import committed_lines
from tests.support.savepoints import stop_with_savepoint
from tests.unit.runtime.checkpoint.test_savepoints import expected, job  # noqa: F401 - the module's fixture


def test_keyed_state_restores_only_with_the_same_max_parallelism(tmp_path, expected):  # noqa: F811
    out = tmp_path / "out"
    first = job(out, parallelism=2)
    first.set_max_parallelism(64)
    sp = stop_with_savepoint(first, tmp_path / "sp", at=3)
    before = committed_lines(out)
    changed = job(out, parallelism=3)
    changed.set_max_parallelism(32)
    changed.set_restore_path(sp)
    with pytest.raises(
        StateMigrationError, match=r"'sum'.*max parallelism 64 but now has 32.*set_max_parallelism"
    ):
        changed.execute("changed-max-parallelism")
    assert committed_lines(out) == before  # refused before anything ran: no partial restore
    same = job(out, parallelism=3)
    same.set_max_parallelism(64)
    same.set_restore_path(sp)
    same.execute("same-max-parallelism")  # only the parallelism changed (2 -> 3): restores
    assert committed_lines(out) == expected
