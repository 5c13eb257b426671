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

Between tasks, PySpark's daemon runs a full ``gc.collect()`` in a reused worker after
every task (``pyspark/daemon.py``), which traverses every tracked object of the process:
the runtime's modules, the cached stage specs (a collection's records), the worker's
caches. :func:`freeze_survivors` at the start of each task moves what is alive then into
the collector's permanent generation, which no collection traverses (measured: that
``gc.collect()`` was 1,690 of 2,319 busy samples of the workers in 80 epochs of a keyed
count, ~35 ms a task; none after). What is alive at a task's start survived the previous
task's collection, so freezing it keeps nothing the collector would free now; what later
becomes cyclic garbage (a finished job's spec) is collected after the job's end, when
the process unfreezes (a ``job_end`` hook). The subtask hosts' zygote freezes the
runtime it imported before it forks hosts, for the same reason.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from streamstate.runtime.job_end import on_job_end

__all__ = ["freeze_survivors", "gc_paused"]


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


#: this process froze objects (a process that never ran a task leaves others' freezes be)
_FROZE = [False]


def freeze_survivors() -> None:
    """Every object alive now goes to the collector's permanent generation (see the module
    docstring); call it at the start of a task in a long-lived worker process."""
    gc.freeze()
    _FROZE[0] = True


def _unfreeze(_job_id: str) -> None:
    # a job ended here: what it left frozen (its specs, instances) may be cyclic garbage
    # now; the next collection traverses it once, the next task freezes the survivors
    if _FROZE[0]:
        gc.unfreeze()
        _FROZE[0] = False


on_job_end("frozen objects", _unfreeze)
