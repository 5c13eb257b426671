"""Queryable state on the local runner: answers as of the last completed epoch/checkpoint."""

from __future__ import annotations

import pytest

from streamstate.common import Types
from streamstate.datastream import KeyedProcessFunction
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from streamstate.errors import (
    StateNotQueryableError,
    UnknownKvStateError,
    WrongKeyTypeError,
)
from streamstate.runtime.job_status import JobObserver
from streamstate.runtime.queryable.service import service_of
from streamstate.runtime.state_reader import read_keyed_state
from tests.support.envs import checkpoint_every_epoch, make_env

KEYS = [f"k{i}" for i in range(12)]
RECORDS = [(KEYS[i % len(KEYS)], i) for i in range(120)]


class AllKinds(KeyedProcessFunction):
    def open(self, ctx):
        count = ValueStateDescriptor("count", Types.LONG())
        count.set_queryable("counts")
        seen = ListStateDescriptor("seen", Types.LONG())
        seen.set_queryable("seen")
        by_n = MapStateDescriptor("by_n", Types.STRING(), Types.LONG())
        by_n.set_queryable("by_n")
        total = ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG())
        total.set_queryable("totals")
        self.count = ctx.get_state(count)
        self.seen = ctx.get_list_state(seen)
        self.by_n = ctx.get_map_state(by_n)
        self.total = ctx.get_reducing_state(total)
        self.hidden = ctx.get_state(ValueStateDescriptor("hidden"))

    def process_element(self, value, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        self.seen.add(value[1])
        self.by_n.put(f"n{c}", value[1])
        self.total.add(value[1])
        self.hidden.update(c)
        yield value[0], c


def model(records):
    """Every state of every key after ``records``."""
    out = {"counts": {}, "seen": {}, "by_n": {}, "totals": {}}
    for k, v in records:
        c = out["counts"].get(k, 0) + 1
        out["counts"][k] = c
        out["seen"].setdefault(k, []).append(v)
        out["by_n"].setdefault(k, {})[f"n{c}"] = v
        out["totals"][k] = out["totals"].get(k, 0) + v
    return out


class Probe(JobObserver):
    """Looks every key up after every epoch (on the driver, between epochs)."""

    def __init__(self, chk_dir=None):
        self.seen = []  # (as_of, epoch, checkpoint id, {name: {key: value}})
        self.chk_dir = chk_dir
        self.checkpoints = {}
        self.errors = []

    def on_epoch(self, job_id, stats):
        svc = service_of(job_id)
        for as_of in ("epoch", "checkpoint"):
            if svc.snapshot(as_of) is None:
                continue
            answers = {}
            for name in ("counts", "seen", "by_n", "totals"):
                ans = svc.lookup(name, KEYS, as_of=as_of)
                answers[name] = {
                    k: v for k, v in zip(KEYS, ans.values, strict=True) if v is not None
                }
            self.seen.append((as_of, ans.epoch, ans.checkpoint_id, answers))
            if as_of == "checkpoint" and self.chk_dir is not None:
                # the same checkpoint read back offline (it is subsumed by the next one)
                self.checkpoints[ans.checkpoint_id] = read_keyed_state(
                    f"{self.chk_dir}/{job_id}/chk-{ans.checkpoint_id}",
                    "counter",
                    ValueStateDescriptor("count", Types.LONG()),
                )
        for exc, call in (
            (StateNotQueryableError, lambda: svc.lookup("hidden", ["k1"])),
            (UnknownKvStateError, lambda: svc.lookup("nope", ["k1"])),
            (WrongKeyTypeError, lambda: svc.lookup("counts", ["k1"], kind="list")),
        ):
            with pytest.raises(exc):
                call()


def run(tmp_path, parallelism=2, backend=None, records=RECORDS, per_epoch=5, probe=None):
    keys = {"state_backend_type": backend} if backend else {}
    env = make_env(parallelism, max_records=per_epoch, rest_enabled="false", **keys)
    checkpoint_every_epoch(env, tmp_path / "chk")
    probe = probe or Probe(tmp_path / "chk")
    env.add_job_observer(probe)
    env.from_collection(records).key_by(lambda v: v[0]).process(AllKinds()).uid("counter").sink_to(
        CollectSink()
    )
    env.execute("queryable")
    return probe


@pytest.mark.parametrize(
    ("backend", "parallelism", "n"), [("hashmap", 1, 120), ("hashmap", 3, 120), ("rocksdb", 2, 40)]
)
def test_every_epoch_answers_its_own_cut(tmp_path, backend, parallelism, n):
    probe = run(tmp_path, parallelism, backend, records=RECORDS[:n])
    epochs = [s for s in probe.seen if s[0] == "epoch"]
    assert [e for _, e, _, _ in epochs] == list(range(1, len(epochs) + 1))
    assert len(epochs) >= n // 5
    for _, epoch, _, answers in epochs:
        # from_collection reads 5 records per epoch, in order
        assert answers == model(RECORDS[: min(n, 5 * epoch)])


def test_checkpoint_answers_match_the_state_reader(tmp_path):
    probe = run(tmp_path, 2, "hashmap")
    chks = [s for s in probe.seen if s[0] == "checkpoint"]
    assert chks
    for _, epoch, cid, answers in chks:
        assert cid is not None
        assert answers["counts"] == probe.checkpoints[cid]
        assert answers["counts"] == model(RECORDS[: 5 * epoch])["counts"]


class LastOf(JobObserver):
    def __init__(self, names):
        self.names = names
        self.last = {}

    def on_epoch(self, job_id, stats):
        svc = service_of(job_id)
        for name in self.names:
            self.last[name] = svc.lookup(name, KEYS[:4]).values


def test_as_queryable_state_value_and_reducing(tmp_path):
    env = make_env(2, rest_enabled="false")
    probe = LastOf(["latest", "sums"])
    env.add_job_observer(probe)
    records = [(KEYS[i % 3], i) for i in range(30)]
    keyed = env.from_collection(records).key_by(lambda v: v[0], key_type=Types.STRING())
    q = keyed.as_queryable_state("latest")
    assert q.get_queryable_state_name() == "latest"
    assert q.get_key_type() == Types.STRING()
    keyed.map(lambda v: v[1], output_type=Types.LONG()).key_by(
        lambda v: KEYS[v % 3], key_type=Types.STRING()
    ).as_queryable_state(
        "sums", ReducingStateDescriptor("sum", lambda a, b: a + b, Types.LONG())
    ).uid("sums")
    env.execute("as-queryable")
    last = {k: max(r for r in records if r[0] == k) for k in KEYS[:3]}
    assert probe.last["latest"] == [last["k0"], last["k1"], last["k2"], None]
    sums = [sum(v for k, v in records if k == key) for key in KEYS[:3]]
    assert probe.last["sums"] == [*sums, None]
    with pytest.raises(Exception, match="ValueStateDescriptor or a ReducingStateDescriptor"):
        keyed.as_queryable_state("x", ListStateDescriptor("x"))
