"""The FileSink and checkpoints on a real S3 server (SeaweedFS): parts are committed by
completing multipart uploads (no rename on an object store), ``_metadata`` is one
conditional PUT. A worker that dies in an epoch or right after uploading its parts
(Spark), and a driver SIGKILLed after the uploads, while ``_metadata`` is written, between
``_metadata`` and the commit, or in the middle of the commit (then ``streamstate run
--from-checkpoint``), leave exactly the failure-free output, the last good checkpoint
readable, no half-visible object, no open upload and no hidden object."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamstate.runtime.checkpoint.storage import load_metadata_from_path, load_restore_point
from streamstate.runtime.stores import StorageOptions
from streamstate.testing import TickingClock
from tests.faults import crash_job
from tests.faults.test_worker_crash import CRASH_EPOCH, RECORDS, exit_in_epoch
from tests.support import envs
from tests.support.seaweed import subprocess_environment

JOB = str(Path(__file__).with_name("crash_job.py"))
pytestmark = pytest.mark.usefixtures("no_aws_environment")


def committed_lines_s3(fs: Any, out: str) -> list[str]:
    lines: list[str] = []
    for path in sorted(fs.find(out)) if fs.exists(out) else []:
        if not path.rsplit("/", 1)[-1].startswith("."):
            lines += fs.cat_file(path).decode().splitlines()
    return sorted(lines)


def hidden_objects(fs: Any, prefix: str) -> list[str]:
    return [p for p in fs.find(prefix) if p.rsplit("/", 1)[-1].startswith(".")]


@pytest.mark.spark
@pytest.mark.parametrize("point", ["epoch", "after-upload"])
def test_worker_exit_with_output_and_checkpoints_on_s3_is_exact(spark, seaweed, tmp_path, point):
    bucket = seaweed.bucket()
    out = f"{bucket}/out"
    env = envs.make_env(2, spark=spark, max_records=10, restarts=2, conf=seaweed.configuration())
    env.set_clock(TickingClock())
    env.enable_checkpointing(2500)  # every 2-3 epochs: uploaded parts wait for one
    env.get_checkpoint_config().set_checkpoint_storage_dir(f"s3://{bucket}/chk")
    sink: Any = crash_job.file_sink_for(f"s3://{out}")
    fail = None
    if point == "epoch":
        fail = exit_in_epoch(tmp_path)
    else:  # right after its parts were uploaded, before the driver heard of them
        sink = crash_job.ExitAfterPreCommit(sink, str(tmp_path), CRASH_EPOCH)
    crash_job.build(env, "files", sink, fail, RECORDS)
    result = env.execute(f"s3-files-worker-exit-{point}")
    marker = "fail-once.failed" if fail else "file-sink-pre-commit.failed"
    assert (tmp_path / marker).exists()
    assert result.get_accumulator_result("restarts") == 1

    fs = seaweed.filesystem()
    assert committed_lines_s3(fs, out) == crash_job.expected_lines("files", RECORDS)
    assert hidden_objects(fs, out) == []
    assert seaweed.multipart_uploads(bucket) == []  # the dead attempt's were aborted


def _run(args: list[str], seaweed: Any, crash_at: str | None = None) -> Any:
    extra = {"STREAMSTATE_CONF": json.dumps(seaweed.configuration())}
    if crash_at:
        extra["CRASH_AT"] = crash_at
    env = subprocess_environment(extra)
    return subprocess.run(args, env=env, capture_output=True, timeout=180, check=False)


#: (point, occurrence): after a subtask uploaded its parts, while ``_metadata`` is written,
#: between ``_metadata`` and the commit, after the first completed upload of a commit
KILLS = [("pre-commit", 7), ("metadata-write", 2), ("after-metadata", 3), ("commit", 4)]


@pytest.mark.parametrize(("point", "n"), KILLS, ids=lambda x: str(x))
def test_driver_killed_mid_commit_then_restored_from_s3_is_exact(seaweed, point, n):
    bucket = seaweed.bucket()
    out, chk = f"s3://{bucket}/out", f"s3://{bucket}/chk"
    crashed = _run([sys.executable, JOB, "files", out, chk], seaweed, f"{point}:{n}")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr.decode()[-2000:]

    StorageOptions.from_configuration(seaweed.configuration()).install()
    try:
        fs = seaweed.filesystem()
        # every _metadata there is whole: the last good checkpoint loads and verifies
        metadata = [p for p in fs.find(f"{bucket}/chk") if p.endswith("/_metadata")]
        assert metadata, "the kill points come after the first completed checkpoint"
        for path in metadata:
            load_metadata_from_path(f"s3://{path}", verify=True)
        last_good, _ = load_restore_point(chk)
        assert last_good.checkpoint_id >= 1
        if point == "after-metadata":
            # the checkpoint completed, its parts uploaded but not completed: invisible
            uploads = seaweed.multipart_uploads(bucket)
            assert uploads
            assert not [u for u in uploads if fs.exists(f"{bucket}/{u['Key']}")]
    finally:
        StorageOptions().install()

    cli = os.path.join(os.path.dirname(sys.executable), "streamstate")
    restored = _run([cli, "run", "--from-checkpoint", chk, JOB, "files", out, chk], seaweed)
    assert restored.returncode == 0, restored.stderr.decode()[-3000:]
    assert committed_lines_s3(fs, f"{bucket}/out") == crash_job.expected_lines("files")
    assert hidden_objects(fs, f"{bucket}/out") == []
    assert seaweed.multipart_uploads(bucket) == []
