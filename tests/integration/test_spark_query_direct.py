"""Direct lookups on Spark local[2]: the client asks the query host holding the keys, with
no driver hop (runtime/queryable/direct.py). Answers equal the same epoch's checkpoint read
back with the state reader; one client kept for the whole run follows the job across a
lost query host, an injected failure (restart) and a rescale (route fetched again), never
answering a wrong value; the typed errors are those of the driver path."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from streamstate.common import Types
from streamstate.common.job_status import JobStatus
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import KeyedProcessFunction
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.datastream.state import ListStateDescriptor, ValueStateDescriptor
from streamstate.errors import (
    QueryableStateError,
    StateNotAvailableYetError,
    UnknownJobError,
    UnknownKvStateError,
    WrongKeyTypeError,
)
from streamstate.queryablestate import QueryableStateClient
from streamstate.runtime.job_status import JobObserver
from streamstate.runtime.keygroups import assign_key_to_parallel_operator
from streamstate.runtime.queryable.query_host import _find_info
from streamstate.runtime.state.format.serializers import serializer_for_type_info
from streamstate.runtime.state_reader import read_keyed_state
from streamstate.testing import FailOnce
from tests.support.envs import checkpoint_every_epoch, make_env
from tests.support.queryable import COUNT, QueryableCount, counts

pytestmark = pytest.mark.spark

KEYS = [f"k{i}" for i in range(12)]
RECORDS = [KEYS[(i * 5) % len(KEYS)] for i in range(36)]
PER_EPOCH = 6


class Probe(JobObserver):
    """One client for the whole run; at every epoch both kinds of lookups (a batch and a
    single key), the checkpoint read back, what went directly to the query hosts."""

    def __init__(self, chk_dir, kill_at=None, client=None):
        self.chk_dir = chk_dir
        self.kill_at = kill_at
        self.client = client
        self.answers = []
        self.singles = []
        self.during_restart = []
        self.direct = []
        self.errors_checked = False

    def on_status_change(self, job_id, status, timestamp_ms):
        if status is JobStatus.RESTARTING and self.client is not None:
            with pytest.raises(StateNotAvailableYetError):
                self.client.get_kv_state(job_id, "counts", KEYS[0], Types.STRING(), COUNT)
            self.during_restart.append(
                self.client.get_kv_states(
                    job_id, "counts", KEYS, Types.STRING(), COUNT, "checkpoint"
                )
            )

    def on_epoch(self, job_id, stats):
        if stats.epoch == self.kill_at:  # the executor's query host is gone (lost executor)
            got = _find_info(job_id)  # the driver is no worker: any of the user's app dirs
            assert got is not None
            os.kill(got[0], signal.SIGKILL)
        if self.client is None:  # the token of each job from the registry (token=None)
            address = QueryableStateClient.for_job(job_id)
            self.client = QueryableStateClient(address.host, address.port)
        if stats.checkpoint_id is None:
            # the first periodic checkpoint is due an interval after the job starts: an
            # epoch planned within that millisecond has none (nothing to compare with)
            return
        c = self.client
        before = c._routes.direct_requests
        by_epoch = c.get_kv_states(job_id, "counts", KEYS, Types.STRING(), COUNT, "epoch")
        by_chk = c.get_kv_states(job_id, "counts", KEYS, Types.STRING(), COUNT, "checkpoint")
        one = c.get_kv_state(job_id, "counts", KEYS[1], Types.STRING(), COUNT)
        self.direct.append(c._routes.direct_requests - before)
        offline = read_keyed_state(
            f"{self.chk_dir}/{job_id}/chk-{by_chk.checkpoint_id}", "q", COUNT
        )
        self.answers.append(
            (by_chk.epoch, by_epoch.epoch, by_epoch.as_dict(), by_chk.as_dict(), offline)
        )
        self.singles.append((one.epoch, one.value))
        if not self.errors_checked:
            self.errors_checked = True
            check_errors(c, job_id)


def check_errors(c, job_id):
    """The typed errors of the driver path, from a client that has routes cached."""
    with pytest.raises(UnknownJobError):
        c.get_kv_state("nojob", "counts", "k0", Types.STRING(), COUNT)
    with pytest.raises(UnknownKvStateError, match="queryable states: 'counts'"):
        c.get_kv_state(job_id, "nope", "k0", Types.STRING(), COUNT)
    with pytest.raises(WrongKeyTypeError, match="keyed by string"):
        c.get_kv_state(job_id, "counts", 7, Types.LONG(), COUNT)
    with pytest.raises(WrongKeyTypeError, match="descriptor is for list state"):
        c.get_kv_state(job_id, "counts", "k0", Types.STRING(), ListStateDescriptor("count"))
    bad = QueryableStateClient(c.host, c.port, token="wrong")
    with pytest.raises(QueryableStateError, match="not its token"):
        bad.get_kv_state(job_id, "counts", "k0", Types.STRING(), COUNT)
    bad.close()


def _env(spark, tmp_path, backend="hashmap", parallelism=2, restarts=0, hosts="true"):
    env = make_env(
        parallelism,
        spark=spark,
        max_records=PER_EPOCH,
        restarts=restarts,
        state_backend_type=backend,
        conf={
            "execution.runner.spark.subtask-hosts": hosts,
            "queryable-state.serve-on-executors": "true",
        },
    )
    return checkpoint_every_epoch(env, tmp_path / "chk", retain=True)


def _job(env, records, probe, fail_dir=None):
    env.add_job_observer(probe)
    ds = env.from_collection(records)
    if fail_dir is not None:
        ds = ds.map(FailOnce(str(fail_dir), epoch=3))
    ds.key_by(lambda v: v, key_type=Types.STRING()).process(QueryableCount()).uid("q").sink_to(
        CollectSink()
    )


def _check(probe, records, first=0, offset=0):
    assert probe.answers
    for chk_epoch, epoch, by_epoch, by_chk, offline in probe.answers:
        assert epoch == chk_epoch  # a checkpoint every epoch: the same cut
        want = counts(records[: offset + PER_EPOCH * (epoch - first)])
        assert {k: v for k, v in by_chk.items() if v} == want == offline, epoch
        assert {k: v for k, v in by_epoch.items() if v} == want, epoch
    for epoch, value in probe.singles:
        assert value == counts(records[: offset + PER_EPOCH * (epoch - first)]).get(KEYS[1])


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_direct_lookups_skip_the_driver(spark, tmp_path, backend):
    env = _env(spark, tmp_path, backend)
    probe = Probe(tmp_path / "chk")
    _job(env, RECORDS, probe)
    acc = env.execute(f"direct-{backend}").get_all_accumulator_results()
    _check(probe, RECORDS)
    assert probe.errors_checked
    assert probe.direct == [3] * len(probe.answers)  # every request went to the query host
    # the driver neither forwarded nor read a key
    assert acc.get("queryable_lookups_remote", 0) == acc.get("queryable_lookups_driver", 0) == 0
    assert acc.get("queryable_requests_direct", 0) > 0  # counted by the host, told at pins
    probe.client.close()


def test_a_lost_query_host_is_routed_around(spark, tmp_path):
    """The query host dies after epoch 2: that epoch's lookups go through the driver (same
    values); the next epoch's acks name a new host, and the client's route finds it."""
    env = _env(spark, tmp_path)
    probe = Probe(tmp_path / "chk", kill_at=2)
    _job(env, RECORDS, probe)
    acc = env.execute("direct-lost-host").get_all_accumulator_results()
    _check(probe, RECORDS)
    assert probe.direct[1] == 0 and probe.direct[-1] == 3
    assert acc.get("queryable_lookups_driver", 0) > 0
    probe.client.close()


def test_one_client_across_a_restart_and_a_rescale(spark, tmp_path):
    env = _env(spark, tmp_path, restarts=1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 0))
    probe = Probe(tmp_path / "chk")
    _job(env, RECORDS[:24], probe, fail_dir=tmp_path)
    result = env.execute("direct-restart")
    assert len(probe.during_restart) == 1  # the last completed checkpoint answers meanwhile
    (chk,) = probe.during_restart
    assert chk.epoch == 2 and {k: v for k, v in chk.as_dict().items() if v} == counts(RECORDS[:12])
    _check(probe, RECORDS[:24])
    assert probe.direct[-1] == 3  # routed directly again after the restart

    # rescaled to 3 from its last checkpoint; the same client (its routes of the old job stay)
    more = RECORDS[:24] + [KEYS[i % 3] for i in range(12)]
    env2 = _env(spark, tmp_path, parallelism=3)
    env2.set_restore_path(result.get_accumulator_result("latest-checkpoint"))
    probe2 = Probe(tmp_path / "chk", client=probe.client)
    probe2.errors_checked = True
    _job(env2, more, probe2)
    env2.execute("direct-rescaled")
    m = min(e for _, e, _, _, _ in probe2.answers)
    _check(probe2, more, first=m - 1, offset=24)
    assert probe2.direct[-1] == 3
    probe.client.close()


def test_without_query_hosts_a_direct_client_asks_the_driver(spark, tmp_path):
    """Subtask hosts off (no query host): the route names none, every request goes through
    the driver, with the same answers."""
    env = _env(spark, tmp_path, hosts="false")
    probe = Probe(tmp_path / "chk")
    _job(env, RECORDS, probe)
    acc = env.execute("direct-no-hosts").get_all_accumulator_results()
    _check(probe, RECORDS)
    assert probe.direct == [0] * len(probe.answers)
    assert probe.client._routes.driver_requests >= 3 * len(probe.answers)
    assert acc.get("queryable_lookups_driver", 0) > 0
    probe.client.close()


class Transfer(KeyedProcessFunction):
    """Balances: every record adds its amount to its key's balance."""

    def open(self, ctx):
        d = ValueStateDescriptor("balance", Types.LONG())
        d.set_queryable("balances")
        self.balance = ctx.get_state(d)

    def process_element(self, value, ctx):
        self.balance.update((self.balance.value() or 0) + value[1])
        yield value


