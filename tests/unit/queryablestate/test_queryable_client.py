"""Queryable state through the query server and QueryableStateClient (local runner).

Lookups run while the job runs: from the driver between epochs (deterministic cuts to compare
with the same epoch's checkpoint), from another thread during epochs (consistency), across an
injected failure and across a rescale.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from streamstate.common import Types
from streamstate.common.job_status import JobStatus
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.control.registry import list_jobs
from streamstate.datastream import KeyedProcessFunction
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.datastream.state import ListStateDescriptor, ValueStateDescriptor
from streamstate.errors import (
    QueryableStateError,
    StateNotAvailableYetError,
    StateNotQueryableError,
    UnknownJobError,
    UnknownKvStateError,
    WrongKeyTypeError,
)
from streamstate.queryablestate import QueryableStateClient
from streamstate.runtime.job_status import JobObserver
from streamstate.runtime.queryable.service import service_of
from streamstate.runtime.state.registry import registered_keyed_backends
from streamstate.runtime.state_reader import read_keyed_state
from streamstate.testing import FailOnce
from tests.support.envs import checkpoint_every_epoch, make_env
from tests.support.queryable import COUNT, QueryableCount, counts

KEYS = [f"k{i}" for i in range(10)]


class Count(QueryableCount):
    def open(self, ctx):
        super().open(ctx)
        self.hidden = ctx.get_list_state(ListStateDescriptor("hidden"))


def env_for(tmp_path, parallelism=2, per_epoch=4, backend=None):
    keys = {"state_backend_type": backend} if backend else {}
    env = make_env(parallelism, max_records=per_epoch, **keys)
    return checkpoint_every_epoch(env, tmp_path / "chk", retain=True)


class ClientProbe(JobObserver):
    """Looks every key up over TCP after every epoch and reads the same checkpoint offline."""

    def __init__(self, chk_dir):
        self.chk_dir = chk_dir
        self.answers = []  # (as_of, epoch, {key: value}, offline read of that checkpoint)
        self.client = None
        self.errors_checked = False

    def on_epoch(self, job_id, stats):
        self.client = self.client or QueryableStateClient.for_job(job_id)
        for as_of in ("epoch", "checkpoint"):
            r = self.client.get_kv_states(job_id, "counts", KEYS, Types.STRING(), COUNT, as_of)
            got = {k: v for k, v in r.as_dict().items() if v is not None}
            offline = None
            if as_of == "checkpoint":
                offline = read_keyed_state(
                    f"{self.chk_dir}/{job_id}/chk-{r.checkpoint_id}", "counter", COUNT
                )
            self.answers.append((as_of, r.epoch, got, offline))
        if not self.errors_checked:
            self.check_errors(job_id)  # observers' exceptions are only logged: flag success
            self.errors_checked = True

    def check_errors(self, job_id):
        c = self.client
        one = c.get_kv_state(job_id, "counts", KEYS[0], Types.STRING(), COUNT)
        assert one.get() == one.value and one.epoch >= 1
        future = c.get_kv_state_async(job_id, "counts", KEYS[0], Types.STRING(), COUNT)
        assert future.result(30) == one
        with pytest.raises(UnknownJobError):
            c.get_kv_state("nojob", "counts", "k0", Types.STRING(), COUNT)
        with pytest.raises(UnknownKvStateError, match="queryable states: 'counts'"):
            c.get_kv_state(job_id, "nope", "k0", Types.STRING(), COUNT)
        with pytest.raises(StateNotQueryableError, match="set_queryable"):
            c.get_kv_state(job_id, "hidden", "k0", Types.STRING(), ListStateDescriptor("hidden"))
        with pytest.raises(WrongKeyTypeError, match="keyed by string"):
            c.get_kv_state(job_id, "counts", 7, Types.LONG(), COUNT)
        with pytest.raises(WrongKeyTypeError):
            c.get_kv_state(job_id, "counts", "k0", Types.LONG(), COUNT)  # not a long
        with pytest.raises(WrongKeyTypeError, match="descriptor is for list state"):
            c.get_kv_state(job_id, "counts", "k0", Types.STRING(), ListStateDescriptor("count"))
        check_http(job_id, one.epoch)
        check_cpu_accounted(c, job_id)
        bad = QueryableStateClient(c.host, c.port, token="wrong")
        with pytest.raises(QueryableStateError, match="not its token"):
            bad.get_kv_state(job_id, "counts", "k0", Types.STRING(), COUNT)
        bad.close()


def check_cpu_accounted(c, job_id):
    """Every answered request adds the CPU it cost the driver's query-server thread to the
    job metric ``queryable_server_cpu_us`` (added after the answer is sent: wait for it)."""
    stats = service_of(job_id).stats
    before = stats.get("queryable_server_cpu_us", 0)
    c.get_kv_states(job_id, "counts", KEYS, Types.STRING(), COUNT)
    deadline = time.monotonic() + 30
    while stats.get("queryable_server_cpu_us", 0) <= before:
        if time.monotonic() > deadline:  # a missing update, not a speed
            pytest.fail("the request's CPU was never accounted")
        time.sleep(0.001)


def http_get(url, token=None):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def check_http(job_id, epoch):
    """The control plane's route: token required, a batch of keys, typed statuses."""
    (rec,) = [r for r in list_jobs() if r.job_id == job_id]
    url = f"{rec.address}/jobs/{job_id}/state"
    assert http_get(f"{url}/counts?key=k0")[0] == 401
    status, doc = http_get(f"{url}/counts?key=k0&key=k7&key=zz", rec.token)
    assert status == 200 and doc["as_of"] == "epoch" and doc["epoch"] == epoch
    expected = counts(RECORDS[: 4 * epoch])
    assert doc["values"] == [{"key": k, "value": expected.get(k)} for k in ("k0", "k7", "zz")]
    assert http_get(f"{url}/nope?key=k0", rec.token)[0] == 404
    assert http_get(f"{url}/hidden?key=k0", rec.token)[0] == 400
    assert http_get(f"{url}/counts", rec.token)[0] == 400
    status, doc = http_get(f"{url}/counts?key=k0&as_of=checkpoint", rec.token)
    assert status == 200 and doc["checkpoint_id"] is not None


