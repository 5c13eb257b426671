"""A real PostgreSQL server for tests: a temporary cluster on a free port.

Uses Debian's ``postgresql`` server binaries (``/usr/lib/postgresql/<v>/bin``; .ci/run
installs the package when missing). initdb refuses to run as root, so as root the
cluster is created and run as the ``postgres`` user the package creates.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["pg_bin_dir", "postgres_server"]


def pg_bin_dir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def postgres_server(max_prepared_transactions: int = 64) -> Iterator[str]:
    """Start a throwaway cluster; yields its conninfo URL; stops and deletes it."""
    bindir = pg_bin_dir()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server: apt-get install postgresql (.ci/run does)")
    root = tempfile.mkdtemp(prefix="streamstate-pg-")
    data = os.path.join(root, "data")
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    run = lambda *a: subprocess.run([*as_user, *a], check=True, capture_output=True)  # noqa: E731
    run(f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync")
    opts = (
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
        f"-c max_prepared_transactions={max_prepared_transactions}"
    )
    run(f"{bindir}/pg_ctl", "-D", data, "-o", opts, "-w", "-l", f"{root}/log", "start")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)
