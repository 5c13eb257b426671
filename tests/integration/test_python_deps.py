"""PyFlink's add_python_file / set_python_requirements / add_python_archive, through
Spark: modules and packages the driver does not have are imported by the functions on the
executors."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from functools import partial
from pathlib import Path

import pytest

from streamstate.common import Types
from streamstate.errors import ConfigurationError
from streamstate.spark.session import is_connect_session
from tests.support import envs
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()


def _wheel(directory: Path, name: str, source: str) -> Path:
    """A minimal pure-Python wheel of module ``name`` (what pip installs offline)."""
    path = directory / f"{name}-1.0-py3-none-any.whl"
    files = {
        f"{name}.py": source.encode(),
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{name}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for arc, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")
    record.append(f"{name}-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as z:
        for arc, data in files.items():
            z.writestr(arc, data)
        z.writestr(f"{name}-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _uses_file_and_requirement(names: tuple[str, str], word: str) -> tuple[str, str]:
    import importlib

    shipped_pkg = importlib.import_module(names[0])  # add_python_file (a directory: a package)
    shipped_req = importlib.import_module(names[1])  # set_python_requirements
    return shipped_pkg.shout(word), shipped_req.twice(word)


def _uses_archive(word: str) -> str:
    import os

    from pyspark import SparkFiles

    with open(os.path.join(SparkFiles.get("fh_data"), "suffix.txt")) as f:
        return word + f.read().strip()


def test_files_and_requirements_reach_the_executors(spark, tmp_path):
    """Files and requirements in the subtask hosts (the default), on both runners (names
    of each runner's own: a classic SparkContext also puts shipped files on the driver's
    sys.path)."""
    import importlib

    runner = "connect" if is_connect_session(spark) else "classic"
    pkg_name, req_name = f"fh_shipped_pkg_{runner}", f"fh_shipped_req_{runner}"
    with pytest.raises(ImportError):  # not on the driver: only shipping brings it
        importlib.import_module(pkg_name)
    pkg = tmp_path / "deps" / pkg_name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def shout(w):\n    return w.upper() + '!'\n")
    cache = tmp_path / "wheels"
    cache.mkdir()
    _wheel(cache, req_name, "def twice(w):\n    return w + w\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"{req_name}==1.0\n")
    env = envs.make_env(2, spark=spark)
    env.add_python_file(str(pkg))
    env.set_python_requirements(str(requirements), str(cache))  # offline, as PyFlink's cache
    uses = partial(_uses_file_and_requirement, (pkg_name, req_name))
    out = env.from_collection(["a", "b"], Types.STRING()).map(uses)
    assert sorted(out.execute_and_collect()) == [("A!", "aa"), ("B!", "bb")]


def test_archives_reach_the_executors(classic_spark, tmp_path):
    """Archives where PySpark runs the function itself (SparkFiles is PySpark's worker's:
    docs/limitations.md). On the classic session only: a local-mode Spark Connect server
    unpacks a session's archive twice into one directory (docs/limitations.md)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "suffix.txt").write_text("-x\n")
    archive = tmp_path / "data.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(data / "suffix.txt", "suffix.txt")
    conf = {"execution.runner.spark.subtask-hosts": "false"}
    env = envs.make_env(2, spark=classic_spark, conf=conf)
    env.add_python_archive(str(archive), "fh_data")
    out = env.from_collection(["a", "b"], Types.STRING()).map(_uses_archive)
    assert sorted(out.execute_and_collect()) == ["a-x", "b-x"]


def test_a_missing_dependency_is_named_before_the_job_runs(spark, tmp_path):
    env = envs.make_env(1, spark=spark)
    env.add_python_file(str(tmp_path / "nope.py"))
    env.from_collection([1]).map(lambda x: x).print()
    with pytest.raises(ConfigurationError, match=r"add_python_file: .*nope\.py.* does not exist"):
        env.execute()
