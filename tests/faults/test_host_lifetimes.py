"""Subtask hosts and zygotes belong to one application (issue 27 items 5-7, issue 26 item
5). Each application here is its own driver process (``host_apps.py``) started as a user
starts one, while the test session's own application (umask 022, its zygote running)
stands for "an earlier application on the same machine":

* every file a job writes honours the umask of the process that started it (077 here:
  state files, shared SSTs, RocksDB local copies, file-sink output, epoch versions);
* a SourceFunction without operator state finishes with ``spark.python.worker.reuse=false``;
* a module that only the workers' PYTHONPATH provides works under hosts, and the host sees
  the worker's environment and working directory, not the earlier application's;
* no subtask host, query host or zygote outlives its application, whether the driver
  exits or is SIGKILLed, and the application's directory is removed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from streamstate.runtime import runtime_dir
from streamstate.runtime.host_owner import running, start_time
from tests.integration.test_subtask_hosts import count_job
from tests.support.waits import wait_until

pytestmark = pytest.mark.spark

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
APP = os.path.join(HERE, "host_apps.py")
#: bounds a hang of an application (a whole Spark driver on a loaded 2-core machine)
APP_TIMEOUT_S = 600
#: bounds how long hosts may take to notice their application ended (a hang, not a speed:
#: they are told by a pidfd; the time taken is printed)
END_WAIT_S = 60.0


@pytest.fixture
def earlier_application(spark):
    """The session's application runs a hosted job: its zygote is alive on this machine."""
    out, _ = count_job(spark, True, epochs_of=300)
    assert out


def app_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [extra.get("PYTHONPATH"), ROOT, os.environ.get("PYTHONPATH")])
    )
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


def run_app(*args: str, umask: int | None = None, cwd: Any = None, **extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, APP, *args],
        capture_output=True,
        text=True,
        timeout=APP_TIMEOUT_S,
        env=app_env(**extra),
        cwd=cwd,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert results, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(results[-1][len("RESULT ") :])


def test_every_file_a_job_writes_honours_the_umask_of_its_driver(earlier_application, tmp_path):
    out, chk, local = tmp_path / "out", tmp_path / "chk", tmp_path / "rocksdb"
    got = run_app("files", str(out), str(chk), str(local), umask=0o077)
    modes = got["modes"]
    # what was seen: every kind of file the issue names
    assert any("/shared/" in p for p in modes), "no shared SST file seen"
    assert any(p.startswith("rocksdb/") and "streamstate-local" in p for p in modes), (
        "no RocksDB local copy seen"
    )
    assert any(p.startswith("rocksdb/") and p.endswith(".sst") for p in modes)
    assert any("-keyed" in p or "seen" in p for p in modes if p.startswith("chk/"))
    assert any("/epochs/" in p for p in modes)
    assert any(p.startswith("out/") and "part-" in p for p in modes)
    open_to_others = {p: m for p, m in modes.items() if int(m, 8) & 0o077}
    assert open_to_others == {}


def test_a_stateless_source_function_finishes_with_worker_reuse_off():
    got = run_app("source")
    assert got["records"] == [2 * i for i in range(40)]


