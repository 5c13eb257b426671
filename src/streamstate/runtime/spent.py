"""An epoch's spent input, freed after the subtask has answered instead of before.

Freeing the decoded input of a keyed epoch (hundreds of thousands of records, their keys
and key groups) is reference counting's work, a tenth of a subtask host's busy time in a
1M-record keyed count (py-spy: the return of ``worker/inputs._read_shuffled``), and it
lands between reading the input and the epoch's checkpoint: on the epoch's critical path.
A subtask host answers its worker and then waits idle for the next epoch, so it
:func:`keep`s what a read has finished with and :func:`release`s it once the reply is
sent: the same work, off the critical path.

What is kept is an epoch's input only (a source's records, a shuffled input's decoded
columns), which was alive through the epoch's processing anyway: holding it through the
checkpoint and the reply adds no more than the input's size to the host's peak memory.
Operators' outputs are freed as they go (a chain of n operators would otherwise hold n
epochs' worth).

Only a process that said it releases (:func:`release_after_reply`: the subtask hosts, and
a co-scheduled task of the barrier runner until :func:`stop_keeping` at its end) keeps
anything; everywhere else (PySpark workers, the local runner) :func:`keep` drops
its argument at once, as before, so nothing can pile up where nobody releases it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["keep", "release", "release_after_reply", "stop_keeping"]

#: what the current epoch has finished with (None: this process does not keep anything)
_SPENT: list[Any] | None = None


def release_after_reply() -> None:
    """This process calls :func:`release` after every reply: :func:`keep` holds from now."""
    global _SPENT
    if _SPENT is None:
        _SPENT = []


def keep(obj: Any) -> None:
    """Hold ``obj`` until the next :func:`release` (only in a process that releases)."""
    if _SPENT is not None:
        _SPENT.append(obj)


def release() -> None:
    """Free what :func:`keep` held (call it after the epoch's reply was sent)."""
    if _SPENT:
        _SPENT.clear()


def stop_keeping() -> None:
    """Free what is held and keep nothing from now (a co-scheduled task's end: its PySpark
    worker may run other tasks, which never release)."""
    global _SPENT
    release()
    _SPENT = None
