"""Query hosts on Spark local[2]: with subtask hosts on, lookups while the job runs are
answered by the query host on the executor machine, here forwarded by the driver (clients
with ``direct=False``; the direct path is in test_spark_query_direct.py; the driver builds
no serving copy),
equal the same epoch's checkpoint read back with the state reader, on heap and RocksDB;
with subtask hosts off the driver answers them, with the same values."""

from __future__ import annotations

import os
import signal

import pytest

from streamstate.common import Types
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.queryablestate import QueryableStateClient
from streamstate.runtime.job_status import JobObserver
from streamstate.runtime.queryable.query_host import query_host_pid
from streamstate.runtime.queryable.service import service_of
from streamstate.runtime.state_reader import read_keyed_state
from tests.support.envs import checkpoint_every_epoch, make_env
from tests.support.queryable import COUNT, QueryableCount, counts

pytestmark = pytest.mark.spark

KEYS = [f"k{i}" for i in range(12)]
RECORDS = [KEYS[(i * 5) % len(KEYS)] for i in range(36)]


class Probe(JobObserver):
    """At every epoch: both kinds of lookups, the checkpoint read back, the driver's copies."""

    def __init__(self, chk_dir, kill_at=None):
        self.chk_dir = chk_dir
        self.kill_at = kill_at
        self.answers = []
        self.driver_copies = []
        self.host_pids = []

    def on_epoch(self, job_id, stats):
        self.host_pids.append(query_host_pid(job_id))
        if stats.epoch == self.kill_at:  # the executor's query host is gone (lost executor)
            pid = query_host_pid(job_id)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
        if stats.checkpoint_id is None:
            # the first periodic checkpoint is due an interval after the job starts: an
            # epoch planned within that millisecond has none (nothing to compare with)
            return
        with QueryableStateClient.for_job(job_id, direct=False) as c:  # via the driver
            by_epoch = c.get_kv_states(job_id, "counts", KEYS, Types.STRING(), COUNT, "epoch")
            by_chk = c.get_kv_states(job_id, "counts", KEYS, Types.STRING(), COUNT, "checkpoint")
        offline = read_keyed_state(
            f"{self.chk_dir}/{job_id}/chk-{by_chk.checkpoint_id}", "q", COUNT
        )
        service = service_of(job_id)
        self.driver_copies.append(sum(len(c) for c in service.caches.values()))
        self.answers.append(
            (by_chk.epoch, by_epoch.epoch, by_epoch.as_dict(), by_chk.as_dict(), offline)
        )


def _run(spark, tmp_path, backend, hosts, kill_at=None):
    env = make_env(
        2,
        spark=spark,
        max_records=6,
        restarts=0,
        state_backend_type=backend,
        conf={
            "execution.runner.spark.subtask-hosts": hosts,
            "queryable-state.serve-on-executors": "true",
        },
    )
    checkpoint_every_epoch(env, tmp_path / "chk", retain=True)
    probe = Probe(tmp_path / "chk", kill_at)
    env.add_job_observer(probe)
    env.from_collection(RECORDS).key_by(lambda v: v, key_type=Types.STRING()).process(
        QueryableCount()
    ).uid("q").sink_to(CollectSink())
    result = env.execute(f"query-hosts-{backend}-{hosts}")
    assert len(probe.answers) >= len(RECORDS) // 6 - 1  # every epoch but maybe the first
    for chk_epoch, epoch, by_epoch, by_chk, offline in probe.answers:
        assert epoch == chk_epoch  # a checkpoint every epoch: the same cut
        want = counts(RECORDS[: 6 * epoch])
        assert {k: v for k, v in by_chk.items() if v} == want == offline, epoch
        assert {k: v for k, v in by_epoch.items() if v} == want, epoch
    return probe, result.get_all_accumulator_results()


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_query_hosts_answer_on_the_executor(spark, tmp_path, backend):
    probe, acc = _run(spark, tmp_path, backend, "true")
    n = len(probe.answers) * 2 * len(KEYS)
    assert acc.get("queryable_lookups_remote") == n
    assert acc.get("queryable_lookups_driver", 0) == 0
    assert probe.driver_copies == [0] * len(probe.answers)  # the driver holds no copy
    assert None not in probe.host_pids and len(set(probe.host_pids)) == 1  # one host, found
    assert acc.get("queryable_server_cpu_us", 0) > 0  # what the lookups cost the driver


def test_without_subtask_hosts_the_driver_answers(spark, tmp_path):
    probe, acc = _run(spark, tmp_path, "hashmap", "false")
    assert acc.get("queryable_lookups_driver") == len(probe.answers) * 2 * len(KEYS)
    assert acc.get("queryable_lookups_remote", 0) == 0
    assert probe.host_pids == [None] * len(probe.host_pids)  # no query host for this job
    assert max(probe.driver_copies) > 0


def test_a_lost_query_host_falls_back_to_the_driver(spark, tmp_path):
    """The query host dies after epoch 2: that epoch's lookups are answered by the driver
    (same values), the next epoch's acks name a new query host, which answers again."""
    probe, acc = _run(spark, tmp_path, "hashmap", "true", kill_at=2)
    assert acc.get("queryable_lookups_driver") == 2 * len(KEYS)
    assert acc.get("queryable_lookups_remote") == (len(probe.answers) - 1) * 2 * len(KEYS)