def test_a_module_on_the_workers_pythonpath_works_under_hosts(earlier_application, tmp_path):
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "host_helper.py").write_text(
        "import os\n\n\n"
        "def seen(value):\n"
        "    with open('/proc/self/status') as f:\n"
        "        umask = next(ln.split()[1] for ln in f if ln.startswith('Umask:'))\n"
        "    return value, os.environ.get('HOST_APP_FLAG'), os.getcwd(), umask\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    got = run_app("helper", cwd=work, umask=0o027, PYTHONPATH=str(helpers), HOST_APP_FLAG="app-2")
    seen = got["seen"]
    assert [s[0] for s in seen] == list(range(8))
    # the host saw this application's worker: its environment, directory and umask
    assert {tuple(s[1:]) for s in seen} == {("app-2", str(work), "0027")}


def markers_of(directory: Path, kind: str) -> list[dict]:
    """What the processes of ``kind`` (``host``, ``query``) recorded in ``directory``."""
    return [json.loads(p.read_text()) for p in directory.glob(f"{kind}-*")]


def wait_until_ended(processes: list[tuple[int, int]], directories: set[str]) -> float:
    """Seconds until every ``(pid, start time)`` ended and every directory is gone."""
    began = time.monotonic()

    def alive() -> list[int]:
        return [p for p, s in processes if running(p) and start_time(p) == s]

    def left() -> list[str]:
        return [d for d in directories if os.path.exists(d)]

    wait_until(
        lambda: not alive() and not left(),
        END_WAIT_S,
        lambda: f"after the application ended: alive {alive()}, {left()}",
    )
    return time.monotonic() - began


@pytest.mark.parametrize("end", ["driver-exits", "driver-sigkilled"])
def test_no_host_or_zygote_outlives_its_application(tmp_path, end):
    markers = tmp_path / "markers"
    markers.mkdir()
    delay = "0.002" if end == "driver-exits" else "0.5"  # killed: still running by then
    proc = subprocess.Popen(
        [sys.executable, APP, "pids", str(markers), delay],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=app_env(),
    )
    try:
        if end == "driver-exits":
            stdout, stderr = proc.communicate(timeout=APP_TIMEOUT_S)
            assert proc.returncode == 0, stderr[-4000:]
            assert 'RESULT {"records": 100}' in stdout
        else:

            def hosts_up() -> bool:
                # both keyed subtasks' hosts and the machine's query host are up
                assert proc.poll() is None, proc.stderr.read()[-4000:]
                return len(markers_of(markers, "host")) >= 2 and bool(markers_of(markers, "query"))

            wait_until(hosts_up, APP_TIMEOUT_S, "the hosts never started")
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    hosts, queries = markers_of(markers, "host"), markers_of(markers, "query")
    assert hosts and queries, "the job ran no subtask host or no query host"
    marks = hosts + queries
    processes = [(m["pid"], m["start"]) for m in marks]
    processes += [(m["parent"], m["parent_start"]) for m in marks]  # the zygote
    assert len({m["parent"] for m in marks}) == 1  # one zygote for the application
    took = wait_until_ended(processes, {m["host_dir"] for m in hosts})
    print(f"hosts, query host and zygote ended {took:.2f} s after the driver ({end})")
    jobs = os.path.join(tempfile.gettempdir(), f"{runtime_dir.PREFIX}{os.getuid()}", "jobs")
    if end == "driver-exits":
        assert not claimed_by(jobs, proc.pid)  # the job's epoch state went with it
    else:
        # the killed driver's epoch state stays until a later driver sweeps it
        killed = claimed_by(jobs, proc.pid)
        assert killed
        assert set(killed) <= set(runtime_dir.sweep(jobs))
        assert not claimed_by(jobs, proc.pid)
        runtime_dir.remove_empty(jobs)


def claimed_by(jobs: str, pid: int) -> list[str]:
    """The job directories under ``jobs`` that process ``pid`` claimed."""
    out = []
    for name in os.listdir(jobs) if os.path.isdir(jobs) else []:
        try:
            with open(os.path.join(jobs, name, runtime_dir.OWNER_FILE)) as f:
                if f.read().split("-")[0] == str(pid):
                    out.append(os.path.join(jobs, name))
        except OSError:
            continue
    return out


def test_a_runtime_directory_others_can_enter_fails_the_job_and_stays_unused(tmp_path):
    """A pre-existing world-writable runtime directory (another user could have planted
    sockets in it) is refused with the fix, not used: the job fails, nothing is put in it."""
    tmp = tmp_path / "t"
    tmp.mkdir()
    planted = tmp / f"{runtime_dir.PREFIX}{os.getuid()}"
    planted.mkdir()
    os.chmod(planted, 0o777)
    got = run_app("unsafe", str(tmp_path / "chk"), TMPDIR=str(tmp))
    assert got["error"] is not None, "the job ran with the unsafe directory"
    assert "UnsafeDirectoryError" in got["error"] or "UnsafeDirectoryError" in got["message"]
    assert str(planted) in got["message"]
    assert "Remove it" in got["message"] and "TMPDIR" in got["message"]
    assert list(planted.iterdir()) == []
    assert oct(planted.stat().st_mode & 0o7777) == oct(0o777)
