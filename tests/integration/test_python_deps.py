"""PyFlink's add_python_file / set_python_requirements / add_python_archive, through
Spark: modules and packages the driver does not have are imported by the functions on the
executors."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from streamstate.common import Types
from streamstate.errors import ConfigurationError
from tests.support import envs

pytestmark = pytest.mark.spark


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


def _uses_file_and_requirement(word: str) -> tuple[str, str]:
    import fh_shipped_pkg  # add_python_file (a directory: a package)
    import fh_shipped_req  # set_python_requirements

    return fh_shipped_pkg.shout(word), fh_shipped_req.twice(word)


def _uses_archive(word: str) -> str:
    import os

    from pyspark import SparkFiles

    with open(os.path.join(SparkFiles.get("fh_data"), "suffix.txt")) as f:
        return word + f.read().strip()


def test_files_requirements_and_archives_reach_the_executors(spark, tmp_path):
    """Files and requirements in the subtask hosts (the default); archives where PySpark
    runs the function itself (SparkFiles is PySpark's worker's: docs/limitations.md)."""
    with pytest.raises(ImportError):
        import fh_shipped_pkg  # noqa: F401 - not on the driver: only shipping brings it
    pkg = tmp_path / "deps" / "fh_shipped_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def shout(w):\n    return w.upper() + '!'\n")
    cache = tmp_path / "wheels"
    cache.mkdir()
    _wheel(cache, "fh_shipped_req", "def twice(w):\n    return w + w\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("fh_shipped_req==1.0\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "suffix.txt").write_text("-x\n")
    archive = tmp_path / "data.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(data / "suffix.txt", "suffix.txt")

    env = envs.make_env(2, spark=spark)
    env.add_python_file(str(pkg))
    env.set_python_requirements(str(requirements), str(cache))  # offline, as PyFlink's cache
    out = env.from_collection(["a", "b"], Types.STRING()).map(_uses_file_and_requirement)
    assert sorted(out.execute_and_collect()) == [("A!", "aa"), ("B!", "bb")]

    env = envs.make_env(2, spark=spark, conf={"execution.runner.spark.subtask-hosts": "false"})
    env.add_python_archive(str(archive), "fh_data")
    out = env.from_collection(["a", "b"], Types.STRING()).map(_uses_archive)
    assert sorted(out.execute_and_collect()) == ["a-x", "b-x"]


def test_a_missing_dependency_is_named_before_the_job_runs(spark, tmp_path):
    env = envs.make_env(1, spark=spark)
    env.add_python_file(str(tmp_path / "nope.py"))
    env.from_collection([1]).map(lambda x: x).print()
    with pytest.raises(ConfigurationError, match=r"add_python_file: .*nope\.py.* does not exist"):
        env.execute()
