"""Whether every machine of a job shares the directory of its state.

Subtasks move between executors (Spark's scheduling, a lost machine), and a subtask that
moved reads its state versions where another machine wrote them. A local path (``file://``,
the default temp dir of the in-memory storage) is only shared when it is the same mount on
every machine; otherwise the job would fail later, after a move, with a missing state file,
or restore a checkpoint that each machine wrote into its own private copy of the path.

So, before the first epoch, the driver writes a probe file into the job's epoch-state
directory (:func:`mark_shared`), and the first task of the job in each worker process
checks that it sees it (:func:`check_shared`); a worker that does not fails the job with
:class:`StorageNotSharedError`, naming the directory, the machines and the setting. An
object store or any other remote file system is shared by construction: nothing is probed.
"""

from __future__ import annotations

import socket
from typing import Any

from streamstate.errors import StorageNotSharedError
from streamstate.runtime.checkpoint.lock import is_local
from streamstate.runtime.checkpoint.storage import CheckpointStorageAccess

__all__ = ["PROBE_NAME", "check_shared", "mark_shared"]

PROBE_NAME = "_written-by-driver"
#: epoch-state roots this worker process already found shared
_SEEN: set[str] = set()


def _probe(storage: CheckpointStorageAccess) -> tuple[Any, str] | None:
    """(file system, probe path) when ``storage`` keeps epoch versions on a local path."""
    fs, root = storage.epoch_location()
    if not is_local(fs):
        return None
    return fs, f"{root.rstrip('/')}/{PROBE_NAME}"


def mark_shared(storage: CheckpointStorageAccess) -> None:
    """Driver, before the first epoch: write the probe (its content: the driver's host)."""
    found = _probe(storage)
    if found is not None:
        fs, path = found
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(path, socket.gethostname().encode())


def check_shared(storage: CheckpointStorageAccess) -> None:
    """Worker, in a task: raise :class:`StorageNotSharedError` unless this machine sees the
    driver's probe. Once per job and process (a set lookup afterwards)."""
    found = _probe(storage)
    if found is None:
        return
    fs, path = found
    if path in _SEEN:
        return
    if not fs.exists(path):
        raise StorageNotSharedError(_not_shared(storage, path))
    _SEEN.add(path)


def _not_shared(storage: CheckpointStorageAccess, path: str) -> str:
    where = path.rsplit("/", 1)[0]
    here = socket.gethostname()
    if storage.name != "jobmanager":
        fix = (
            "the checkpoint directory is a local path that this machine does not share "
            "with the driver: set "
            "execution.checkpointing.dir (set_checkpoint_storage_dir) to storage every "
            "machine reaches, e.g. s3://bucket/checkpoints, or a path mounted from one "
            "shared file system on every machine, driver included"
        )
    else:
        fix = (
            "with the in-memory checkpoint storage (the default, also for every job "
            "without checkpointing) epoch versions go to a local directory: set "
            "execution.checkpointing.dir (set_checkpoint_storage_dir) to storage every "
            "machine reaches, e.g. s3://bucket/checkpoints, or execution.epoch.state-dir "
            "to such a location"
        )
    return (
        f"the executor on {here} does not see {path}, which the driver wrote before the "
        f"first epoch: {where} is not shared between the machines of this job, and a "
        f"subtask that moves to another machine would not find its state there; {fix}"
    )
