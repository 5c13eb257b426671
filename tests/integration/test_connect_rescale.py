"""Rescaling in place on a Spark Connect session (the DataFrame runner, subtask hosts on):
the keyed job of tests/unit/runtime/test_rescale_in_place.py rescaled 2 -> 4 -> 1 -> 3 while it
runs, a failure in a rescaling epoch, equals the in-process run without rescaling."""

from __future__ import annotations

from collections import Counter

from tests.unit.runtime import test_rescale_in_place as R


def test_rescaled_on_a_connect_session_equals_a_run_without_rescaling(connect_spark, tmp_path):
    base_out, _, _, base_chk = R.run(tmp_path / "base", "hashmap", {}, max_records=40)
    (tmp_path / "elastic").mkdir()
    out, result, applied, chk = R.run(
        tmp_path / "elastic",
        "hashmap",
        {2: 4, 5: 1, 8: 3},
        fail_epoch=6,
        spark=connect_spark,
        max_records=40,
    )
    assert result.get_accumulator_result("rescales") == 3
    assert result.get_accumulator_result("restarts") == 1
    assert [a["timers"] for a in applied] == [4, 1, 3]
    assert Counter(out) == Counter(base_out)
    assert R.final_state(chk) == R.final_state(base_chk)
    # the subtask hosts keep state in place here too (see test_spark_rescale.py)
    for uid in ("my-function", "timers"):
        assert R.kept_and_read(result, uid) == (32 + 43, 96 + 128 + 85)
