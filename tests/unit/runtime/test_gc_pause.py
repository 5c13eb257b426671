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
