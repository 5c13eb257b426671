"""Run PyFlink's example programs, read from the pinned ``apache-flink`` wheel
(``tests/support/pyflink_examples.py``; ``pyflink`` -> ``streamstate`` in the imports
only), or our re-expressions of the documentation pages' programs (``pages.<name>``),
as ``python <program>.py [args]`` runs them, and return what they print.

The programs build their environment with ``StreamExecutionEnvironment.
get_execution_environment()``; the runner and the quiet console come from
``STREAMSTATE_CONF`` (as ``streamstate run`` injects them): the in-process runner by
default, Spark local[2] (the session fixture's SparkSession) with ``runner="spark"``, the
test Spark Connect server (``spark.remote``: the DataFrame runner) with
``runner="connect"``.
"""

from __future__ import annotations

import json
import re
import runpy
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.pyflink_examples import (
    EXAMPLES_DIR,
    ExampleUnavailableError,
    example_source,
    ported_source,
)

_PREFIX = re.compile(r"^(?:[^\s>]*:)?\d+> ")

Run = Callable[..., list[str]]


def strip_subtask(line: str) -> str:
    """``3> (a,1)`` / ``id:3> (a,1)`` -> ``(a,1)`` (Flink's print prefix at parallelism > 1)."""
    return _PREFIX.sub("", line, count=1)


def ported_program(name: str) -> types.CodeType:
    """``name`` (``state_access``, ``windowing.tumbling_time_window``): the wheel's
    program, its imports ported, compiled under its path in the wheel. A wheel that
    cannot be had fails the test with the reason (it is not skipped)."""
    path = name.replace(".", "/") + ".py"
    try:
        source = ported_source(example_source(path))
    except ExampleUnavailableError as e:
        reason = str(e)
    else:
        return compile(source, f"apache-flink:{EXAMPLES_DIR}/{path}", "exec")
    pytest.fail(reason, pytrace=False)


def program_globals(name: str) -> dict[str, Any]:
    """The names a program defines, its ``__main__`` block not run (as an import)."""
    names: dict[str, Any] = {"__name__": f"pyflink_example_{name.replace('.', '_')}"}
    exec(ported_program(name), names)
    return names


def run_as_main(name: str, argv: list[str]) -> None:
    """``python <program>.py *argv``: the program runs as the ``__main__`` module (its
    classes and functions travel by value, as a job script's)."""
    code = ported_program(name)
    main = types.ModuleType("__main__")
    main.__file__ = code.co_filename
    saved_main, saved_argv = sys.modules["__main__"], sys.argv
    sys.modules["__main__"], sys.argv = main, [code.co_filename, *argv]
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"], sys.argv = saved_main, saved_argv


@pytest.fixture
def run_program(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], request: Any
) -> Iterator[Run]:
    def run(
        name: str,
        *argv: str,
        runner: str = "local",
        conf: dict[str, str] | None = None,
        strip: bool = True,
    ) -> list[str]:
        keys = {"rest.enabled": "false", "execution.progress": "none"}
        if runner == "local":
            keys["execution.runner"] = "local"
        elif runner == "connect":
            keys["spark.remote"] = request.getfixturevalue("connect_server").url
        else:
            request.getfixturevalue("spark")  # the session's SparkSession is the active one
        keys.update(conf or {})
        monkeypatch.setenv("STREAMSTATE_CONF", json.dumps(keys))
        capfd.readouterr()
        if name.startswith("pages."):  # ours, committed: tests/pyflink_docs/pages/
            monkeypatch.setattr(sys, "argv", [name, *argv])
            page = Path(__file__).parent / (name.replace(".", "/") + ".py")
            runpy.run_path(str(page), run_name="__main__")
        else:
            run_as_main(name, list(argv))
        out, _err = capfd.readouterr()
        lines = [line for line in out.splitlines() if line.strip()]
        return [strip_subtask(line) for line in lines] if strip else lines

    yield run
