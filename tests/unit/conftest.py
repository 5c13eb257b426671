"""Fixtures of the unit tests (no Spark): keyed backends from the registry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streamstate.runtime.state.registry import registered_keyed_backends
from tests.support.backends import Made, made_backends


@pytest.fixture(params=registered_keyed_backends())
def made(request: pytest.FixtureRequest) -> Iterator[Made]:
    """A factory of backends of each registered kind in turn (disposed at teardown)."""
    yield from made_backends(request.param)


@pytest.fixture
def heap() -> Iterator[Made]:
    yield from made_backends("hashmap")


@pytest.fixture
def rocks() -> Iterator[Made]:
    yield from made_backends("rocksdb")
