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


class VirtualClock:
    """``time.monotonic`` of runtime/sliced_read.py: advanced by the records read (a
    deterministic stand-in for processing time; the sizing is what is tested)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class CostlyNumbers(SequenceSource):
    """A sequence whose every record costs ``cost`` virtual seconds to read and process."""

    def __init__(self, clock: VirtualClock, cost: float) -> None:
        super().__init__(0, 10**9)
        self.clock, self.cost, self.slices = clock, cost, []

    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        records, progress = super().read(assignment, budget)
        self.clock.now += self.cost * len(records)
        self.slices.append(len(records))
        return records, progress


def slices_of(monkeypatch, cost: float, interval: float, largest: int, budget: int) -> list[int]:
    from types import SimpleNamespace

    from streamstate.runtime import sliced_read

    clock = VirtualClock()
    monkeypatch.setattr(sliced_read, "time", clock)
    source = CostlyNumbers(clock, cost)
    stage = SimpleNamespace(source=source, heads=[0], nodes={0: None})
    spec = SimpleNamespace(source_slice=largest, source_interval_s=interval, source_budget=budget)
    pushed: list[int] = []
    assignment = source.plan_epoch(source.create_enumerator_state(1), 1)[0]
    progress = sliced_read.read_in_slices(
        stage, assignment, spec, lambda node, batch, ts: pushed.extend(batch)
    )
    assert pushed == list(range(sum(source.slices)))  # every slice pushed, in order
    assert progress == [[0, sum(source.slices)]]
    return source.slices


def test_slices_grow_to_the_largest_while_records_are_cheap(monkeypatch):
    # 1 us per record, 100 ms: 16, 32, ... 1024, then 1024s until the deadline
    slices = slices_of(monkeypatch, 1e-6, 0.1, 1024, 10**9)
    assert slices[:7] == [16, 32, 64, 128, 256, 512, 1024]
    assert set(slices[7:-2]) == {1024}  # the last ones fit the time left
    assert 100_000 <= sum(slices) <= 100_000 + 1024


def test_costly_records_are_cut_near_the_deadline_not_a_large_slice_later(monkeypatch):
    # 1 ms per record, 100 ms: 16 (16 ms), 32 (48 ms), then what the 52 ms left hold
    slices = slices_of(monkeypatch, 1e-3, 0.1, 1024, 10**9)
    assert slices[:2] == [16, 32]
    assert 100 <= sum(slices) <= 100 + 16


def test_the_budget_ends_the_epoch_before_the_interval(monkeypatch):
    assert sum(slices_of(monkeypatch, 1e-6, 10.0, 1024, 5000)) == 5000
