"""Run PyFlink's documented example programs (``programs/``, copied unchanged but for
``pyflink`` -> ``streamstate`` in the imports) and return what they print.

The programs build their environment with ``StreamExecutionEnvironment.
get_execution_environment()``; the runner and the quiet console come from
``STREAMSTATE_CONF`` (as ``streamstate run`` injects them): the in-process runner by
default, Spark local[2] (the session fixture's SparkSession) with ``runner="spark"``.
"""

from __future__ import annotations

import importlib
import json
import re
import runpy
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

PACKAGE = "tests.pyflink_docs.programs"
_PREFIX = re.compile(r"^(?:[^\s>]*:)?\d+> ")

Run = Callable[..., list[str]]


def strip_subtask(line: str) -> str:
    """``3> (a,1)`` / ``id:3> (a,1)`` -> ``(a,1)`` (Flink's print prefix at parallelism > 1)."""
    return _PREFIX.sub("", line, count=1)


@pytest.fixture
def run_program(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], request: Any
) -> Iterator[Run]:
    def run(
        module: str,
        entry: str | None = None,
        *,
        runner: str = "local",
        conf: dict[str, str] | None = None,
        args: tuple[Any, ...] = (),
        strip: bool = True,
    ) -> list[str]:
        keys = {"rest.enabled": "false", "execution.progress": "none"}
        if runner == "local":
            keys["execution.runner"] = "local"
        else:
            request.getfixturevalue("spark")  # the session's SparkSession is the active one
        keys.update(conf or {})
        monkeypatch.setenv("STREAMSTATE_CONF", json.dumps(keys))
        monkeypatch.setattr(sys, "argv", [module])  # no --input/--output: the defaults
        capfd.readouterr()
        if entry is None:  # a script without a main function: run it as __main__
            runpy.run_module(f"{PACKAGE}.{module}", run_name="__main__")
        else:
            getattr(importlib.import_module(f"{PACKAGE}.{module}"), entry)(*args)
        out, _err = capfd.readouterr()
        lines = [line for line in out.splitlines() if line.strip()]
        return [strip_subtask(line) for line in lines] if strip else lines

    yield run
