"""A job's Python dependencies, shipped to the executors by Spark (PyFlink's
``add_python_file`` / ``set_python_requirements`` / ``add_python_archive``).

PyFlink keeps them in the configuration keys ``python.files`` (comma-separated),
``python.requirements`` (``requirements.txt[#cache dir]``) and ``python.archives``
(comma-separated ``archive[#target dir]``); so does streamstate, so ``-D python.files=...``
on ``streamstate run`` works too. When a job starts on Spark, :func:`ship_python_dependencies`
hands them to Spark, once per SparkContext:

* files: ``SparkContext.addPyFile`` (a ``.py``, ``.zip`` or ``.egg`` file as it is; a
  directory, a package, zipped first); each executor puts it on its Python workers'
  ``sys.path`` (and the subtask hosts take that ``sys.path``);
* requirements: ``pip install --target`` into a directory of this job on the driver
  (offline from the cache directory when one is given, as PyFlink), zipped and shipped as a
  file. Only pure-Python packages import from a zip: a requirement with compiled extension
  modules is refused, naming them (install those into the workers' environment);
* archives: ``SparkContext.addArchive(archive#target)``; each executor extracts it into
  ``SparkFiles.getRootDirectory()/<target>`` (``pyspark.SparkFiles.get(target)`` in a
  function). Relative paths reach it only where that is the worker's working directory
  (YARN, Kubernetes), not on a local master.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from typing import Any

from streamstate.errors import ConfigurationError
from streamstate.runtime.runtime_dir import scratch_dir

__all__ = [
    "ARCHIVES_KEY",
    "FILES_KEY",
    "REQUIREMENTS_KEY",
    "ConnectFiles",
    "ship_python_dependencies",
]

FILES_KEY = "python.files"
REQUIREMENTS_KEY = "python.requirements"
ARCHIVES_KEY = "python.archives"

_EXTENSIONS = (".so", ".pyd", ".dylib")
_AS_IS = (".py", ".zip", ".egg")


def _entries(raw: str | None) -> list[str]:
    return [e.strip() for e in (raw or "").split(",") if e.strip()]


def _work_dir() -> str:
    """This process's directory for zipped files and installed requirements (removed at
    exit: ``runtime_dir.scratch_dir``)."""
    global _WORK_DIR
    if _WORK_DIR is None or not os.path.isdir(_WORK_DIR):
        _WORK_DIR = scratch_dir("pydeps")
    return _WORK_DIR


_WORK_DIR: str | None = None


def _zip_dir(directory: str, target: str) -> str:
    """``directory`` zipped so that its own name is the top entry (a package stays one)."""
    parent = os.path.dirname(os.path.abspath(directory))
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for root, _dirs, files in os.walk(directory):
            for name in files:
                path = os.path.join(root, name)
                z.write(path, os.path.relpath(path, parent))
    return target


def _zip_contents(directory: str, target: str) -> str:
    """The contents of ``directory`` zipped at the top (what ``pip --target`` wrote)."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for root, _dirs, files in os.walk(directory):
            for name in files:
                path = os.path.join(root, name)
                z.write(path, os.path.relpath(path, directory))
    return target


def _python_file(path: str) -> str:
    """What ``addPyFile`` gets for ``path``: the file itself, or a directory zipped."""
    if not os.path.exists(path):
        raise ConfigurationError(f"add_python_file: {path!r} does not exist")
    if os.path.isdir(path):
        digest = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:12]
        name = f"{os.path.basename(os.path.abspath(path))}-{digest}.zip"
        return _zip_dir(path, os.path.join(_work_dir(), name))
    if not path.endswith(_AS_IS):
        raise ConfigurationError(
            f"add_python_file: {path!r} is not a .py, .zip or .egg file or a directory; "
            f"data files go with add_python_archive"
        )
    return path


def _requirements(spec: str) -> str:
    """The zip of ``pip install --target`` of ``requirements.txt[#cache dir]``."""
    requirements, _, cache = spec.partition("#")
    if not os.path.isfile(requirements):
        raise ConfigurationError(f"set_python_requirements: {requirements!r} does not exist")
    with open(requirements, "rb") as f:
        digest = hashlib.sha256(f.read() + cache.encode()).hexdigest()[:12]
    target = os.path.join(_work_dir(), f"requirements-{digest}")
    archive = target + ".zip"
    if os.path.exists(archive):
        return archive
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    command += ["--target", target, "-r", requirements]
    if cache:
        command += ["--no-index", "--find-links", cache]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ConfigurationError(
            f"set_python_requirements: pip could not install {requirements!r}: "
            f"{' '.join(done.stderr.strip().splitlines()[-3:])}"
        )
    compiled = sorted(
        os.path.relpath(os.path.join(root, n), target)
        for root, _dirs, files in os.walk(target)
        for n in files
        if n.endswith(_EXTENSIONS)
    )
    if compiled:
        raise ConfigurationError(
            f"set_python_requirements: {requirements!r} installs compiled extension modules "
            f"({', '.join(compiled[:3])}{', ...' if len(compiled) > 3 else ''}), which Python "
            f"cannot import from the zip Spark ships; install those packages into the "
            f"executors' Python (or ship a packed virtualenv with spark.archives, see "
            f"docs/cluster.md) and keep only pure-Python ones here"
        )
    return _zip_contents(target, archive)


class ConnectFiles:
    """A Spark Connect session as :func:`ship_python_dependencies` uses a SparkContext:
    files and archives become the session's artifacts (``addArtifacts(pyfile=True)`` /
    ``archive=True``), which the server's Python workers get as a SparkContext's; what was
    shipped is kept on the session (once per session, as once per SparkContext)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._streamstate_python_deps = spark.__dict__.setdefault(
            "_streamstate_python_deps", set()
        )

    def addPyFile(self, path: str) -> None:
        self.spark.addArtifacts(path, pyfile=True)

    def addArchive(self, spec: str) -> None:
        self.spark.addArtifacts(spec, archive=True)


def ship_python_dependencies(sc: Any, configuration: Any) -> None:
    """Hand the job's ``python.files`` / ``python.requirements`` / ``python.archives`` to
    ``sc`` (each once per SparkContext)."""
    if configuration is None:
        return
    get = configuration.get_string
    shipped: set[str] = sc.__dict__.setdefault("_streamstate_python_deps", set())
    files = [_python_file(p) for p in _entries(get(FILES_KEY, None))]
    requirements = get(REQUIREMENTS_KEY, None)
    if requirements:
        files.append(_requirements(requirements))
    for path in files:
        if path not in shipped:
            sc.addPyFile(path)
            shipped.add(path)
    for entry in _entries(get(ARCHIVES_KEY, None)):
        path, _, target = entry.partition("#")
        if not os.path.exists(path):
            raise ConfigurationError(f"add_python_archive: {path!r} does not exist")
        name = target or os.path.basename(path)
        spec = f"{os.path.abspath(path)}#{name}"
        if spec not in shipped:
            sc.addArchive(spec)
            shipped.add(spec)
