"""Epochs cut by time: a reader subtask reads its splits in slices and stops at a deadline.

With ``execution.epoch.interval`` set, a split reader's epoch ends at the earlier of its
record budget (``execution.epoch.max-records``) and the interval, measured from when the
subtask starts reading in that epoch. The reader reads a slice of records at a time, runs
each slice through its chained operators, and looks at the clock between slices (never per
record). Slices start small and grow (doubling, up to ``execution.epoch.slice-records``)
while the time left allows at the rate just seen, so the epoch is cut close to the
deadline whether records take a microsecond or a millisecond each.

A cut anywhere is exact and replayable because a source reports where it stopped: the
progress of the last slice (which includes the earlier slices') goes to the driver, which
folds it into the enumerator state committed with the epoch. A retried epoch may be cut
elsewhere; its state is rolled back with the epoch, so exactly-once holds.

A source takes part by setting ``sliced_reads = True`` and implementing
``advance(assignment, progress)``: the assignment that continues where ``progress``
stopped, such that reading it reports a progress that includes ``progress``. Other sources
are read in one call with the whole budget (by records only). What this module needs of a
source is :class:`SlicedSource` (every ``connectors.base.Source`` is one; the connectors
sit above the runtime, so the runtime names the contract rather than the class).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["MIN_SLICE", "SlicedSource", "read_in_slices", "reads_in_slices"]


class SlicedSource(Protocol):
    """What reading in slices needs of a source (``connectors.base.Source``)."""

    def slices_at(self, parallelism: int) -> bool:
        """Whether ``parallelism`` readers may be cut by time (``sliced_reads`` by default)."""

    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]: ...

    def advance(self, assignment: Any, progress: Any) -> Any: ...


def reads_in_slices(source: SlicedSource, parallelism: int = 1) -> bool:
    """Whether ``source``, read by ``parallelism`` subtasks, can be read slice by slice."""
    return bool(source.slices_at(parallelism))


#: the first slice of an epoch, and the smallest one sized to the time left: a few records
#: (the clock is looked at once per slice, rarely enough even near the deadline)
MIN_SLICE = 16


def read_in_slices(stage: Any, assignment: Any, spec: Any, push: Callable[..., None]) -> Any:
    """Read ``assignment`` of ``stage.source`` until the spec's budget, a slice that comes
    back short (nothing more for now), or the spec's interval after the start; every
    slice is pushed into the stage's head nodes at once. Returns the progress to report
    (where the reader stopped).

    Slices start at :data:`MIN_SLICE` records, at most double each time up to the spec's
    ``source_slice``, and hold no more records than the time left takes at the rate of the
    slice before (at least :data:`MIN_SLICE`): records that are slow to process (a costly
    chained operator) do not overshoot the interval by a whole large slice."""
    source, largest = stage.source, spec.source_slice
    before = time.monotonic()
    deadline = before + spec.source_interval_s
    left = spec.source_budget
    size = min(MIN_SLICE, largest)
    while True:
        n = min(size, left)
        records, progress = source.read(assignment, n)
        if records:
            for h in stage.heads:
                push(stage.nodes[h], records, None)
        left -= len(records)
        now = time.monotonic()
        if left <= 0 or len(records) < n or now >= deadline:
            return progress
        took, before = now - before, now
        fits = int(n * (deadline - now) / took) if took > 0 else largest
        size = min(largest, 2 * n, max(fits, MIN_SLICE))
        assignment = source.advance(assignment, progress)
