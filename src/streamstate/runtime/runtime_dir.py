"""This user's private runtime directory on this machine: ``<tmp>/streamstate-<uid>``.

Everything streamstate keeps in the system temporary directory on its own account lives
under it: the subtask hosts' sockets, one directory per Spark application
(``app-<owner>/``, ``host_owner.py``), and the in-memory checkpoint storage's epoch state
(``jobs/<job id>/``). Like Spark's and Jupyter's runtime directories it must be a real
directory of this user that no one else can enter: it is created with mode 0700, and an
existing one is checked every time it is resolved (not a symlink, owned by this uid, no
group or other permission bits). Anything else is refused with
:class:`UnsafeDirectoryError`: another user could have planted sockets or files in it.

What is ours is removed when it is over: an application's directory when its owner ends
(the zygote removes it), a job's epoch state at the job's end, a process's scratch
directories (``scratch/<kind>-*``: staged rows, shipped Python files, large job specs) when
that process exits or, killed, at the next sweep (:func:`scratch_dir`), and the runtime
directory itself once it is empty (:func:`remove_empty`). Creating a subdirectory therefore retries
when a concurrent cleanup removed the runtime directory in between.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile

from streamstate.errors import UnsafeDirectoryError

__all__ = [
    "OWNER_FILE",
    "PREFIX",
    "claim",
    "is_ours",
    "private_dir",
    "release",
    "release_claims",
    "remove_empty",
    "runtime_dir",
    "scratch_dir",
    "sweep",
]

#: the runtime directory's name is PREFIX + this user's uid
PREFIX = "streamstate-"


def _path() -> str:
    return os.path.join(tempfile.gettempdir(), f"{PREFIX}{os.getuid()}")


def _check(path: str) -> None:
    st = os.lstat(path)
    problem = None
    if stat.S_ISLNK(st.st_mode):
        problem = "a symbolic link"
    elif not stat.S_ISDIR(st.st_mode):
        problem = "not a directory"
    elif st.st_uid != os.getuid():
        problem = f"owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    elif st.st_mode & 0o077:
        problem = f"accessible to other users (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem is not None:
        raise UnsafeDirectoryError(
            f"streamstate's runtime directory {path} is {problem}. streamstate keeps the "
            f"sockets of its subtask hosts and job state there and uses it only when it is a "
            f"directory of this user that no one else can enter (mode 0700). Remove it (it is "
            f"created again), or point TMPDIR at a directory of your own"
        )


def runtime_dir(create: bool = True) -> str:
    """This user's runtime directory, created (0700) when missing (else
    ``FileNotFoundError``), checked when it exists; raises :class:`UnsafeDirectoryError`
    when it is not private."""
    path = _path()
    if not create:
        _check(path)
        return path
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        _check(path)
    else:
        os.chmod(path, 0o700)  # whatever the umask: the owner must be able to enter it
    return path


def private_dir(*parts: str) -> str:
    """``<runtime dir>/<parts...>``, created (each level 0700) when missing."""
    for attempt in range(5):
        root = runtime_dir()
        path = os.path.join(root, *parts)
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            return path
        except FileNotFoundError:
            if attempt == 4:  # removed under our feet five times: not a race any more
                raise
    raise AssertionError("unreachable")


#: the parent of every process's scratch directories
SCRATCH = "scratch"


def scratch_dir(kind: str) -> str:
    """A new private directory of this process, ``<runtime dir>/scratch/<kind>-*``, for
    files it needs until it exits (staged rows a DataFrame reads lazily, zips shipped to
    the workers): claimed, so it is removed when this process exits and, should it be
    killed, by the next process's sweep, which this call runs first."""
    for attempt in range(5):
        parent = private_dir(SCRATCH)
        sweep(parent)
        try:
            path = tempfile.mkdtemp(prefix=f"{kind}-", dir=parent)
        except FileNotFoundError:  # a concurrent cleanup removed the empty parent
            if attempt == 4:
                raise
            continue
        claim(path)
        return path
    raise AssertionError("unreachable")


def remove_empty(path: str) -> None:
    """Remove ``path`` and its parents up to and including the runtime directory while they
    are empty (a directory someone still uses is not empty and stays)."""
    root = _path()
    path = os.path.abspath(path)
    if path != root and not path.startswith(root + os.sep):
        return  # not ours
    while True:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass  # gone already: its parent may be empty now
        except OSError:
            return  # not empty: in use
        if path == root:
            return
        path = os.path.dirname(path)


#: the file naming the process a directory of the runtime directory belongs to
OWNER_FILE = ".owner"


#: what this process claimed (removed when it exits, :func:`release_claims`)
_CLAIMED: set[str] = set()
#: the process :data:`_CLAIMED` belongs to (a forked child inherits the set, not the claims)
_CLAIMED_BY: int | None = None


def claim(path: str) -> None:
    """Record this process as the one ``path`` belongs to: it is removed when this process
    exits (:func:`release_claims`), or by a later :func:`sweep` when it did not get to
    (a SIGKILLed driver's job state does not stay for ever)."""
    from streamstate.runtime.host_owner import start_time

    global _CLAIMED_BY
    pid = os.getpid()
    if _CLAIMED_BY != pid:
        _CLAIMED.clear()  # inherited through a fork: the parent's, not ours to remove
        _CLAIMED_BY = pid
        atexit.register(release_claims)
    _CLAIMED.add(path)
    tmp = os.path.join(path, f"{OWNER_FILE}.{pid}.tmp")
    with open(tmp, "w") as f:
        f.write(f"{pid}-{start_time(pid) or 0}")
    os.replace(tmp, os.path.join(path, OWNER_FILE))


def release(path: str) -> None:
    """Remove ``path``, a directory this process claimed, now (before this process exits),
    and its parents up to the runtime directory when that leaves them empty."""
    shutil.rmtree(path, ignore_errors=True)
    if _CLAIMED_BY == os.getpid():
        _CLAIMED.discard(path)
    remove_empty(os.path.dirname(path))


def release_claims() -> None:
    """Remove what this process claimed, and the runtime directory when that leaves it
    empty (at exit; a test session calls it before it checks what is left)."""
    if _CLAIMED_BY != os.getpid():
        _CLAIMED.clear()  # a forked child's exit: what it inherited is its parent's
        return
    for path in sorted(_CLAIMED):
        shutil.rmtree(path, ignore_errors=True)
        remove_empty(os.path.dirname(path))
    _CLAIMED.clear()
    # the scratch parent is every process's: one that ended without its cleanup (killed)
    # or whose cleanup ran while another's dir was still there leaves it empty; any
    # process that leaves tidies it, and the runtime dir with it when that is empty
    remove_empty(os.path.join(_path(), SCRATCH))


def sweep(parent: str) -> list[str]:
    """Remove the directories in ``parent`` (in the runtime directory) whose claiming
    process ended; the removed paths. Unclaimed ones (being created) stay."""
    from streamstate.runtime.host_owner import Owner

    removed: list[str] = []
    if not is_ours(parent):
        return removed
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        try:
            with open(os.path.join(path, OWNER_FILE)) as f:
                owner = Owner.decode(f.read().strip())
        except (OSError, ValueError):
            continue
        if not owner.alive():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        remove_empty(parent)  # the sweeper may make nothing of its own in it
    return removed


def is_ours(path: str) -> bool:
    """Whether ``path`` lies in this user's runtime directory."""
    root = _path()
    path = os.path.abspath(path)
    return path == root or path.startswith(root + os.sep)
