"""A short soak (benchmarks/soak.py runs the long one): the checkpoint directory stays
bounded and no files of a failed attempt accumulate across a restart (issue 17)."""

from __future__ import annotations

from benchmarks.soak import run


def test_checkpoint_directory_is_bounded_and_failed_attempts_leave_nothing(tmp_path):
    # a checkpoint every few epochs, so the epochs between them write per-epoch versions
    curves = run(
        epochs=40,
        keys=2_000,
        records=500,
        fail_at=13,
        every=1,
        work=str(tmp_path),
        interval_ms=4_000,
    )
    rows = curves.rows
    assert any(r[5] > 0 and r[1] == 0 for r in rows)  # attempt 0 wrote epoch versions
    assert rows[-1][1] == 1  # the job restarted once
    after = [r for r in rows if r[1] == 1]
    assert after and all(r[6] == 0 for r in after)  # nothing of attempt 0 is left
    # bounded: with 2 retained checkpoints the file count and size stop growing
    files = [r[4] for r in rows[len(rows) // 2 :]]
    sizes = [r[3] for r in rows[len(rows) // 2 :]]
    assert max(files) - min(files) <= 8
    assert max(sizes) <= 1.5 * min(sizes)
