"""Job registry files: how ``streamstate list`` and friends find running jobs.

One JSON file per running job in :func:`registry_dir` (``$STREAMSTATE_HOME/jobs/<user>``,
default ``~/.streamstate/jobs/<user>``), written atomically (temp file + rename) with mode
0600 because it holds the job's bearer token, and removed when the job ends. Format version
:data:`REGISTRY_VERSION`. The registry is per user: a home shared by several users (or a
``STREAMSTATE_HOME`` shared by a team) lists each user's own jobs, and a file another user
owns is never listed. A file whose process is gone is stale: :func:`list_jobs` skips and
deletes it. A process is told by its pid AND its start time: a driver killed without
removing its file leaves a pid the kernel hands out again (``pid_max`` is 32768 on many
machines), and the new process with that pid is not the job.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from streamstate.runtime.host_owner import start_time

__all__ = ["REGISTRY_VERSION", "JobRecord", "list_jobs", "registry_dir"]

#: 2: the driver's process start time (``pid_start``) next to its pid
REGISTRY_VERSION = 2
HOME_ENV_VAR = "STREAMSTATE_HOME"


def _user() -> str:
    """This process's user name (its effective uid when it has no name)."""
    uid = os.geteuid()
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def registry_dir() -> Path:
    """Where this user's running jobs register: ``$STREAMSTATE_HOME/jobs/<user>``, default
    ``~/.streamstate/jobs/<user>``."""
    home = os.environ.get(HOME_ENV_VAR) or os.path.join(os.path.expanduser("~"), ".streamstate")
    return Path(home) / "jobs" / _user()


@dataclass(frozen=True)
class JobRecord:
    """What the registry says about one running job."""

    job_id: str
    name: str
    #: the REST API's base URL, e.g. ``http://127.0.0.1:40123``
    address: str
    token: str
    pid: int
    start_ms: int
    version: int = REGISTRY_VERSION
    #: ``host:port`` of the queryable-state server answering for the job (None: off)
    queryable_address: str | None = None
    #: when the driver process started (``/proc/<pid>/stat`` field 22; 0: unknown)
    pid_start: int = 0

    def driver_alive(self) -> bool:
        """Whether the process that registered the job still runs: a process with its pid
        exists and (when known) started when the driver did, so not a reused pid."""
        started = start_time(self.pid)
        return started is not None and (self.pid_start == 0 or started == self.pid_start)

    def path(self) -> Path:
        return registry_dir() / f"{self.job_id}.json"

    def write(self) -> Path:
        """Write (or replace) this job's file atomically, readable by its owner only."""
        d = registry_dir()
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.job_id}.", dir=d)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(asdict(self), f)
            os.replace(tmp, self.path())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return self.path()

    def remove(self) -> None:
        self.path().unlink(missing_ok=True)

    @staticmethod
    def read(path: Path) -> JobRecord | None:
        """The record in ``path``; None when it is unreadable or of another format version."""
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("version") != REGISTRY_VERSION:
            return None
        try:
            return JobRecord(**data)
        except TypeError:
            return None


def list_jobs() -> list[JobRecord]:
    """The registered jobs whose driver process is alive, oldest first (stale files go)."""
    d = registry_dir()
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.glob("*.json")):
        try:
            if p.stat().st_uid != os.geteuid():
                continue  # another user's file: not this user's job
        except OSError:
            continue
        rec = JobRecord.read(p)
        if rec is None:
            continue
        if not rec.driver_alive():
            p.unlink(missing_ok=True)
            continue
        out.append(rec)
    return sorted(out, key=lambda r: r.start_ms)
