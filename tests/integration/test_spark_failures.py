"""Failure injection on Spark: a raising user function and a killed Python worker.

Each faulty run is compared with a failure-free run of the same job: with
exactly-once the collected output and the final keyed state are identical; with
at-least-once the output is a superset and the final state is identical.
"""

from __future__ import annotations

from collections import Counter

import pytest

from streamstate.datastream import CheckpointingMode
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.jobs import checkpointed_count, records
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()

DATA = records(400, 23)


@pytest.fixture
def epoch_clock():
    """Each epoch boundary is 1 s later: checkpoints every few epochs, deterministically."""
    with use_default_clock(TickingClock(start_ms=1000)) as clock:
        yield clock


def run(spark, tmp_path, name, mode=CheckpointingMode.EXACTLY_ONCE, failure=None):
    return checkpointed_count(spark, tmp_path / name, DATA, mode, failure)


@pytest.fixture(scope="module")
def baseline(spark, tmp_path_factory):
    with use_default_clock(TickingClock(start_ms=1000)):
        return run(spark, tmp_path_factory.mktemp("base"), "baseline")


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_exactly_once_after_failure(spark, tmp_path, epoch_clock, baseline, how):
    fail = FailOnce(str(tmp_path), epoch=6, subtask=1, mode=how, after_records=3)
    out, state = run(spark, tmp_path, f"eo-{how}", failure=fail)
    assert fail.fired
    base_out, base_state = baseline
    assert state == base_state == dict(Counter(k for k, _ in DATA))
    assert Counter(out) == Counter(base_out)


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_at_least_once_after_failure(spark, tmp_path, epoch_clock, baseline, how):
    fail = FailOnce(str(tmp_path), epoch=6, subtask=1, mode=how, after_records=3)
    out, state = run(spark, tmp_path, f"alo-{how}", CheckpointingMode.AT_LEAST_ONCE, failure=fail)
    assert fail.fired
    base_out, base_state = baseline
    assert state == base_state
    assert not (Counter(base_out) - Counter(out)), "at-least-once lost records"
    assert len(out) >= len(base_out)
