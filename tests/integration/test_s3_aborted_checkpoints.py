"""What an aborted checkpoint leaves in a real S3 server (SeaweedFS): nothing, and nothing
of the last good checkpoint is touched.

The coordinator aborts a checkpoint by deleting its files, but on a cluster more can be
left than it deletes: a subtask of the failed epoch that writes its state file after the
abort (Spark cancels tasks asynchronously), a writer that died in the middle of a
multipart upload (a state file or an SST above the single-PUT size), an SST uploaded to
``shared/`` for a checkpoint that never completed. Each is made here as a dying writer
would make it, on the real server, and must be gone once the next checkpoint completed
(or the job ended), while the retained checkpoints keep every object byte for byte.
"""

from __future__ import annotations

import pytest

from streamstate.runtime.checkpoint.coordinator import CheckpointCoordinator, RetentionPolicy
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.handles import KeyGroupsStateHandle
from streamstate.runtime.checkpoint.incremental import shared_file_name
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.stores import MIN_PART_SIZE, StorageOptions, store_for, url_to_fs

JOB = "job-aborts"
PARALLELISM = 2


@pytest.fixture
def s3(seaweed):
    """A fresh bucket, the server's options installed (as a job's configuration does)."""
    StorageOptions.from_configuration(seaweed.configuration()).install()
    yield seaweed.bucket()
    StorageOptions().install()


def write_subtasks(storage, checkpoint_id: int, pending=None) -> None:
    """Every subtask's state file of ``checkpoint_id`` and one SST in ``shared/`` each
    (acknowledged when ``pending`` is given)."""
    for i in range(PARALLELISM):
        keyed = storage.write_state(
            checkpoint_id, f"op-{i}-keyed", f"c{checkpoint_id}s{i}".encode()
        )
        shared = storage.write_shared_state(
            shared_file_name(f"op-{i}", "inst", checkpoint_id, "000009.sst"), b"sst" * 100
        )
        if pending is not None:
            rng = KeyGroupRange(i * 64, i * 64 + 63)
            handles = [KeyGroupsStateHandle(keyed, rng), KeyGroupsStateHandle(shared, rng)]
            pending.acknowledge("op", i, PARALLELISM, 128, keyed=handles)


def dead_upload(fs, path: str) -> str:
    """A multipart upload whose writer died after its first part."""
    store = store_for(fs)
    upload = store.start_upload(fs, path)
    store.upload_part(fs, path, upload, 1, b"p" * MIN_PART_SIZE)
    return upload


def keys(fs, bucket: str, prefix: str = "") -> list[str]:
    """The paths of the bucket's objects under ``prefix`` as the server lists them (no
    directories: SeaweedFS keeps an emptied one as a prefix, which is no object)."""
    out: list[str] = []
    more: dict[str, str] = {}
    while True:
        page = fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, **more)
        out += [f"{bucket}/{o['Key']}" for o in page.get("Contents") or []]
        if not page.get("IsTruncated"):
            return sorted(out)
        more = {"ContinuationToken": page["NextContinuationToken"]}


def objects(fs, bucket: str) -> dict[str, tuple[str, bytes]]:
    """Every object of the bucket: its ETag and bytes."""
    return {p: (fs.info(p)["ETag"], fs.cat_file(p)) for p in keys(fs, bucket)}


@pytest.mark.parametrize("retention", ["RETAIN_ON_CANCELLATION", "DELETE_ON_CANCELLATION"])
def test_an_aborted_checkpoint_leaves_nothing_and_the_good_one_is_untouched(s3, seaweed, retention):
    storage = FileSystemCheckpointStorageAccess(f"s3://{s3}/chk")
    storage.initialize_job(JOB)
    fs, job = url_to_fs(f"s3://{s3}/chk/{JOB}")
    coord = CheckpointCoordinator(
        storage, interval_ms=1, num_retained=1, retention=RetentionPolicy(retention)
    )
    try:
        good = coord.trigger()
        write_subtasks(storage, good.checkpoint_id, good)
        coord.complete(good)
        kept = objects(fs, s3)

        # checkpoint 2 fails mid-way: its files, an SST for it, a dead multipart upload
        failed = coord.trigger()
        write_subtasks(storage, failed.checkpoint_id)
        dead_upload(fs, f"{job}/chk-{failed.checkpoint_id}/op-1-keyed-big")
        coord.abort(failed, "the epoch carrying its barrier failed")
        assert keys(fs, s3, f"chk/{JOB}/chk-{failed.checkpoint_id}/") == []
        assert seaweed.multipart_uploads(s3) == []
        # ... then a subtask of the failed epoch writes once more, another dies mid-upload
        storage.write_state(failed.checkpoint_id, "op-0-keyed", b"late")
        dead_upload(fs, f"{job}/chk-{failed.checkpoint_id}/op-0-keyed-big")
        dead_upload(
            fs, f"{job}/shared/{shared_file_name('op-0', 'inst', failed.checkpoint_id, '7.sst')}"
        )
        # nothing of the good checkpoint was touched, byte for byte, and it still restores
        assert {p: v for p, v in objects(fs, s3).items() if p in kept} == kept
        assert coord.storage.load_metadata(good.checkpoint_id, verify=True).checkpoint_id == 1

        # the next checkpoint completes: whatever checkpoint 2 left is gone
        nxt = coord.trigger()
        write_subtasks(storage, nxt.checkpoint_id, nxt)
        coord.complete(nxt)
        left = [p.removeprefix(f"{job}/") for p in keys(fs, s3)]
        assert left == [
            "_lock",
            "chk-3/_metadata",
            "chk-3/op-0-keyed",
            "chk-3/op-1-keyed",
            "shared/op-0-inst-c3-000009.sst",
            "shared/op-1-inst-c3-000009.sst",
        ], left
        assert seaweed.multipart_uploads(s3) == []

        # the job ends while checkpoint 4 is in flight, and its subtasks leave the same
        last = coord.trigger()
        write_subtasks(storage, last.checkpoint_id)
        dead_upload(fs, f"{job}/chk-{last.checkpoint_id}/op-1-keyed-big")
        before_end = objects(fs, s3)
        coord.on_job_terminal(cancelled=False, failed=True)
        after_end = objects(fs, s3)
        # the retained checkpoint 3 and the files it names, as they were; nothing else
        assert after_end == {
            p: v for p, v in before_end.items() if "/chk-3/" in p or "-c3-" in p or "_lock" in p
        }
        assert seaweed.multipart_uploads(s3) == []
        assert storage.latest_valid_checkpoint().checkpoint_id == 3
    finally:
        storage.release_job()
