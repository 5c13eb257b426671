"""State TTL in whole jobs on the local runner (same task code as Spark, no Spark).

The probe job and its reference model live in ``tests/integration/ttl_jobs.py``
(shared with the Spark end-to-end test).
"""

from __future__ import annotations

from typing import Any

import pytest

from streamstate.cli.main import main
from streamstate.common import Configuration, Types
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.common.time import Time
from streamstate.datastream import (
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from streamstate.runtime.state.registry import registered_keyed_backends
from streamstate.runtime.state_reader import (
    describe_checkpoint,
    passthrough_descriptor,
    read_keyed_state,
)
from streamstate.testing import TickingClock, use_default_clock
from tests.integration.ttl_jobs import CLOCK, TtlProbe, events, model
from tests.support import envs


@pytest.fixture(autouse=True)
def checkpoint_every_epoch() -> Any:
    """The driver clock advances 1 s per reading: with a 1 ms interval every epoch checkpoints."""
    with use_default_clock(TickingClock()) as clock:
        yield clock


def make_env(tmp_path: Any, name: str, max_records: int = 4, **conf: str) -> Any:
    """Checkpoints every epoch (with the ticking clock), retained, deterministic TTL clock."""
    env = envs.make_env(max_records=max_records, conf={"state.ttl.time-provider": CLOCK, **conf})
    env.enable_checkpointing(1)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / name))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    return env


def run(env: Any, data: list[Any], fn: Any, uid: str = "probe") -> tuple[list[Any], str]:
    sink = CollectSink()
    env.from_collection(data).set_parallelism(1).key_by(lambda v: v[0]).process(fn).uid(
        uid
    ).sink_to(sink)
    result = env.execute("ttl-job")
    return sink.get_results(), result.get_accumulator_result("latest-checkpoint")


DATA = events(60, keys=3, burst=5)


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_probe_matches_the_model_with_and_without_lineage_rebuilds(
    tmp_path: Any, monkeypatch: Any, backend: str
) -> None:
    outs = []
    for drop in (False, True):
        env = make_env(
            tmp_path,
            f"probe-{backend}-{drop}",
            **{"execution.epoch.full-snapshot-interval": "3", "state.backend.type": backend},
        )
        envs.rebuild_instances(env, drop)
        out, _ = run(env, DATA, TtlProbe())
        want = model(out)
        for key, seq, _epoch, seen in out:
            assert dict(seen) == want[(key, seq)], (drop, key, seq)
        outs.append(sorted(out))
    # state rebuilt from its lineage each epoch (deltas carry TTL cleanups) behaves the same
    assert outs[0] == outs[1]
    # and the job saw expiry at all
    assert any(dict(s)["v_cw_never"] is None and dict(s)["v_cw_return"] for *_, s in outs[0])


class PrevValue(KeyedProcessFunction):
    """Emits the value state's previous value (TTL 3 s), then writes the element's."""

    def open(self, ctx: Any) -> None:
        d = ValueStateDescriptor("v", Types.LONG())
        d.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(3)).build())
        self.v = ctx.get_state(d)

    def process_element(self, value: Any, ctx: Any) -> Any:
        prev = self.v.value()
        self.v.update(value[1])
        yield value[0], value[1], prev


@pytest.mark.parametrize("clock", [None, "driver", "system"])
def test_default_clock_is_the_epochs_processing_time(tmp_path: Any, clock: Any) -> None:
    # the driver clock (patched) advances >= 1 s per epoch; the wall clock barely moves
    c = Configuration()
    c.set_string("execution.runner", "local")
    c.set_string("execution.epoch.max-records", "4")
    if clock is not None:
        c.set_string("state.ttl.time-provider", clock)
    env = StreamExecutionEnvironment.get_execution_environment(c)
    data = [("a", 1)] + [(f"x{i}", i) for i in range(24)] + [("a", 2)]
    sink = CollectSink()
    env.from_collection(data).set_parallelism(1).key_by(lambda v: v[0]).process(
        PrevValue()
    ).sink_to(sink)
    env.execute()
    (last,) = [r for r in sink.get_results() if r[:2] == ("a", 2)]
    # six epochs later: expired on the driver's epoch clock, alive on the wall clock
    assert last[2] == (1 if clock == "system" else None)


class AllKindsTtl(KeyedProcessFunction):
    """Every primitive with TTL (or without, ``ttl=None``); writes only."""

    def __init__(self, ttl: StateTtlConfig | None) -> None:
        self.ttl = ttl

    def _d(self, d: Any) -> Any:
        if self.ttl is not None:
            d.enable_time_to_live(self.ttl)
        return d

    def open(self, ctx: Any) -> None:
        self.v = ctx.get_state(self._d(ValueStateDescriptor("v", Types.LONG())))
        self.l = ctx.get_list_state(self._d(ListStateDescriptor("l", Types.LONG())))
        self.m = ctx.get_map_state(self._d(MapStateDescriptor("m", Types.LONG(), Types.LONG())))
        self.r = ctx.get_reducing_state(
            self._d(ReducingStateDescriptor("r", lambda a, b: a + b, Types.LONG()))
        )
        self.a = ctx.get_aggregating_state(self._d(AggregatingStateDescriptor("a", _Avg())))

    def process_element(self, value: Any, ctx: Any) -> Any:
        key, n = value
        self.v.update(n)
        self.l.add(n)
        self.m.put(n, n * 10)
        self.r.add(n)
        self.a.add(n)
        yield key


