"""Rescaling in place on Spark local[2] (the RDD runner, subtask hosts on): the keyed job
of tests/unit/test_rescale_in_place.py rescaled 2 -> 4 -> 1 -> 3 while it runs, a failure
in a rescaling epoch, equals the in-process run without rescaling, output and state."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.unit import test_rescale_in_place as R


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_rescaled_on_spark_equals_a_run_without_rescaling(spark, tmp_path, backend):
    base_out, _, _, base_chk = R.run(tmp_path / "base", backend, {}, max_records=40)
    (tmp_path / "elastic").mkdir()
    out, result, applied, chk = R.run(
        tmp_path / "elastic", backend, {2: 4, 5: 1, 8: 3}, fail_epoch=7, spark=spark, max_records=40
    )
    assert result.get_accumulator_result("rescales") == 3
    assert result.get_accumulator_result("restarts") == 1
    assert [a["timers"] for a in applied] == [4, 1, 3]
    assert Counter(out) == Counter(base_out)
    assert R.final_state(chk) == R.final_state(base_chk)
