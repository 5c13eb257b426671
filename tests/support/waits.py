"""Bounded waits for something to happen: never a timing assertion.

A test waits for a condition (a predicate turning truthy, or an event being set) and goes
on the moment it holds; the ceiling only bounds a hang (a condition that never comes),
so it is generous and a test never asserts how long the wait took.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")

#: how often a predicate is polled (an event is waited on directly)
POLL_S = 0.05


def wait_until(
    condition: Callable[[], T] | threading.Event,
    ceiling_s: float,
    message: str | Callable[[], str],
    poll_s: float = POLL_S,
) -> T | bool:
    """``condition``'s first truthy value (``True`` for an event), as soon as it holds.

    ``condition`` is a predicate polled every ``poll_s`` seconds (it may itself fail the
    test, e.g. when the process it waits on died) or a ``threading.Event``. After
    ``ceiling_s`` seconds without it the test fails with ``message`` (a callable is
    called then, to describe the state at that moment).
    """
    if isinstance(condition, threading.Event):
        if condition.wait(ceiling_s):
            return True
    else:
        deadline = time.monotonic() + ceiling_s
        while True:
            got = condition()
            if got:
                return got
            if time.monotonic() >= deadline:
                break
            time.sleep(poll_s)
    text = message() if callable(message) else message
    pytest.fail(f"not within {ceiling_s:.0f} s: {text}")
