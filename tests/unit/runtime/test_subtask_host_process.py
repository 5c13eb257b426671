"""The subtask-host process itself (no Spark): a worker starts it through its application's
zygote (a fork, not a new interpreter), reaches it again on a new connection, and the
job's end stops it and removes its socket. A host takes the process state of the worker
that asked for it, the zygote forks one host per socket, and zygote and hosts end with
their application's owner process and remove what was theirs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

from streamstate.runtime import subtask_host as h
from streamstate.runtime.host_owner import running, this_owner
from tests.support.waits import wait_until

#: how long a process may take to notice that its owner ended (it is told at once by a
#: pidfd; this only bounds a hang)
END_WAIT_S = 60.0


def wait_until_gone(pids: list[int], paths: list[str] = ()) -> None:
    def alive() -> list[int]:
        return [p for p in pids if running(p)]

    wait_until(
        lambda: not alive() and not any(os.path.exists(p) for p in paths),
        END_WAIT_S,
        lambda: f"still there after the owner ended: {alive()} {paths}",
    )


@pytest.fixture
def zygote():
    """This test process is the owner: its zygote (and hosts) end with the test."""
    yield
    d = h.host_dir()
    h.stop_zygote(d)
    wait_until_gone([], [d])


def test_a_host_is_forked_reached_again_and_stopped(zygote):
    job = f"unit-{uuid.uuid4().hex}"
    path = h._socket_path(job, 0, 1)
    assert os.path.dirname(path) == h.host_dir()
    assert os.path.basename(h.host_dir()) == f"app-{this_owner().key}"
    try:
        conn = h._connection(path, job, 30)
        assert os.path.exists(path)
        h._drop(path)  # a later task of another worker: a new connection, the same host
        again = h._connection(path, job, 30)
        assert again is not conn
        zygotes = [n for n in os.listdir(h.host_dir()) if n.startswith("zygote-")]
        assert any(n.endswith(".sock") for n in zygotes)  # started through the zygote
    finally:
        assert h.stop_hosts(job) == [1]
    assert not os.path.exists(path)
    assert h.stop_hosts(job) == [0]  # idempotent
    assert not [n for n in os.listdir(h.host_dir()) if n.endswith(".lock")]  # no lock files


def _host(job: str, index: int = 0) -> tuple[str, int]:
    path = h._socket_path(job, 0, index)
    pid = h.fork_host(path, job, 30)
    assert pid is not None
    h._connection(path, job, 30)  # it listens
    return path, pid


def test_the_zygote_forks_one_host_per_socket_and_a_new_one_after_a_stop(zygote):
    job = f"unit-{uuid.uuid4().hex}"
    path, pid = _host(job)
    assert h.fork_host(path, job, 30) == pid  # asked again (another worker): the same host
    os.kill(pid, signal.SIGKILL)  # killed: the zygote forks a new one when asked
    wait_until_gone([pid])
    h._drop(path)
    _, again = _host(job)
    assert again != pid
    h.stop_hosts(job)
    wait_until_gone([again])


def test_a_host_takes_the_umask_and_working_directory_of_the_worker_that_asked(zygote, tmp_path):
    first = f"unit-{uuid.uuid4().hex}"
    _, pid = _host(first)  # the zygote is running now, started with this umask
    assert _umask_of(pid) == _umask_of(os.getpid())
    old_mask, old_cwd = os.umask(0o077), os.getcwd()
    try:
        os.chdir(tmp_path)
        job = f"unit-{uuid.uuid4().hex}"
        _, later = _host(job)
    finally:
        os.umask(old_mask)
        os.chdir(old_cwd)
    assert _umask_of(later) == 0o077
    assert os.readlink(f"/proc/{later}/cwd") == str(tmp_path)
    h.stop_hosts(first)
    h.stop_hosts(job)


def _umask_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1], 8) for ln in f if ln.startswith("Umask:"))


APPLICATION = """
import json, sys, time, uuid
from streamstate.runtime import subtask_host as h
job = uuid.uuid4().hex
path = h._socket_path(job, 0, 0)
pid = h.fork_host(path, job, 600)
h._connection(path, job, 600)
from streamstate.runtime.queryable import query_host as q
assert q.ensure_query_host(job, None, 600) is not None
query = q._read_info(q._info_path(job))[0]
print(json.dumps({"host": pid, "query": query, "dir": h.host_dir()}), flush=True)
time.sleep(600)
"""


def test_zygote_and_hosts_end_with_their_owner_and_remove_its_directory():
    """The owner (here a process standing for a Spark application's daemon) is SIGKILLed:
    its zygote, subtask host and query host notice (pidfd), end, and remove the
    application's directory."""
    proc = subprocess.Popen([sys.executable, "-c", APPLICATION], stdout=subprocess.PIPE)
    try:
        line = proc.stdout.readline()
        assert line, "the application process died before starting its host"
        got = json.loads(line)
        host, query = got["host"], got["query"]
        zygote = _parent(host)
        assert zygote is not None and running(zygote) and _parent(query) == zygote
        assert os.path.isdir(got["dir"])
    finally:
        proc.kill()
        proc.wait()
    wait_until_gone([host, query, zygote], [got["dir"]])


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def test_a_forked_host_sees_new_modules_but_keeps_its_zip_archives_read(tmp_path, monkeypatch):
    """A host invalidates the import caches of the path's directories (a module written
    since the zygote listed them is found) but not of its zip archives, whose directory
    re-read cost ~10% of a one-epoch job."""
    import importlib
    import zipfile
    import zipimport

    from streamstate.runtime.host_process import invalidate_directory_caches

    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped_helper_mod.py", "VALUE = 1\n")
    directory = tmp_path / "dir"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    monkeypatch.syspath_prepend(str(archive))
    assert importlib.import_module("zipped_helper_mod").VALUE == 1
    with pytest.raises(ImportError):  # the directory's listing is cached now
        importlib.import_module("written_later_mod")
    listing = zipimport._zip_directory_cache[str(archive)]
    importer = sys.path_importer_cache[str(archive)]
    listed = os.stat(directory)
    (directory / "written_later_mod.py").write_text("VALUE = 2\n")
    # as if written within the file system's mtime resolution: only invalidating finds it
    os.utime(directory, ns=(listed.st_atime_ns, listed.st_mtime_ns))
    try:
        invalidate_directory_caches()
        assert importlib.import_module("written_later_mod").VALUE == 2
        assert sys.path_importer_cache[str(archive)] is importer
        assert zipimport._zip_directory_cache[str(archive)] is listing  # not re-read
    finally:
        for name in ("zipped_helper_mod", "written_later_mod"):
            sys.modules.pop(name, None)
