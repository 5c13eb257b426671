"""Running a test module's Spark tests on both runners.

``spark = on_both_runners()`` at a test module's top overrides the session's ``spark``
fixture for that module: each of its tests runs twice, ``[classic]`` with the classic
(RDD) runner on the local[2] SparkSession and ``[connect]`` with the DataFrame runner on
a Spark Connect session of the test server (both session-scoped, tests/conftest.py).
The jobs pass the session to ``get_execution_environment(spark=...)``, and
``execution.runner: spark`` picks the runner from it.
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["RUNNERS", "on_both_runners"]

#: param id -> the session fixture it runs on
RUNNERS = {"classic": "classic_spark", "connect": "connect_spark"}


def on_both_runners() -> Any:
    @pytest.fixture(scope="session", params=list(RUNNERS), name="spark")
    def spark(request: Any) -> Any:
        return request.getfixturevalue(RUNNERS[request.param])

    return spark
