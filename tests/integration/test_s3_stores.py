"""The S3 store against a real S3 server (SeaweedFS): atomic writes without a rename,
write-once by conditional PUT, the job lock, typed errors naming the setting, multipart
uploads visible only when completed."""

from __future__ import annotations

import pytest

from streamstate.errors import CheckpointStorageError, StoreAccessError
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.stores import (
    MIN_PART_SIZE,
    MultipartUploads,
    StorageOptions,
    store_for,
    url_to_fs,
    write_atomic,
    write_once,
)


@pytest.fixture
def s3(seaweed):
    """A fresh bucket, the server's options installed (as a job's configuration does)."""
    StorageOptions.from_configuration(seaweed.configuration()).install()
    yield seaweed.bucket()
    StorageOptions().install()


def test_write_once_is_a_conditional_put_the_server_honours(s3):
    fs, root = url_to_fs(f"s3://{s3}/x")
    store = store_for(fs)
    assert store.honours_conditional_put(fs, f"{root}/_metadata")
    assert write_once(fs, f"{root}/_metadata", b"first")
    assert not write_once(fs, f"{root}/_metadata", b"second")
    assert fs.cat_file(f"{root}/_metadata") == b"first"
    write_atomic(fs, f"{root}/state", b"a" * 1000)
    write_atomic(fs, f"{root}/state", b"b")
    assert fs.cat_file(f"{root}/state") == b"b"
    # no temporary objects, no probe left behind
    assert sorted(fs.find(s3)) == [f"{root}/_metadata", f"{root}/state"]


def test_a_second_driver_of_one_job_directory_is_refused(s3):
    first = FileSystemCheckpointStorageAccess(f"s3://{s3}/chk")
    first.initialize_job("job-1")
    try:
        with pytest.raises(CheckpointStorageError, match="is in use by job 'job-1'"):
            FileSystemCheckpointStorageAccess(f"s3://{s3}/chk").initialize_job("job-1")
    finally:
        first.release_job()
    again = FileSystemCheckpointStorageAccess(f"s3://{s3}/chk")
    again.initialize_job("job-1")  # released: free again
    again.release_job()


def test_metadata_is_never_overwritten(s3):
    from streamstate.runtime.checkpoint.metadata import CheckpointMetadata

    access = FileSystemCheckpointStorageAccess(f"s3://{s3}/chk")
    access.initialize_job("job-2")
    try:
        md = CheckpointMetadata(job_id="job-2", checkpoint_id=1, timestamp_ms=1)
        access.store_metadata(md)
        with pytest.raises(CheckpointStorageError, match="exists already"):
            access.store_metadata(md)
        assert access.list_checkpoints() == [1]
    finally:
        access.release_job()


@pytest.mark.parametrize(
    "override, setting",
    [
        ({"s3.secret-key": "not-the-secret"}, "s3.secret-key"),
        ({"s3.access-key": "nobody"}, "s3.access-key"),
        ({"s3.endpoint": "http://127.0.0.1:9"}, "s3.endpoint"),
    ],
)
def test_wrong_settings_are_a_typed_error_naming_the_setting(seaweed, override, setting):
    bucket = seaweed.bucket()
    conf = {
        **seaweed.configuration(),
        **override,
        # fail fast against a closed port instead of retrying for half a minute
        "fsspec.s3.config_kwargs": '{"connect_timeout": 2, "retries": {"max_attempts": 1}}',
    }
    StorageOptions.from_configuration(conf).install()
    try:
        with pytest.raises(StoreAccessError, match=setting):
            FileSystemCheckpointStorageAccess(f"s3://{bucket}/chk").initialize_job("job-3")
    finally:
        StorageOptions().install()


def test_a_multipart_upload_is_invisible_until_completed_and_completing_is_idempotent(s3, seaweed):
    fs, root = url_to_fs(f"s3://{s3}/out")
    store = store_for(fs)
    assert isinstance(store, MultipartUploads)
    path = f"{root}/part-0"
    upload = store.start_upload(fs, path)
    etags = [
        store.upload_part(fs, path, upload, 1, b"x" * MIN_PART_SIZE),
        store.upload_part(fs, path, upload, 2, b"tail"),
    ]
    assert not fs.exists(path)
    assert store.list_uploads(fs, f"{root}/") == [(path, upload)]
    size = MIN_PART_SIZE + 4
    store.complete_upload(fs, path, upload, etags, size)
    store.complete_upload(fs, path, upload, etags, size)  # a repeated commit: no error
    assert fs.info(path)["size"] == size
    assert store.list_uploads(fs, f"{root}/") == []

    aborted = store.start_upload(fs, f"{root}/part-1")
    tag = store.upload_part(fs, f"{root}/part-1", aborted, 1, b"never")
    store.abort_upload(fs, f"{root}/part-1", aborted)
    store.abort_upload(fs, f"{root}/part-1", aborted)  # idempotent
    with pytest.raises(FileNotFoundError, match="aborted"):
        store.complete_upload(fs, f"{root}/part-1", aborted, [tag], 5)
    assert not fs.exists(f"{root}/part-1")
    assert not seaweed.multipart_uploads(s3)
