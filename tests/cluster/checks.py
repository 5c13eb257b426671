"""What the bed's tests check beyond a job's output: that machines share nothing but the
network and the object store."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = [
    "committed_lines",
    "foreign_paths_open",
    "machine_paths_in_store",
    "only_own_paths_open",
]

#: how a machine-local path shows in anything written for others to read
LOCAL_MARKERS = (b"file://", b"/tmp/", b"/home/streamstate")


def machine_paths_in_store(bed: Any, prefix: str) -> list[str]:
    """Every object under ``s3://bed/<prefix>`` that names a machine-local path (a file URL,
    a temp dir, a home directory): another machine reading that object would be sent to a
    path only the writer's machine has. ``[]`` when none does."""
    fs = bed.s3fs()
    found = []
    for key in fs.find(f"bed/{prefix.strip('/')}"):
        data = fs.cat_file(key)
        for marker in LOCAL_MARKERS:
            at = data.find(marker)
            if at >= 0:
                found.append(f"{key}: {data[max(0, at - 60) : at + 60]!r}")
    return found


def committed_lines(fs: Any, prefix: str) -> list[str]:
    """The lines of every visible object under ``prefix`` (a FileSink's committed output;
    hidden ``.``-names are in-progress or pending parts), sorted."""
    lines: list[str] = []
    for path in sorted(fs.find(prefix)):
        if not path.rsplit("/", 1)[-1].startswith("."):
            lines += fs.cat_file(path).decode().splitlines()
    return sorted(lines)


#: what every machine has of its own (private mounts of the machine, tests/cluster/bed.py)
OWN = ("/tmp/", "/home/", "/dev/shm/", "/var/tmp/")
#: what every machine is provisioned with, the same everywhere and only read: the system,
#: the Python install and this checkout (``ROOT``), kernel views and devices
#: (``/var/cache/fontconfig``: the font caches the fontconfig package built at install, which
#: the client's headless Chromium maps)
PROVISIONED = (
    "/usr/",
    "/lib/",
    "/lib64/",
    "/etc/",
    "/opt/",
    "/var/cache/fontconfig/",
    "/proc/",
    "/sys/",
    "/dev/",
)
#: fd targets that are no path (sockets, pipes, eventfds, ...)
NO_PATH = ("socket:", "pipe:", "anon_inode:", "/memfd:", "[")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR


def _pids_of(init_pid: int) -> list[int]:
    """Every process of the machine whose PID 1 is ``init_pid`` (same PID namespace)."""
    try:
        ns = os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return []
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                    out.append(int(entry))
            except OSError:
                continue  # ended meanwhile
    return out


def _open_paths(pid: int) -> list[tuple[str, bool]]:
    """``(path, opened for writing)`` of the process's open files, memory-mapped files and
    working directory, as the process names them (in its own mount namespace)."""
    found: list[tuple[str, bool]] = []
    try:
        found.append((os.readlink(f"/proc/{pid}/cwd"), False))
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = dict(line.split(":", 1) for line in f if ":" in line)
            flags = int(info.get("flags", "0").strip(), 8)
            found.append((target, bool(flags & _WRITE_FLAGS)))
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith("/"):
                    found.append((fields[5].strip(), False))
    except (OSError, IndexError, ValueError):
        pass  # the process ended while looked at
    return found


def foreign_paths_open(bed: Any, root: str) -> list[str]:
    """Every path a process of a bed machine has open that is not the machine's own: a path
    on no private mount of its own (another machine could read it) that is not the read-only
    system, Python install or checkout (``root``) every machine is provisioned with, or
    one of those opened for writing. ``[]`` when each machine only reads what it has.

    Checked from this host over ``/proc``: every process of each machine's PID namespace,
    its open files (and their open mode), memory maps and working directory."""
    shared_code = tuple(
        p.rstrip("/") + "/"
        for p in {root, sys.prefix, sys.base_prefix, os.path.realpath(sys.base_prefix)}
    )
    java = os.environ.get("JAVA_HOME")
    read_only = PROVISIONED + shared_code + ((java.rstrip("/") + "/",) if java else ())
    found = []
    for m in list(bed.machines.values()):  # a test may add or lose machines meanwhile
        if not m.init_pid:
            continue
        for pid in _pids_of(m.init_pid):
            for path, writing in _open_paths(pid):
                path = path.removesuffix(" (deleted)")
                if path.startswith(NO_PATH) or path.startswith(OWN) or path in ("/", "/tmp"):
                    continue
                if (path + "/").startswith(read_only) and not writing:
                    continue
                if path.startswith(("/dev/null", "/dev/pts/", "/dev/urandom", "/dev/random")):
                    continue
                found.append(f"{m.name} pid {pid}: {path}{' (writing)' if writing else ''}")
    return sorted(set(found))


@contextlib.contextmanager
def only_own_paths_open(bed: Any, root: str, every_s: float = 5.0) -> Iterator[None]:
    """While the block runs, :func:`foreign_paths_open` is sampled every ``every_s``
    seconds; the block fails (once it ended without another error) naming every path a
    machine had open that another machine could read."""
    found: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(every_s):
            found.update(foreign_paths_open(bed, root))

    watcher = threading.Thread(target=watch, name="foreign-paths", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
    assert not found, "paths one machine had open that others can read:\n" + "\n".join(
        sorted(found)
    )