def keyed_job(env, records, probe, fail_dir=None):
    env.add_job_observer(probe)
    ds = env.from_collection(records)
    if fail_dir is not None:
        ds = ds.map(FailOnce(str(fail_dir), epoch=3))
    ds.key_by(lambda v: v, key_type=Types.STRING()).process(Count()).uid("counter").sink_to(
        CollectSink()
    )


RECORDS = [KEYS[(i * 7) % len(KEYS)] for i in range(48)]


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_lookups_match_the_same_epochs_checkpoint(tmp_path, backend):
    env = env_for(tmp_path, backend=backend)
    probe = ClientProbe(tmp_path / "chk")
    keyed_job(env, RECORDS if backend == "hashmap" else RECORDS[:24], probe)
    env.execute("queryable-client")
    assert probe.errors_checked
    n = len(RECORDS if backend == "hashmap" else RECORDS[:24])
    for as_of, epoch, got, offline in probe.answers:
        assert got == counts(RECORDS[: min(n, 4 * epoch)]), (as_of, epoch)
        if as_of == "checkpoint":
            assert got == offline  # the state reader on the same epoch's checkpoint
    assert {e for a, e, _, _ in probe.answers if a == "epoch"} >= set(range(1, n // 4 + 1))


class Transfer(KeyedProcessFunction):
    """Balances: every record adds its amount to its key's balance."""

    def open(self, ctx):
        d = ValueStateDescriptor("balance", Types.LONG())
        d.set_queryable("balances")
        self.balance = ctx.get_state(d)

    def process_element(self, value, ctx):
        self.balance.update((self.balance.value() or 0) + value[1])
        yield value


def test_a_batch_never_sees_a_torn_transfer(tmp_path):
    # every pair of records moves an amount from one key to another within one epoch
    # (epochs read 6 records: pairs never straddle two); the sum of both balances is 0
    pairs = [(("a", -i), ("c", i)) if i % 2 else (("c", -i), ("a", i)) for i in range(1, 121)]
    records = [r for p in pairs for r in p]
    env = env_for(tmp_path, parallelism=2, per_epoch=6)
    env.get_checkpoint_config().set_checkpoint_interval(10**9)  # epochs only
    seen, stop, box = [], threading.Event(), {}
    started, answered = threading.Event(), threading.Event()

    class Start(JobObserver):
        def on_epoch(self, job_id, stats):
            box["job"] = job_id
            started.set()
            if stats.epoch in (1, 20):
                # hold the job until lookups saw this epoch: answers span several epochs
                box["wait_for"] = stats.epoch
                answered.clear()
                answered.wait(60)

    env.add_job_observer(Start())
    env.from_collection(records).key_by(lambda v: v[0], key_type=Types.STRING()).process(
        Transfer()
    ).sink_to(CollectSink())
    client = env.execute_async("transfers")

    def query():
        started.wait(60)
        job = box["job"]
        q = QueryableStateClient.for_job(job)
        while not stop.is_set():
            try:
                r = q.get_kv_states(
                    job, "balances", ["a", "c"], Types.STRING(), ValueStateDescriptor("balance")
                )
            except (StateNotAvailableYetError, UnknownJobError, QueryableStateError):
                if stop.is_set() or client.get_job_status().result() != JobStatus.RUNNING:
                    break
                continue
            seen.append((r.epoch, r.values))
            if r.epoch >= box.get("wait_for", 0):
                answered.set()
        q.close()

    t = threading.Thread(target=query)
    t.start()
    client.get_job_execution_result().result()
    stop.set()
    t.join(60)
    assert {1, 20} <= {e for e, _ in seen}
    for epoch, (a, b) in seen:
        assert (a or 0) + (b or 0) == 0, (epoch, a, b)
    # the two keys live in different subtasks, so the check spans subtasks
    from streamstate.runtime.keygroups import assign_key_to_parallel_operator
    from streamstate.runtime.state.format.serializers import serializer_for_type_info

    ser = serializer_for_type_info(Types.STRING())
    owners = {assign_key_to_parallel_operator(ser.serialize(k), 128, 2) for k in "ac"}
    assert owners == {0, 1}


class RestartProbe(JobObserver):
    """Lookups right when the job restarts, and after every epoch."""

    def __init__(self):
        self.during_restart = []
        self.after_restore = []
        self.by_epoch = []
        self.restarted = False
        self.job_id = None

    def lookup(self, as_of):
        c = QueryableStateClient.for_job(self.job_id)
        try:
            return c.get_kv_states(self.job_id, "counts", KEYS, Types.STRING(), COUNT, as_of)
        finally:
            c.close()

    def on_status_change(self, job_id, status, timestamp_ms):
        self.job_id = job_id
        if status is JobStatus.RESTARTING:
            self.restarted = True
            with pytest.raises(StateNotAvailableYetError, match="restarting"):
                self.lookup("epoch")
            self.during_restart.append(self.lookup("checkpoint"))
        elif status is JobStatus.RUNNING and self.restarted:
            self.after_restore.append(self.lookup("epoch"))

    def on_epoch(self, job_id, stats):
        self.by_epoch.append(self.lookup("epoch"))


def present(r):
    return {k: v for k, v in r.as_dict().items() if v is not None}


def test_lookups_across_an_injected_failure(tmp_path):
    env = env_for(tmp_path)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 0))
    probe = RestartProbe()
    keyed_job(env, RECORDS, probe, fail_dir=tmp_path)
    env.execute("queryable-failure")
    assert probe.restarted
    (chk,) = probe.during_restart  # the last completed checkpoint answers during the restart
    assert chk.as_of == "checkpoint" and chk.epoch == 2
    assert present(chk) == counts(RECORDS[:8])
    (restored,) = probe.after_restore  # the restored cut answers at once
    assert restored.epoch == 2 and present(restored) == counts(RECORDS[:8])
    assert restored.attempt == 1
    for r in probe.by_epoch:  # never a value of the failed epoch, never a wrong one
        assert present(r) == counts(RECORDS[: 4 * r.epoch]), r.epoch


