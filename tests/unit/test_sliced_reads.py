"""Every source that reads in slices (``sliced_reads``, for epochs cut by time): reading an
assignment slice by slice with ``advance`` yields the same records, in the same order, and
leaves the enumerator state where one ``read`` of the whole budget leaves it; stopping
after any slice leaves a state from which the rest is read exactly once."""

from __future__ import annotations

from typing import Any

import pytest

from streamstate.connectors.collection import CollectionSource
from streamstate.connectors.files import TextLineFileSource
from streamstate.connectors.sequence import SequenceSource
from streamstate.connectors.staged import StagedRowsSource, write_staged_rows
from streamstate.runtime.sliced_read import reads_in_slices


def sliced(source: Any, assignment: Any, budget: int, size: int, stop_after: int | None = None):
    """(records, progress) of reading ``assignment`` in slices of ``size`` (as
    runtime/sliced_read.py does), stopping after ``stop_after`` slices if given."""
    out: list[Any] = []
    left, slices = budget, 0
    while True:
        n = min(size, left)
        records, progress = source.read(assignment, n)
        out.extend(records)
        left -= len(records)
        slices += 1
        if left <= 0 or len(records) < n or slices == stop_after:
            return out, progress
        assignment = source.advance(assignment, progress)


def drain(source: Any, state: Any, parallelism: int, budget: int, size: int, stop_after: int):
    """Every record, reading epochs that stop after ``stop_after`` slices."""
    out: list[Any] = []
    for _ in range(10_000):
        if source.is_finished(state):
            return out
        plans = source.plan_epoch(state, parallelism)
        progress = []
        for a in plans:
            records, p = sliced(source, a, budget, size, stop_after)
            out.extend(records)
            progress.append(p)
        state = source.apply_progress(state, progress)
    raise AssertionError("the source never finished")


@pytest.fixture(params=["sequence", "collection", "files", "files-header", "staged"])
def source(request, tmp_path) -> Any:
    kind = request.param
    if kind == "sequence":
        return SequenceSource(1, 103)
    if kind == "collection":
        return CollectionSource([f"e{i}" for i in range(57)])
    if kind.startswith("files"):
        for f, n in (("a", 23), ("b", 0), ("c", 31), ("d", 7)):
            lines = [f"{f}-header"] + [f"{f}{i}" for i in range(n)]
            (tmp_path / f"{f}.txt").write_text("\n".join(lines) + ("\n" if n % 2 else ""))
        src = TextLineFileSource([str(tmp_path)])
        if kind == "files-header":
            src.line_format.skip_first_line = True
        return src
    splits = []
    for i, n in enumerate((19, 0, 44, 5)):
        path = str(tmp_path / f"part-{i}")
        write_staged_rows(path, [(i, j) for j in range(n)])
        splits.append([path, n])
    return StagedRowsSource(splits)


@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("budget, size", [(40, 3), (1000, 7), (10, 10), (13, 1)])
def test_slices_read_what_one_read_does(source, parallelism, budget, size):
    if not reads_in_slices(source, parallelism):
        # a collection read by several subtasks reads adjacent stripes: never cut by time
        assert isinstance(source, CollectionSource) and parallelism > 1
        return
    state = source.create_enumerator_state(parallelism)
    whole, sliced_progress, whole_progress = [], [], []
    for a in source.plan_epoch(state, parallelism):
        records, p = source.read(a, budget)
        whole.append(records)
        whole_progress.append(p)
        records2, p2 = sliced(source, a, budget, size)
        assert records2 == records
        sliced_progress.append(p2)
    assert source.apply_progress(state, sliced_progress) == source.apply_progress(
        state, whole_progress
    )


@pytest.mark.parametrize("stop_after", [1, 2, 5])
def test_epochs_cut_after_any_slice_read_everything_once(source, stop_after):
    p = 2 if reads_in_slices(source, 2) else 1  # a collection is cut with one reader only
    state = source.create_enumerator_state(p)
    everything = drain(source, state, p, 10**9, 10**9, 1)
    cut = drain(source, state, p, 10**9, 4, stop_after)
    # the two readers' records interleave differently: compare them as sets, no duplicates
    assert sorted(map(str, cut)) == sorted(map(str, everything))
    assert len(everything) == len(set(map(str, everything))) > 0
