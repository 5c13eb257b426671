"""The cyclic garbage collector paused while a subtask runs one epoch.

An epoch allocates its input, outputs and chunks as hundreds of thousands of small
containers that live until the epoch ends, so CPython's collector, which runs every 700
net allocations and traverses every tracked object at its oldest generation, spends a
fifth to a quarter of a keyed epoch finding nothing to free (measured: decode and run
500,000 records of a keyed count, 0.245 s with it and 0.186 s without; raising its
thresholds instead was no faster). Reference counting still frees everything acyclic at
once; garbage in cycles made during the epoch waits until the collector's next run after
it, which is bounded by the epoch's size (``execution.epoch.max-records``, the interval):
see *Execution model* in docs/limitations.md.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Automatic collection off inside, back to what it was after (also on an error)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
