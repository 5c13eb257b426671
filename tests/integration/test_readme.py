"""The README, run as a new user would: its commands, in its order, as subprocesses, each
checked for its effect (the restore included). Read from README.md itself, so a changed
README is a changed test:

* *Install into your own project*: a wheel built from this checkout, installed into a fresh
  virtualenv (its dependencies borrowed from this one), runs the sample job;
* the sample ``job.py`` and the commands after it (run, list the checkpoint, read its state,
  restore from it: the counts go on);
* *Watching and steering running jobs*: list, info, curl, savepoint, stop on a running job,
  cancel on another.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.spark

BIN = Path(sys.executable).parent
README = Path(ROOT, "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def _block_with(language: str, text: str) -> str:
    (block,) = [b for b in _blocks(language) if text in b]
    return block


def _commands(block: str) -> list[str]:
    """The block's commands, without comments (``# ...`` lines and trailing ones)."""
    out = []
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("STREAMSTATE_CONF", None)
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env.update(extra)
    return env


def _run(command: str, cwd: Path, env: dict[str, str], timeout: float = 600):
    proc = subprocess.run(
        shlex.split(command), capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def _sample_job(tmp_path: Path, checkpoints: Path) -> Path:
    (job,) = [b for b in _blocks("python") if b.startswith("# job.py")]
    assert "file:///tmp/checkpoints" in job
    path = tmp_path / "job.py"
    path.write_text(job.replace("file:///tmp/checkpoints", f"file://{checkpoints}"))
    return path


def test_the_readme_first_hour_commands_in_order(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    _sample_job(tmp_path, checkpoints)
    commands = _commands(_block_with("bash", "streamstate run job.py a b a"))
    assert [c.split()[1] for c in commands] == ["run", "checkpoints", "state", "run"]
    env = _env()
    job_id = None
    for command in commands:
        command = command.replace("/tmp/checkpoints", str(checkpoints))
        if job_id is not None:
            command = command.replace("JOB_ID", job_id)
        proc = _run(command, tmp_path, env)
        verb = command.split()[1]
        if verb == "run" and "--from-checkpoint" not in command:
            assert {"1> ('b', 1)", "2> ('a', 1)", "2> ('a', 2)"} <= set(proc.stdout.splitlines())
            (job_dir,) = checkpoints.iterdir()
            job_id = job_dir.name
            assert sorted(p.name for p in job_dir.glob("chk-*")) == ["chk-1"]  # retained
        elif verb == "checkpoints":
            header, row = proc.stdout.strip().splitlines()
            assert row.split()[:2] == [job_id, "1"] and "valid" in row
        elif verb == "state":
            assert proc.stdout.splitlines() == ["'a' -> 2", "'b' -> 1"]
        else:  # restored: the source goes on after its 3 words, the counts go on
            assert f"restored from checkpoint 1 of job {job_id}" in proc.stderr
            out = [ln.split("> ", 1)[1] for ln in proc.stdout.splitlines() if "> " in ln]
            assert sorted(out) == ["('a', 3)", "('c', 1)"]
    assert job_id is not None


def test_the_readme_install_into_your_own_project(tmp_path):
    """The commands of *Install into your own project*, with a clone at /path/to/streamstate
    (this checkout's sources) and a fresh virtualenv whose dependencies come from this one
    (a .pth file: the wheel's own streamstate is what runs)."""
    clone = tmp_path / "streamstate"
    shutil.copytree(Path(ROOT, "src"), clone / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(Path(ROOT, name), clone / name)
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # the dependencies (pyspark, ...) of this virtualenv, not its editable streamstate
    Path(purelib, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    commands = _commands(_block_with("bash", "pip wheel"))
    assert len(commands) == 3
    for command in commands:  # install the clone; build a wheel; install the wheel
        command = command.replace("/path/to/streamstate", str(clone))
        if " install " in command:  # into the new virtualenv, its dependencies are there
            command = command.replace(
                "python -m pip install", f"python -m pip --python {python} install --no-deps"
            )
            if ".whl" in command:  # over the clone's install of the same version
                command += " --force-reinstall"
        _run(command.replace("python -m pip", f"{sys.executable} -m pip", 1), tmp_path, _env())
    where = _run(f"{python} -c 'import streamstate; print(streamstate.__file__)'", tmp_path, _env())
    assert where.stdout.strip().startswith(purelib)  # the wheel's, not this checkout's
    checkpoints = tmp_path / "checkpoints"
    _sample_job(tmp_path, checkpoints)
    env = _env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PYSPARK_PYTHON", None)  # sessions streamstate creates set it themselves
    proc = _run(f"{python} job.py a b a", tmp_path, env)
    assert {"1> ('b', 1)", "2> ('a', 1)", "2> ('a', 2)"} <= set(proc.stdout.splitlines())
    assert "log4j" not in proc.stderr  # the wheel carries the quiet log configuration


UNBOUNDED_JOB = """
from streamstate.common import Types
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.datastream.connectors.collect import DiscardingSink

env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(200)
env.get_configuration().set_string("execution.epoch.max-records", "50")
env.get_configuration().set_string("execution.epoch.interval", "100ms")
numbers = env.from_sequence(0, 10**12)
numbers.key_by(lambda n: n % 7, key_type=Types.LONG()).reduce(lambda a, b: a + b).uid(
    "sums"
).sink_to(DiscardingSink())
env.execute("unbounded")
"""


def _start(tmp_path: Path, env: dict[str, str], name: str) -> tuple[subprocess.Popen[str], str]:
    script = tmp_path / f"{name}.py"
    script.write_text(UNBOUNDED_JOB)
    proc = subprocess.Popen(
        [str(BIN / "streamstate"), "run", str(script)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stderr.readline() if proc.stderr else ""
    m = re.match(r"streamstate: job 'unbounded' \(([0-9a-f]+)\): (http://\S+)/", line)
    assert m, line
    return proc, m.group(1)


def _wait_for_a_checkpoint(job_id: str, env: dict[str, str]) -> None:
    while True:
        info = _run(f"streamstate info {job_id}", Path.cwd(), env)
        m = re.search(r"checkpoints: (\d+) completed", info.stdout)
        if m and int(m.group(1)) > 0:
            return
        time.sleep(0.2)


def test_the_readme_watching_and_steering_commands_in_order(tmp_path):
    home = tmp_path / "home"
    env = _env(STREAMSTATE_HOME=str(home))
    commands = _commands(_block_with("bash", "streamstate list"))
    assert [c.split()[1] if c.startswith("streamstate") else c.split()[0] for c in commands] == [
        "list",
        "info",
        "curl",
        "savepoint",
        "stop",
        "cancel",
    ]
    first, job_id = _start(tmp_path, env, "first")
    second = None
    try:
        _wait_for_a_checkpoint(job_id, env)
        for command in commands:
            command = command.replace("[DIR]", str(tmp_path / "savepoints"))
            command = command.replace("[--savepoint-path DIR]", f"--savepoint-path {tmp_path / 'sp'}")
            command = command.replace(" [--drain]", "")
            if command.startswith("curl"):
                address = json.loads(
                    _run("streamstate list --json", tmp_path, env).stdout
                )[0]["address"]
                command = command.replace("http://127.0.0.1:40123", address)
            if " cancel " in command:
                second, job_id = _start(tmp_path, env, "second")
            proc = _run(command.replace("JOB_ID", job_id), tmp_path, env)
            verb = command.split()[1] if command.startswith("streamstate") else "curl"
            if verb == "list":
                assert f"Jobs in the job registry {home / 'jobs'}" in proc.stdout
                assert job_id in proc.stdout and "unbounded (RUNNING)" in proc.stdout
            elif verb == "info":
                assert f"job {job_id}: unbounded (RUNNING)" in proc.stdout
                assert "sums" in proc.stdout
            elif verb == "curl":
                assert json.loads(proc.stdout)["counts"]["completed"] >= 1
            elif verb in ("savepoint", "stop"):
                (path,) = re.findall(r"Savepoint completed\. Path: (\S+)", proc.stdout)
                assert Path(path.removeprefix("file://"), "_metadata").exists()
                if verb == "stop":
                    assert first.wait(timeout=300) == 0
            else:
                assert f"Cancelled job {job_id}" in proc.stdout
                assert second is not None and second.wait(timeout=300) == 0
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
