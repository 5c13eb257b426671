"""Savepoints on a real S3 server (SeaweedFS): written by a job on Spark local[2],
restored at another parallelism, read back as a DataFrame (State Processor API) and by the
CLI (`streamstate checkpoints`, `streamstate state`) in processes of their own. The
endpoint and credentials are the jobs' configuration (and the CLI's STREAMSTATE_CONF or
AWS_* environment), never the test process's environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

from streamstate.common import Types
from streamstate.datastream import ExternalizedCheckpointCleanup
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.checkpoint.storage import load_restore_point
from streamstate.state_processor import KeyedStateReaderFunction, SavepointReader
from streamstate.testing import TickingClock
from tests.integration.jobs import count_job, final_counts, records
from tests.support import envs
from tests.support.savepoints import stop_with_savepoint
from tests.support.seaweed import subprocess_environment

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("no_aws_environment")]

DATA = records(300, 11)
COUNT = ValueStateDescriptor("count", Types.LONG())


class CountReader(KeyedStateReaderFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(COUNT)

    def read_key(self, key: Any, ctx: Any, out: Any) -> Any:
        yield key, self.count.value()


def count_env(spark, seaweed, parallelism, checkpoints):
    env = envs.make_env(
        parallelism, spark=spark, max_records=25, restarts=0, conf=seaweed.configuration()
    )
    env.set_clock(TickingClock())
    envs.checkpoint_every_epoch(env, checkpoints, retain=True)
    return env


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "streamstate")
    return subprocess.run(
        [exe, *args],
        env=subprocess_environment(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_savepoint_on_s3_restores_at_another_parallelism_and_reads_back(spark, seaweed):
    bucket = seaweed.bucket()
    base = f"s3://{bucket}"
    first = count_env(spark, seaweed, 2, f"{base}/checkpoints")
    sink1 = count_job(first, DATA)
    savepoint = stop_with_savepoint(first, f"{base}/savepoints", at=4)
    assert savepoint.startswith(f"{base}/savepoints/")
    before = sink1.get_results()
    assert 0 < len(before) < len(DATA)

    second = count_env(spark, seaweed, 3, f"{base}/checkpoints")  # 2 -> 3
    second.set_restore_path(savepoint)
    sink2 = count_job(second, DATA)
    second.execute("restored-at-3")
    out = before + sink2.get_results()
    # every record exactly once over both runs: each key counted 1..n once
    for key, n in Counter(k for k, _ in DATA).items():
        assert sorted(c for k, c in out if k == key) == list(range(1, n + 1))

    # the savepoint's state, read back on Spark's executors from S3
    md, _ = load_restore_point(savepoint)
    upto = final_counts(before)  # stopped with the savepoint: its output is its state
    df = SavepointReader.read(spark, savepoint).read_keyed_state(
        "counter", CountReader(), output_type=Types.TUPLE([Types.STRING(), Types.LONG()])
    )
    assert dict(map(tuple, df.collect())) == dict(upto)

    # the CLI, a process of its own, with the Flink keys in STREAMSTATE_CONF
    conf = {"STREAMSTATE_CONF": json.dumps(seaweed.configuration())}
    listed = cli("checkpoints", f"{base}/checkpoints", "--json", env=conf)
    assert listed.returncode == 0, listed.stderr
    checkpoints = json.loads(listed.stdout)
    assert checkpoints and all(c["status"] == "valid" for c in checkpoints), checkpoints
    state = cli("state", savepoint, "--operator", "counter", "--state", "count", "--json", env=conf)
    assert state.returncode == 0, state.stderr
    rows = [json.loads(line) for line in state.stdout.splitlines()]
    assert {key: value for key, value in rows} == dict(upto)
    # or the AWS SDK's own environment variables
    by_env = cli("describe", savepoint, "--json", env=seaweed.environment())
    assert by_env.returncode == 0, by_env.stderr
    assert json.loads(by_env.stdout)["checkpoint_id"] == md.checkpoint_id
    # and without credentials: one line naming the settings, no traceback
    refused = cli("checkpoints", f"{base}/checkpoints", env={"AWS_ENDPOINT_URL": seaweed.endpoint})
    assert refused.returncode == 2
    assert "StoreAccessError" in refused.stderr and "s3.access-key" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_retained_checkpoint_on_s3_is_listed_and_verified(spark, seaweed):
    bucket = seaweed.bucket()
    env = count_env(spark, seaweed, 2, f"s3://{bucket}/checkpoints")
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(
        ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    )
    count_job(env, DATA)
    latest = env.execute("retained").get_all_accumulator_results()["latest-checkpoint"]
    fs = seaweed.filesystem()
    state_files = [f for f in fs.find(latest.removeprefix("s3://")) if not f.endswith("/_metadata")]
    conf = {"STREAMSTATE_CONF": json.dumps(seaweed.configuration())}
    listed = cli("checkpoints", f"s3://{bucket}/checkpoints", "--json", env=conf)
    assert listed.returncode == 0, listed.stderr
    assert {c["status"] for c in json.loads(listed.stdout)} == {"valid"}
    # a damaged state file shows as corrupt: the listing read and checked it
    assert state_files
    fs.pipe_file(state_files[0], b"damaged")
    damaged = cli("checkpoints", f"s3://{bucket}/checkpoints", "--json", env=conf)
    statuses = [c["status"] for c in json.loads(damaged.stdout)]
    assert "corrupt" in statuses, damaged.stdout