def test_direct_batches_never_see_a_torn_transfer(spark, tmp_path):
    """Every epoch moves amounts between keys "a" and "c" (in different subtasks; pairs
    never straddle two epochs): a client thread looking both up directly while epochs are
    published (pins move under it) always sees them sum to 0, and it did answer directly."""
    pairs = [(("a", -i), ("c", i)) if i % 2 else (("c", -i), ("a", i)) for i in range(1, 61)]
    records = [r for p in pairs for r in p]
    env = _env(spark, tmp_path)
    env.get_checkpoint_config().set_checkpoint_interval(10**9)  # epochs only
    seen, stop, box = [], threading.Event(), {}
    started = threading.Event()

    class Start(JobObserver):
        def on_epoch(self, job_id, stats):
            box["job"] = job_id
            started.set()
            time.sleep(0.05)  # room for lookups between publishes

    env.add_job_observer(Start())
    env.from_collection(records).key_by(lambda v: v[0], key_type=Types.STRING()).process(
        Transfer()
    ).uid("t").sink_to(CollectSink())
    job = env.execute_async("direct-transfers")

    def query():
        started.wait(120)
        q = QueryableStateClient.for_job(box["job"])
        desc = ValueStateDescriptor("balance", Types.LONG())
        while not stop.is_set():
            try:
                r = q.get_kv_states(box["job"], "balances", ["a", "c"], Types.STRING(), desc)
            except (StateNotAvailableYetError, QueryableStateError):
                if stop.is_set() or job.get_job_status().result() != JobStatus.RUNNING:
                    break
                continue
            seen.append((r.epoch, r.values))
        box["direct"] = q._routes.direct_requests
        q.close()

    t = threading.Thread(target=query)
    t.start()
    job.get_job_execution_result().result()
    stop.set()
    t.join(60)
    assert len({e for e, _ in seen}) > 1  # answers spanned several epochs
    for epoch, (a, c) in seen:
        assert (a or 0) + (c or 0) == 0, (epoch, a, c)
    assert box["direct"] > 0
    ser = serializer_for_type_info(Types.STRING())
    owners = {assign_key_to_parallel_operator(ser.serialize(k), 128, 2) for k in "ac"}
    assert owners == {0, 1}  # the check spans subtasks
