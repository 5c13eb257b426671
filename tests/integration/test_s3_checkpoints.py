"""Checkpoints, epoch versions and RocksDB's shared files on a real S3 server (SeaweedFS).

The S3 endpoint and credentials are given only as the job's configuration (Flink's
``s3.*`` keys), never as environment variables of the test process: Spark's Python
workers get them from the job, which is what a cluster needs.
"""

from __future__ import annotations

from collections import Counter

import pytest

from streamstate.common import Types
from streamstate.datastream import (
    EmbeddedRocksDBStateBackend,
    ExternalizedCheckpointCleanup,
    HashMapStateBackend,
)
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.checkpoint.storage import load_metadata_from_path
from streamstate.runtime.state_reader import read_keyed_state
from streamstate.testing import FailOnce
from tests.integration.jobs import count_job, make_env, records

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("no_aws_environment")]

DATA = records(240, 17)
EXPECTED = dict(Counter(k for k, _ in DATA))


def backend(name, local_dir):
    if name == "hashmap":
        return HashMapStateBackend()
    b = EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True)
    b.set_db_storage_paths(str(local_dir))
    return b


def run_count(spark, seaweed, where, name, local_dir, failure=None, **conf):
    env = make_env(spark, epoch_records=30, **seaweed.configuration(), **conf)
    env.set_state_backend(backend(name, local_dir))
    env.enable_checkpointing(1)  # a checkpoint at every epoch
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(where)
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    sink = count_job(env, DATA, pre=failure)
    acc = env.execute(f"s3-count-{name}").get_all_accumulator_results()
    return sink.get_results(), acc


@pytest.mark.parametrize("name", ["hashmap", "rocksdb-incremental"])
def test_keyed_job_with_checkpoints_on_s3_is_exact_across_a_failure(spark, seaweed, tmp_path, name):
    bucket = seaweed.bucket()
    where = f"s3://{bucket}/checkpoints"
    fail = FailOnce(str(tmp_path), epoch=5, subtask=1, mode="exit", after_records=3)
    out, acc = run_count(spark, seaweed, where, name, tmp_path / "db", failure=fail)

    assert fail.fired and acc["restarts"] == 1
    # exactly once: every key's counts 1..n, each once
    for key, n in EXPECTED.items():
        assert sorted(c for k, c in out if k == key) == list(range(1, n + 1))
    assert len(out) == len(DATA)
    latest = acc["latest-checkpoint"]
    assert latest.startswith(f"s3://{bucket}/checkpoints/")
    state = read_keyed_state(latest, "counter", ValueStateDescriptor("count", Types.LONG()))
    assert state == EXPECTED

    fs = seaweed.filesystem()
    files = fs.find(bucket)
    # nothing temporary was ever written: objects are PUT under their final names
    assert not [f for f in files if f.endswith(".inprogress")]
    if name == "rocksdb-incremental":
        assert [f for f in files if "/shared/" in f], "incremental SSTs went to shared/"
    assert not seaweed.multipart_uploads(bucket)
    # the failed epoch's checkpoint left nothing: what is left is the retained checkpoint,
    # the files it names and the job directory's lock
    named = {h.path for h in load_metadata_from_path(latest).stream_handles()}
    for f in files:
        if "/shared/" in f:
            assert f"s3://{f}" in named, f
        elif "/chk-" in f:
            assert f.startswith(latest.removeprefix("s3://").rstrip("/") + "/"), f
        else:
            assert f.endswith("/_lock"), f