class _Avg:
    def create_accumulator(self) -> Any:
        return (0, 0)

    def add(self, value: Any, acc: Any) -> Any:
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc: Any) -> Any:
        return acc[0] / acc[1]

    def merge(self, a: Any, b: Any) -> Any:
        return (a[0] + b[0], a[1] + b[1])


ROWS = [("a", 1), ("b", 2), ("a", 3)]
TTL_LONG = StateTtlConfig.new_builder(Time.hours(1)).build()


def test_state_reader_and_cli_unwrap_ttl_state(tmp_path: Any, capsys: Any) -> None:
    _, chk = run(make_env(tmp_path, "kinds"), ROWS, AllKindsTtl(TTL_LONG), uid="kinds")
    expected = {
        "v": {"a": 3, "b": 2},
        "l": {"a": [1, 3], "b": [2]},
        "m": {"a": {1: 10, 3: 30}, "b": {2: 20}},
        "r": {"a": 4, "b": 2},
    }
    for name, want in expected.items():
        kind = {"v": "value", "l": "list", "m": "map", "r": "reducing"}[name]
        # the reader's descriptor may or may not carry TTL: values come back unwrapped
        assert read_keyed_state(chk, "kinds", passthrough_descriptor(name, kind)) == want
    with_ttl = AggregatingStateDescriptor("a", _Avg())
    with_ttl.enable_time_to_live(TTL_LONG)
    assert read_keyed_state(chk, "kinds", with_ttl) == {"a": 2.0, "b": 2.0}
    assert read_keyed_state(chk, "kinds", passthrough_descriptor("a", "aggregating")) == {
        "a": (4, 2),
        "b": (2, 1),
    }
    op = describe_checkpoint(chk)["operators"]["kinds"]
    assert op["ttl_states"] == ["a", "l", "m", "r", "v"]
    assert main(["describe", chk]) == 0
    assert "v (value, TTL)" in capsys.readouterr().out
    assert main(["state", chk, "-o", "kinds", "-n", "l"]) == 0
    out = capsys.readouterr().out
    assert "[1, 3]" in out and "TtlValue" not in out


@pytest.mark.parametrize("first,second", [(None, TTL_LONG), (TTL_LONG, None)])
def test_restoring_a_job_across_a_ttl_change_migrates_its_state(
    tmp_path: Any, first: Any, second: Any
) -> None:
    # Flink 2.x: enabling or disabling TTL on existing state migrates it on restore
    _, chk = run(make_env(tmp_path, "one"), ROWS, AllKindsTtl(first), uid="kinds")
    env = make_env(tmp_path, "two")
    env.set_restart_strategy(RestartStrategies.no_restart())
    env.set_restore_path(chk)
    _, chk2 = run(env, [], AllKindsTtl(second), uid="kinds")
    op = describe_checkpoint(chk2)["operators"]["kinds"]
    assert op["ttl_states"] == (["a", "l", "m", "r", "v"] if second is not None else [])
    assert read_keyed_state(chk2, "kinds", passthrough_descriptor("v", "value")) == {
        "a": 3,
        "b": 2,
    }


class ReadEarlyKeys(KeyedProcessFunction):
    """Writes key ``w*`` once early; the rest of the input only touches other keys."""

    def __init__(self, full_snapshot: bool) -> None:
        self.full_snapshot = full_snapshot

    def open(self, ctx: Any) -> None:
        b = (
            StateTtlConfig.new_builder(Time.milliseconds(2500))
            .return_expired_if_not_cleaned_up()
            .disable_cleanup_in_background()
        )
        if self.full_snapshot:
            b.cleanup_full_snapshot()
        d = ValueStateDescriptor("v", Types.LONG())
        d.enable_time_to_live(b.build())
        self.v = ctx.get_state(d)

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.v.update(value[1])
        yield value[0]


@pytest.mark.parametrize("full_snapshot", [False, True])
def test_full_snapshot_cleanup_in_a_job(tmp_path: Any, full_snapshot: bool) -> None:
    data = [(f"w{i}", i) for i in range(4)] + [(f"late{i % 2}", i) for i in range(40)]
    _, chk = run(
        make_env(tmp_path, f"fs-{full_snapshot}", max_records=4), data, ReadEarlyKeys(full_snapshot)
    )
    state = read_keyed_state(chk, "probe", ValueStateDescriptor("v", Types.LONG()))
    early = {k for k in state if k.startswith("w")}
    # written in epoch 1 (t = 1000), expired from t = 3500: gone from later checkpoints
    assert early == (set() if full_snapshot else {"w0", "w1", "w2", "w3"})
    assert {"late0", "late1"} <= set(state)
