"""The cluster bed for the tests of this directory: one bed per test session (its start-up
is the bulk of the time), torn down at the end whatever happened. Every test runs under
:func:`~tests.cluster.checks.only_own_paths_open`: no process of a machine may have a path
open that another machine could read (sampled while the test runs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.bed import ROOT, Bed, available, running_bed
from tests.cluster.checks import only_own_paths_open


@pytest.fixture(scope="session")
def bed() -> Iterator[Bed]:
    why = available()
    if why is not None:
        pytest.skip(why)
    with running_bed(workers=3) as b:
        yield b


@pytest.fixture(autouse=True)
def only_own_paths(bed: Bed) -> Iterator[None]:
    with only_own_paths_open(bed, ROOT):
        yield