def test_lookups_across_a_rescale(tmp_path):
    env = env_for(tmp_path, parallelism=2)
    probe = RestartProbe()
    keyed_job(env, RECORDS[:24], probe)
    path = env.execute("before-rescale").get_accumulator_result("latest-checkpoint")
    more = RECORDS[:24] + [KEYS[i % 3] for i in range(12)]
    env2 = env_for(tmp_path, parallelism=3)
    env2.set_restore_path(path)
    probe2 = RestartProbe()
    probe2.restarted = True  # record the answer right after the restore
    keyed_job(env2, more, probe2)
    env2.execute("after-rescale")
    (restored,) = probe2.after_restore
    assert present(restored) == counts(RECORDS[:24])
    m = restored.epoch
    assert probe2.by_epoch
    for r in probe2.by_epoch:
        assert present(r) == counts(more[: 24 + 4 * (r.epoch - m)]), r.epoch
    assert present(probe2.by_epoch[-1]) == counts(more)


def test_the_server_is_bounded_and_refuses_garbage():
    from streamstate.errors import ServerBusyError
    from streamstate.runtime.queryable import wire
    from streamstate.runtime.queryable.server import QueryServer

    server = QueryServer("127.0.0.1", 0, max_connections=1, idle_timeout=0.3)
    try:
        client = QueryableStateClient(server.host, server.port, token="t")
        with pytest.raises(UnknownJobError):  # holds the only slot from now on
            client.get_kv_state("nojob", "counts", "k0", Types.STRING(), COUNT)
        other = QueryableStateClient(server.host, server.port, token="t")
        with pytest.raises(ServerBusyError, match="serves 1 connections"):
            other.get_kv_state("nojob", "counts", "k0", Types.STRING(), COUNT)
        client.close()
        other.close()
    finally:
        server.close()
    server = QueryServer("127.0.0.1", 0, max_connections=4, idle_timeout=0.3)
    try:
        # a connection that says nothing is closed after the idle time-out
        s = socket.create_connection((server.host, server.port), timeout=30)
        assert s.recv(1) == b""
        s.close()
        for payload, match in [
            (b"\x00\x00\x00\x05{nope", "not a queryable-state message"),
            (wire.encode({"v": 99, "job": "x"}), "wire version 99"),
            (wire.encode({}), "no earlier request"),
        ]:
            head, _ = wire.decode(server.handle(payload))
            assert not head["ok"] and match in head["message"]
        s = socket.create_connection((server.host, server.port), timeout=30)
        s.sendall((wire.MAX_FRAME + 1).to_bytes(4, "big"))  # too large: dropped unread
        assert s.recv(1) == b""
        s.close()
    finally:
        server.close()


