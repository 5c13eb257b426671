"""Rescaling in place on Spark local[2] (the RDD runner, subtask hosts on): the keyed job
of tests/unit/runtime/test_rescale_in_place.py rescaled 2 -> 4 -> 1 -> 3 while it runs, a failure
in a rescaling epoch, equals the in-process run without rescaling, output and state."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.unit.runtime import test_rescale_in_place as R


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_rescaled_on_spark_equals_a_run_without_rescaling(spark, tmp_path, backend):
    base_out, _, _, base_chk = R.run(tmp_path / "base", backend, {}, max_records=40)
    (tmp_path / "elastic").mkdir()
    out, result, applied, chk = R.run(
        tmp_path / "elastic", backend, {2: 4, 5: 1, 8: 3}, fail_epoch=6, spark=spark, max_records=40
    )
    assert result.get_accumulator_result("rescales") == 3
    assert result.get_accumulator_result("restarts") == 1
    assert [a["timers"] for a in applied] == [4, 1, 3]
    assert Counter(out) == Counter(base_out)
    assert R.final_state(chk) == R.final_state(base_chk)
    # subtask hosts keep their instances: 2 -> 4 keeps [0, 31] in subtask 0's host and
    # reads 96 key groups; the first epoch at 1 (epoch 6, the rescaling epoch) fails, so
    # its in-place build is not counted and the restart reads all 128; 1 -> 3 keeps
    # [0, 42] and reads 85
    for uid in ("my-function", "timers"):
        assert R.kept_and_read(result, uid) == (32 + 43, 96 + 128 + 85)
