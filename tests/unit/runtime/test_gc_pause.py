"""gc_paused: automatic cyclic collection is off inside and as it was after."""

from __future__ import annotations

import gc

import pytest

from streamstate.runtime.gc_pause import gc_paused


def test_collection_is_off_inside_and_back_on_after_also_after_an_error():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        assert not gc.isenabled()
        raise ValueError("user function failed")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_cycles_made_inside_are_collected_after():
    class Node:
        pass

    with gc_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
        assert any(type(o) is Node for o in gc.get_objects())
    gc.collect()
    assert not any(type(o) is Node for o in gc.get_objects())


_FREEZE_SCRIPT = """
import gc, sys, weakref
from streamstate.runtime.gc_pause import freeze_survivors
from streamstate.runtime.job_end import end_job

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a

if sys.argv[1] == "worker":
    held = [cycle()]  # a job's cached spec, alive at the task's start
    gone = weakref.ref(held[0])
    freeze_survivors()
    assert gc.get_freeze_count() > 0
    held.clear()  # the job no longer needs it: cyclic garbage now
    gc.collect()  # the daemon's collection after a task does not traverse frozen objects
    assert gone() is not None, "frozen: not collected"
    end_job("a-job")  # the job ended in this process: what it froze is unfrozen
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None, "collected after the job's end"
else:
    frozen = [cycle()]
    gc.freeze()  # the user's own freeze (e.g. before forking): not ours to undo
    count = gc.get_freeze_count()
    end_job("a-job")
    assert gc.get_freeze_count() == count
print("OK")
"""


@pytest.mark.parametrize("process", ["worker", "user"])
def test_a_task_freezes_the_survivors_and_the_jobs_end_unfreezes_them(process: str) -> None:
    """In a subprocess: freezing is process-wide, this test process must not keep it."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _FREEZE_SCRIPT, process], capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == "OK", out.stdout + out.stderr