def test_a_job_without_a_key_type_takes_any_key_type(tmp_path):
    """Keys of a job keyed without key_type are re-serialized with the default key
    serializer, whatever type the client names (as long as the key fits it)."""
    env = env_for(tmp_path, parallelism=2)
    got = {}

    class Probe(JobObserver):
        def on_epoch(self, job_id, stats):
            with QueryableStateClient.for_job(job_id) as c:
                try:  # the server never unpickles a client's key
                    c.get_kv_state(job_id, "counts", frozenset([1]), None, COUNT)
                except WrongKeyTypeError as e:
                    got["pickled"] = str(e)
                got[stats.epoch] = (
                    c.get_kv_states(job_id, "counts", ["k1", "k3"], Types.STRING(), COUNT),
                    c.get_kv_state(job_id, "counts", "k1", None, COUNT),
                    c.get_kv_state(job_id, "counts", 5, Types.LONG(), COUNT),
                )

    env.add_job_observer(Probe())
    env.from_collection(RECORDS[:16]).key_by(lambda v: v).process(Count()).uid("c").sink_to(
        CollectSink()
    )
    env.execute("default-key")
    assert "pickled" in got.pop("pickled")
    for epoch, (batch, one, other) in got.items():
        expected = counts(RECORDS[: min(16, 4 * epoch)])
        assert batch.values == [expected.get("k1"), expected.get("k3")]
        assert one.value == expected.get("k1") and other.value is None
