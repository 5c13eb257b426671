"""The shared-storage probe (runtime/checkpoint/sharing.py): the driver's probe file seen
from this machine, and from a "machine" that has its own private copy of the path (a
mount namespace with a fresh tmpfs over the directory)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from streamstate.errors import StorageNotSharedError
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.memory import MemoryCheckpointStorageAccess
from streamstate.runtime.checkpoint.sharing import PROBE_NAME, check_shared, mark_shared

CHECK_IN_PRIVATE_COPY = """
import pickle, sys
from streamstate.runtime.checkpoint.sharing import check_shared
storage = pickle.loads(bytes.fromhex(sys.argv[1]))
try:
    check_shared(storage)
    print("shared")
except Exception as e:
    print(type(e).__name__, e)
"""


def _on_other_machine(storage, directory) -> str:
    """check_shared in a process that sees its own (empty) copy of ``directory``."""
    import pickle

    script = f'mount -t tmpfs tmpfs {directory} && exec {sys.executable} -c "$0" "$1"'
    got = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
        + [CHECK_IN_PRIVATE_COPY, pickle.dumps(storage).hex()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    return got.stdout.strip()


needs_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a private copy of a path needs root and unshare (a mount namespace)",
)


def test_the_same_machine_sees_the_probe(tmp_path):
    storage = MemoryCheckpointStorageAccess(working_dir=str(tmp_path))
    storage.initialize_job("job1")
    with pytest.raises(StorageNotSharedError):
        check_shared(storage)  # no probe written yet: nothing says the path is shared
    mark_shared(storage)
    assert (tmp_path / "job1" / "epochs" / PROBE_NAME).exists()
    check_shared(storage)


def test_workers_use_the_drivers_default_directory(tmp_path, monkeypatch):
    """The default epoch-state directory is resolved once, on the driver: a worker whose
    TMPDIR differs writes and probes where the driver does, not in its own temp dir."""
    import pickle
    import tempfile

    driver_tmp, worker_tmp = tmp_path / "driver", tmp_path / "worker"
    driver_tmp.mkdir()
    worker_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(driver_tmp))
    storage = MemoryCheckpointStorageAccess()
    storage.initialize_job("job2")
    mark_shared(storage)
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(worker_tmp))
        on_worker = pickle.loads(pickle.dumps(storage))
        check_shared(on_worker)
        handle = on_worker.write_epoch_state("0/v1-x", b"state")
        assert handle.path.startswith(f"file://{driver_tmp}/streamstate-{os.getuid()}/jobs/job2/")
        assert not list(worker_tmp.iterdir())
    finally:
        monkeypatch.setattr(tempfile, "tempdir", str(driver_tmp))
        storage.discard_all_epoch_state()
        storage.release_job()


def test_remote_storage_is_not_probed():
    storage = FileSystemCheckpointStorageAccess("memory://sharing-probe/chk")
    storage.initialize_job("job3")
    mark_shared(storage)
    check_shared(storage)  # another process, another memory:// file system: nothing probed


@needs_namespaces
def test_a_private_copy_of_the_default_directory_is_refused_naming_the_settings(tmp_path):
    storage = MemoryCheckpointStorageAccess(working_dir=str(tmp_path / "streamstate"))
    storage.initialize_job("job4")
    mark_shared(storage)
    said = _on_other_machine(storage, tmp_path)
    assert said.startswith("StorageNotSharedError")
    assert "execution.checkpointing.dir" in said and "execution.epoch.state-dir" in said


@needs_namespaces
def test_a_private_copy_of_a_checkpoint_directory_is_refused(tmp_path):
    storage = FileSystemCheckpointStorageAccess(f"file://{tmp_path}/chk")
    storage.initialize_job("job5")
    mark_shared(storage)
    check_shared(storage)
    said = _on_other_machine(storage, tmp_path)
    assert said.startswith("StorageNotSharedError")
    assert "checkpoint directory is a local path" in said and f"{tmp_path}/chk/job5" in said
