"""The barrier-stage K1 of ``benchmarks/barrier_floor.py`` on a real local[2] session: its
figures stand only if its run is verified, so these check that the verification passes on
a correct run and fails on a wrong count."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks import keyed_count
from benchmarks.barrier_floor import RENDEZVOUS, run_barrier

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("rendezvous", RENDEZVOUS)
def test_one_barrier_stage_runs_every_epoch_and_counts_every_key(classic_spark, rendezvous):
    data = keyed_count.workload(30_000, 700)
    expected = dict(Counter(k for k, _ in data))
    assert run_barrier(classic_spark, data, 3, rendezvous, expected) > 0


def test_a_count_that_differs_from_the_records_fails_the_run(classic_spark):
    data = keyed_count.workload(4_000, 50)
    expected = dict(Counter(k for k, _ in data))
    expected["k7"] += 1
    with pytest.raises(AssertionError, match="counts per key differ"):
        run_barrier(classic_spark, data, 2, "driver", expected)
