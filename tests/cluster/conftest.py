"""The cluster bed for the tests of this directory: one bed per test session (its start-up
is the bulk of the time), torn down at the end whatever happened."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.bed import Bed, available, running_bed


@pytest.fixture(scope="session")
def bed() -> Iterator[Bed]:
    why = available()
    if why is not None:
        pytest.skip(why)
    with running_bed(workers=3) as b:
        yield b
