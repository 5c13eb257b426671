"""Serving copies across new bases on Spark local[2]: with a checkpoint every epoch every
version is a new base, written with its bridge (the epoch's delta), so each copy is built
once and then moved epoch to epoch by applying the bridges; its answers equal the same
epoch's checkpoint read back with the state reader; in the driver's copies and in a
query host's (``query_host_stats``: its epoch and checkpoint copies)."""

from __future__ import annotations

import pytest

from streamstate.common import Types
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.errors import StateNotAvailableYetError
from streamstate.queryablestate import QueryableStateClient
from streamstate.runtime.job_status import JobObserver
from streamstate.runtime.queryable.query_host import query_host_stats
from streamstate.runtime.queryable.service import service_of
from streamstate.runtime.state_reader import read_keyed_state
from tests.support.envs import checkpoint_every_epoch, make_env
from tests.support.queryable import COUNT, QueryableCount, counts

pytestmark = pytest.mark.spark

KEYS = [f"k{i}" for i in range(16)]
RECORDS = [KEYS[(i * 3) % len(KEYS)] for i in range(48)]


class Probe(JobObserver):
    def __init__(self, chk_dir, hosts):
        self.chk_dir, self.hosts = chk_dir, hosts
        self.answers = []
        self.copies = []

    def on_epoch(self, job_id, stats):
        if stats.checkpoint_id is None:
            # the first periodic checkpoint is due an interval after the job starts: an
            # epoch planned within that millisecond has none (nothing to compare with)
            with (
                pytest.raises(StateNotAvailableYetError),
                QueryableStateClient.for_job(job_id) as c,
            ):
                c.get_kv_states(job_id, "counts", KEYS, Types.STRING(), COUNT, "checkpoint")
            return
        with QueryableStateClient.for_job(job_id) as c:
            by_epoch = c.get_kv_states(job_id, "counts", KEYS, Types.STRING(), COUNT, "epoch")
            by_chk = c.get_kv_states(job_id, "counts", KEYS, Types.STRING(), COUNT, "checkpoint")
        offline = read_keyed_state(
            f"{self.chk_dir}/{job_id}/chk-{by_chk.checkpoint_id}", "q", COUNT
        )
        if self.hosts:  # the query host's copies (both kinds of snapshot)
            st = query_host_stats(job_id)
            assert st is not None
            self.copies.append((st["copies"], st["builds"], st["bridged"]))
        else:
            cache = service_of(job_id).caches["epoch"]
            self.copies.append((len(cache), cache.builds, cache.bridged))
        self.answers.append(
            (by_epoch.epoch, by_chk.epoch, by_epoch.as_dict(), by_chk.as_dict(), offline)
        )


@pytest.mark.parametrize("hosts", [False, True], ids=["driver", "query-host"])
def test_copies_cross_every_new_base_by_its_bridge(spark, tmp_path, hosts):
    env = make_env(
        2,
        spark=spark,
        max_records=6,
        restarts=0,
        conf={"execution.runner.spark.subtask-hosts": str(hosts).lower()},
    )
    checkpoint_every_epoch(env, tmp_path / "chk", retain=True)
    probe = Probe(tmp_path / "chk", hosts)
    env.add_job_observer(probe)
    env.from_collection(RECORDS).key_by(lambda v: v, key_type=Types.STRING()).process(
        QueryableCount()
    ).uid("q").sink_to(CollectSink())
    env.execute("queryable-copies")
    assert len(probe.answers) >= len(RECORDS) // 6 - 1  # every epoch but maybe the first
    for epoch, chk_epoch, by_epoch, by_chk, offline in probe.answers:
        assert epoch == chk_epoch
        assert {k: v for k, v in by_epoch.items() if v} == offline == counts(RECORDS[: 6 * epoch])
        assert {k: v for k, v in by_chk.items() if v} == offline
    held, builds, bridged = probe.copies[-1]
    # every copy built once (its first lookup); every later base reached by its bridge (in
    # a query host, the checkpoint copies too: their lineages get the epoch's bridge)
    assert builds == held
    assert bridged >= held * (len(probe.answers) - 2)
