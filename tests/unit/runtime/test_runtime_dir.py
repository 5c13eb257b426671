"""This user's private runtime directory (runtime/runtime_dir.py): created 0700, refused
when someone else could have been in it first, removed when what was in it is gone."""

from __future__ import annotations

import os
import tempfile

import pytest

from streamstate.errors import ConfigurationError, UnsafeDirectoryError
from streamstate.runtime import runtime_dir as rd


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_it_is_created_private_whatever_the_umask(tmp):
    old = os.umask(0o022)
    try:
        path = rd.private_dir("app-1-2")
    finally:
        os.umask(old)
    root = tmp / f"streamstate-{os.getuid()}"
    assert path == str(root / "app-1-2")
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    assert oct(os.stat(path).st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o750, 0o705])
def test_an_existing_directory_others_can_enter_is_refused(tmp, mode):
    root = tmp / f"streamstate-{os.getuid()}"
    root.mkdir()
    os.chmod(root, mode)
    with pytest.raises(UnsafeDirectoryError, match="accessible to other users") as e:
        rd.runtime_dir()
    assert isinstance(e.value, ConfigurationError)
    assert "Remove it" in str(e.value) and "TMPDIR" in str(e.value)
    assert oct(root.stat().st_mode & 0o7777) == oct(mode)  # not touched


def test_another_users_directory_or_a_symlink_is_refused(tmp):
    root = tmp / f"streamstate-{os.getuid()}"
    if os.getuid() == 0:
        root.mkdir(mode=0o700)
        os.chown(root, 65534, 65534)
        with pytest.raises(UnsafeDirectoryError, match="owned by uid 65534"):
            rd.runtime_dir()
        root.rmdir()
    target = tmp / "elsewhere"
    target.mkdir(mode=0o700)
    root.symlink_to(target)
    with pytest.raises(UnsafeDirectoryError, match="symbolic link"):
        rd.private_dir("x")
    assert not (target / "x").exists()


def test_the_old_shared_directory_is_not_used(tmp):
    shared = tmp / "streamstate"  # what versions before used, world-writable here
    shared.mkdir()
    os.chmod(shared, 0o777)
    assert not rd.is_ours(str(shared))
    assert rd.is_ours(rd.private_dir("jobs"))


def test_empty_directories_are_removed_up_to_the_runtime_dir(tmp):
    inner = rd.private_dir("jobs", "j1")
    kept = rd.private_dir("app-1-2")
    rd.remove_empty(inner)
    assert not os.path.exists(inner) and not os.path.exists(os.path.dirname(inner))
    assert os.path.isdir(kept)  # another application's: not empty, stays
    open(os.path.join(kept, "f"), "w").close()
    rd.remove_empty(kept)
    assert os.path.isdir(kept)
    os.unlink(os.path.join(kept, "f"))
    rd.remove_empty(kept)
    assert not (tmp / f"streamstate-{os.getuid()}").exists()
    rd.remove_empty(str(tmp))  # not ours: nothing happens
    assert tmp.is_dir()


def test_a_directory_claimed_by_a_killed_process_is_swept(tmp):
    import subprocess
    import sys

    jobs = rd.private_dir("jobs")
    mine = rd.private_dir("jobs", "mine")
    rd.claim(mine)
    dead = rd.private_dir("jobs", "dead")
    code = (
        "import os, signal\n"
        "from streamstate.runtime import runtime_dir as rd\n"
        f"rd.claim({dead!r})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"  # a killed driver: no exit hook runs
    )
    subprocess.run([sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(tmp)})
    unclaimed = rd.private_dir("jobs", "being-created")
    assert rd.sweep(jobs) == [dead]
    assert os.path.isdir(mine) and os.path.isdir(unclaimed) and not os.path.exists(dead)
    assert rd.sweep(str(tmp)) == []  # not in the runtime directory: never touched
    os.rmdir(unclaimed)
    rd.release_claims()  # what this process's exit does: its claims go, then empty parents
    assert not (tmp / f"streamstate-{os.getuid()}").exists()


def test_a_process_that_exits_removes_what_it_claimed(tmp):
    import subprocess
    import sys

    done = rd.private_dir("jobs", "done")
    code = f"from streamstate.runtime import runtime_dir as rd; rd.claim({done!r})"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "TMPDIR": str(tmp)})
    assert not os.path.exists(done)
    assert not (tmp / f"streamstate-{os.getuid()}").exists()


def test_scratch_directories_go_with_their_process_or_at_the_next_sweep(tmp):
    """Staged rows, shipped zips and job specs live in claimed scratch directories: the
    process's exit removes its own; one a killed process left is swept by the next."""
    import subprocess
    import sys

    code = (
        "import os, signal, sys\n"
        "from streamstate.runtime import runtime_dir as rd\n"
        "path = rd.scratch_dir('out')\n"
        "open(os.path.join(path, 'part-00000.rows'), 'w').close()\n"
        "print(path, flush=True)\n"
        "if sys.argv[1] == 'killed':\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp)}
    run = [sys.executable, "-c", code]
    exited = subprocess.run([*run, "exits"], capture_output=True, text=True, env=env)
    assert exited.stdout.strip() and not os.path.exists(exited.stdout.strip())
    assert not (tmp / f"streamstate-{os.getuid()}").exists()
    killed = subprocess.run([*run, "killed"], capture_output=True, text=True, env=env)
    left = killed.stdout.strip()
    assert os.path.isfile(os.path.join(left, "part-00000.rows"))
    assert oct(os.stat(left).st_mode & 0o777) == "0o700"
    mine = rd.scratch_dir("pydeps")  # the next process's first scratch dir sweeps
    assert not os.path.exists(left) and os.path.isdir(mine)
    rd.release_claims()
    assert not (tmp / f"streamstate-{os.getuid()}").exists()


def test_an_empty_scratch_parent_goes_with_the_next_process_that_leaves(tmp):
    """A scratch parent left empty (its last user killed before its cleanup) is removed by
    any process's exit, not only by a process that had a scratch dir in it."""
    import subprocess
    import sys

    scratch = rd.private_dir(rd.SCRATCH)
    done = rd.private_dir("jobs", "done")
    code = f"from streamstate.runtime import runtime_dir as rd; rd.claim({done!r})"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "TMPDIR": str(tmp)})
    assert not os.path.exists(done) and not os.path.exists(scratch)
    assert not (tmp / f"streamstate-{os.getuid()}").exists()


def test_stopping_hosts_where_none_ran_leaves_no_directory(tmp):
    """The runner's last Spark job stops hosts on every executor; an executor whose owner
    never had a host must not be left an empty ``app-<owner>`` directory, which nothing
    (no zygote of that owner) would remove."""
    import subprocess
    import sys

    code = (
        "from streamstate.runtime.subtask_host import stop_hosts, stop_zygote\n"
        "from streamstate.runtime.queryable.query_host import stop_query_host\n"
        "print(stop_hosts('job'), stop_zygote(), stop_query_host('job'))\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["[0]", "False", "[0]"], out.stderr
    assert not (tmp / f"streamstate-{os.getuid()}").exists()
