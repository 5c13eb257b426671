"""An epoch's spent input is freed after the reply in a process that releases (the subtask
hosts), and at once everywhere else (PySpark workers, the local runner)."""

from __future__ import annotations

import gc
import weakref

import pytest

from streamstate.runtime import spent


class _Records:
    """Stands for an epoch's decoded input (weakly referenceable)."""


@pytest.fixture
def releasing(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test process releases after replies, as a host does (undone after the test)."""
    monkeypatch.setattr(spent, "_SPENT", None)
    spent.release_after_reply()


def test_a_process_that_does_not_release_frees_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spent, "_SPENT", None)
    records = _Records()
    alive = weakref.ref(records)
    spent.keep(records)
    del records
    gc.collect()
    assert alive() is None, "kept where nobody releases: it would pile up"


def test_a_releasing_process_frees_on_release(releasing: None) -> None:
    first, second = _Records(), _Records()
    alive = [weakref.ref(first), weakref.ref(second)]
    spent.keep(first)
    spent.keep(second)
    del first, second
    gc.collect()
    assert all(ref() is not None for ref in alive), "freed before the reply"
    spent.release()
    assert all(ref() is None for ref in alive)
    spent.release()  # nothing held: a no-op


def test_saying_so_twice_keeps_what_is_held(releasing: None) -> None:
    records = _Records()
    alive = weakref.ref(records)
    spent.keep(records)
    del records
    spent.release_after_reply()
    assert alive() is not None
    spent.release()
    assert alive() is None
