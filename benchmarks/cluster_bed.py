"""The cluster bed the cluster benchmarks run on (benchmarks/cluster_recovery.py,
benchmarks/cluster_throughput.py): tests/cluster/bed.py's machines, built the same way for
each of them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["benchmark_bed"]

#: worker machines (one core each) and the other machines of a benchmark's bed
WORKERS = 3
EXTRA = ("driver",)


@contextlib.contextmanager
def benchmark_bed() -> Iterator[Any]:
    """A running bed of ``WORKERS`` worker machines and a ``driver`` machine (needs root)
    for the block, torn down however it ends; prints where it is and how long it took
    to come up."""
    from tests.cluster.bed import running_bed

    t0 = time.monotonic()
    with running_bed(workers=WORKERS, extra=EXTRA) as bed:
        print(f"bed {bed.root} (slot {bed.slot}) up in {time.monotonic() - t0:.0f} s", flush=True)
        yield bed
