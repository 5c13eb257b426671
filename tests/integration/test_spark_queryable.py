"""Queryable state on Spark local[2] (subtask hosts on): lookups over TCP while the job runs
match the model and the same epoch's checkpoint read back with the state reader, on heap and
RocksDB, and answers stay right across an injected failure (FailOnce)."""

from __future__ import annotations

import pytest

from streamstate.common import Types
from streamstate.common.job_status import JobStatus
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.errors import StateNotAvailableYetError
from streamstate.queryablestate import QueryableStateClient
from streamstate.runtime.job_status import JobObserver
from streamstate.runtime.state_reader import read_keyed_state
from streamstate.testing import FailOnce
from tests.support.envs import checkpoint_every_epoch, make_env
from tests.support.queryable import COUNT, QueryableCount, counts
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()

KEYS = [f"k{i}" for i in range(10)]
RECORDS = [KEYS[(i * 7) % len(KEYS)] for i in range(40)]


class Probe(JobObserver):
    def __init__(self, chk_dir):
        self.chk_dir = chk_dir
        self.answers = []
        self.restarting = []

    def lookup(self, job_id, as_of):
        with QueryableStateClient.for_job(job_id) as c:
            return c.get_kv_states(job_id, "counts", KEYS, Types.STRING(), COUNT, as_of)

    def on_status_change(self, job_id, status, timestamp_ms):
        if status is JobStatus.RESTARTING:
            try:
                self.lookup(job_id, "epoch")
                self.restarting.append("answered")
            except StateNotAvailableYetError:
                self.restarting.append("not available yet")

    def on_epoch(self, job_id, stats):
        if stats.checkpoint_id is None:
            # the first periodic checkpoint is due an interval after the job starts: an
            # epoch planned within that millisecond has none (nothing to compare with)
            return
        r = self.lookup(job_id, "checkpoint")
        offline = read_keyed_state(f"{self.chk_dir}/{job_id}/chk-{r.checkpoint_id}", "q", COUNT)
        self.answers.append((r.epoch, {k: v for k, v in r.as_dict().items() if v}, offline))


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_lookups_on_spark_match_the_checkpoint(spark, tmp_path, backend):
    env = make_env(2, spark=spark, max_records=8, restarts=2, state_backend_type=backend)
    checkpoint_every_epoch(env, tmp_path / "chk")
    probe = Probe(tmp_path / "chk")
    env.add_job_observer(probe)
    env.from_collection(RECORDS).map(FailOnce(str(tmp_path), epoch=3)).key_by(
        lambda v: v, key_type=Types.STRING()
    ).process(QueryableCount()).uid("q").sink_to(CollectSink())
    env.execute("queryable-spark")
    assert probe.restarting == ["not available yet"]
    assert len(probe.answers) >= len(RECORDS) // 8 - 1  # every epoch but maybe the first
    for epoch, got, offline in probe.answers:
        assert got == counts(RECORDS[: 8 * epoch]) == offline, epoch
