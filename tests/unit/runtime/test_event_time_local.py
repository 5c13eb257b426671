"""Timestamps, watermarks, side outputs and process-function timers on the in-process runner."""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

import pytest

from streamstate.common import Duration, Types, WatermarkStrategy
from streamstate.datastream import (
    ExternalizedCheckpointCleanup,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    TimeDomain,
)
from streamstate.datastream.connectors import CollectSink
from streamstate.datastream.state import MapStateDescriptor, ValueStateDescriptor
from streamstate.errors import ConfigurationError, JobExecutionError, StateAccessError
from streamstate.runtime.watermarks import MAX_WATERMARK, MIN_WATERMARK
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.event_time_jobs import (
    ALERTS_LATE,
    TagOdd,
    TemperatureJumpAlert,
    readings,
    readings_strategy,
)
from tests.support import envs

make_env = partial(envs.make_env, max_records=10, restarts=3)


def collect(ds) -> CollectSink:
    sink = CollectSink()
    ds.sink_to(sink)
    return sink


@pytest.fixture
def clock():
    """The driver clock: every reading advances 1 s."""
    with use_default_clock(TickingClock()) as c:
        yield c


def by_value(v: Any, record_timestamp: int) -> int:
    return int(v) * 10


# -- timestamps travel with records ------------------------------------------------------------


class SeeTimestamp(ProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timestamp()


class KeyedSeeTimestamp(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timestamp(), ctx.get_current_key()


def test_timestamps_survive_chains_and_shuffles():
    env = make_env(max_records=7)
    ds = (
        env.from_sequence(0, 59)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(by_value)
        )
        .map(lambda v: v + 1000)  # chained: the timestamp is the input's
        .filter(lambda v: v % 3)
        .flat_map(lambda v: [v, v])
        .rebalance()
        .process(SeeTimestamp())  # after a rebalance shuffle
        .key_by(lambda r: r[0] % 4)
        .process(KeyedSeeTimestamp())  # after a hash shuffle
    )
    sink = collect(ds)
    env.execute()
    out = sink.get_results()
    assert len(out) == 2 * len([v for v in range(60) if (v + 1000) % 3])
    for (v, ts1), ts2, key in out:
        assert ts1 == ts2 == (v - 1000) * 10
        assert key == v % 4


def test_untimestamped_stream_has_no_timestamps():
    env = make_env()
    sink = collect(env.from_collection([1, 2, 3]).key_by(lambda v: v).process(KeyedSeeTimestamp()))
    env.execute()
    assert sorted(sink.get_results()) == [(1, None, 1), (2, None, 2), (3, None, 3)]


def test_assigner_on_a_keyed_stream_and_timestamps_through_union():
    env = make_env()
    a = env.from_collection([1, 2]).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(by_value)
    )
    b = env.from_collection([7])  # no timestamps
    sink = collect(a.union(b).rebalance().process(SeeTimestamp()))
    env.execute()
    assert sorted(sink.get_results()) == [(1, 10), (2, 20), (7, None)]


# -- watermarks --------------------------------------------------------------------------------


class SeeWatermark(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timer_service().current_watermark()


def test_watermark_is_the_min_over_upstream_subtasks():
    # 2 readers: subtask 0 reads 0..49, subtask 1 reads 50..99, 10 per epoch each
    env = make_env(max_records=10)
    ds = (
        env.from_sequence(0, 99)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, t: v)
        )
        .key_by(lambda v: v % 3)
        .process(SeeWatermark())
    )
    sink = collect(ds)
    env.execute()
    out = sink.get_results()
    assert len(out) == 100
    for v, wm in out:
        epoch = (v % 50) // 10 + 1
        # end of epoch j: reader 0 saw up to 10j-1 (watermark 10j-2), reader 1 50 more
        expected = MIN_WATERMARK if epoch == 1 else 10 * (epoch - 1) - 2
        assert wm == expected, (v, wm)


def idle_job(env, idleness: bool):
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, t: v)
    if idleness:
        strategy = strategy.with_idleness(Duration.of_seconds(2))
    ds = (
        env.from_sequence(0, 99)
        .filter(lambda v: v < 50)  # reader 1 (50..99) sends nothing
        .assign_timestamps_and_watermarks(strategy)
        .key_by(lambda v: v % 3)
        .process(SeeWatermark())
    )
    return collect(ds)


@pytest.mark.parametrize("idleness", [False, True])
def test_idle_subtask_holds_the_watermark_back_unless_idleness(clock, idleness):
    env = make_env(max_records=10)
    sink = idle_job(env, idleness)
    env.execute()
    out = sorted(sink.get_results())
    assert [v for v, _ in out] == list(range(50))
    seen = {wm for _, wm in out}
    if idleness:
        # reader 1 goes idle after 2 s of driver time: reader 0 alone moves the watermark
        assert max(seen) > 10
        assert all(wm < v for v, wm in out)
    else:
        assert seen == {MIN_WATERMARK}


class AtEnd(KeyedProcessFunction):
    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(10**15)

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), timestamp, ctx.timer_service().current_watermark()


@pytest.mark.parametrize("checkpointing", [False, True])
def test_end_of_input_emits_the_final_watermark(checkpointing):
    env = make_env()
    if checkpointing:
        env.enable_checkpointing(60_000)
    # no watermark strategy at all: only the final watermark fires the timers
    sink = collect(env.from_collection(["a", "b", "a"]).key_by(lambda v: v).process(AtEnd()))
    env.execute()
    assert sorted(sink.get_results()) == [
        ("a", 10**15, MAX_WATERMARK),
        ("b", 10**15, MAX_WATERMARK),
    ]


# -- event-time timers -------------------------------------------------------------------------


class Timers(KeyedProcessFunction):
    """Registers timers at ts+15 and ts+15 again (deduplicated), deletes the one at ts+1."""

    def process_element(self, value, ctx):
        ts = ctx.timestamp()
        t = ctx.timer_service()
        t.register_event_time_timer(ts + 15)
        t.register_event_time_timer(ts + 15)
        t.register_event_time_timer(ts + 1)
        t.delete_event_time_timer(ts + 1)
        yield "el", value, ts

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() is TimeDomain.EVENT_TIME
        yield "timer", ctx.get_current_key(), timestamp, ctx.timestamp()


def test_event_time_timers_fire_in_order_once_deduplicated():
    env = make_env(max_records=4)
    data = [0, 10, 5, 20, 30, 25, 40, 50, 45, 60]
    ds = (
        env.from_collection(data)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(
                Duration.of_millis(5)
            ).with_timestamp_assigner(lambda v, t: v)
        )
        .key_by(lambda v: v % 2)
        .process(Timers())
    )
    sink = collect(ds)
    env.execute()
    out = sink.get_results()
    timers = [r for r in out if r[0] == "timer"]
    assert sorted(t[2] for t in timers) == sorted(v + 15 for v in data)
    for key in (0, 1):
        mine = [t[2] for t in timers if t[1] == key]
        assert mine == sorted(mine)  # timestamp order per key
    assert all(t[2] == t[3] for t in timers)  # ctx.timestamp() of a timer is its time
    # a timer never fires before the elements it depends on: its element came first
    pos = {(r[1], r[2]): i for i, r in enumerate(out)}
    for v in data:
        assert pos[(v % 2, v + 15)] > pos[(v, v)]


class ProcTimer(KeyedProcessFunction):
    def open(self, ctx):
        self.armed = ctx.get_state(ValueStateDescriptor("armed", Types.BOOLEAN()))

    def process_element(self, value, ctx):
        if not self.armed.value():
            self.armed.update(True)
            now = ctx.timer_service().current_processing_time()
            ctx.timer_service().register_processing_time_timer(now + 1500)

    def on_timer(self, timestamp, ctx):
        yield (
            ctx.get_current_key(),
            ctx.time_domain(),
            ctx.timer_service().current_processing_time() >= timestamp,
        )


def test_processing_time_timers_use_the_driver_clock(clock):
    env = make_env(max_records=2)
    sink = collect(
        env.from_collection(list(range(20))).key_by(lambda v: v % 2).process(ProcTimer())
    )
    env.execute()
    assert sorted(sink.get_results()) == [
        (0, TimeDomain.PROCESSING_TIME, True),
        (1, TimeDomain.PROCESSING_TIME, True),
    ]


def test_timers_need_a_keyed_stream():
    class SetTimer(ProcessFunction):
        def process_element(self, value, ctx):
            assert ctx.timer_service().current_watermark() == MIN_WATERMARK
            ctx.timer_service().register_event_time_timer(5)

    env = make_env()
    collect(env.from_collection([1]).process(SetTimer()))
    with pytest.raises(JobExecutionError) as ei:
        env.execute()
    assert "keyed stream" in str(ei.value.__cause__)
    assert isinstance(ei.value.__cause__, StateAccessError)


# -- side outputs ------------------------------------------------------------------------------


def test_side_outputs_chained_and_shuffled():
    env = make_env()
    main = env.from_sequence(0, 29).process(TagOdd())
    evens = collect(main)
    odds = collect(main.get_side_output(TagOdd.ODD).map(lambda v: ("odd", v)))  # chained
    fives = collect(
        main.get_side_output(TagOdd.FIVE).key_by(lambda v: v % 2).process(KeyedSeeTimestamp())
    )
    env.execute()
    assert sorted(evens.get_results()) == list(range(0, 30, 2))
    assert sorted(odds.get_results()) == [("odd", v) for v in range(1, 30, 2)]
    assert sorted(fives.get_results()) == [(v, None, v % 2) for v in range(0, 30, 5)]


def test_side_output_without_consumer_is_dropped_and_keeps_timestamps():
    env = make_env()
    main = (
        env.from_sequence(0, 9)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(by_value)
        )
        .process(TagOdd())
    )
    evens = collect(main)
    fives = collect(main.get_side_output(TagOdd.FIVE).rebalance().process(SeeTimestamp()))
    env.execute()
    assert sorted(evens.get_results()) == [0, 2, 4, 6, 8]  # "odd" has no consumer
    assert sorted(fives.get_results()) == [(0, 0), (5, 50)]


def test_get_side_output_needs_an_operator():
    env = make_env()
    with pytest.raises(ConfigurationError, match="result of an operator"):
        env.from_collection([1]).get_side_output(OutputTag("x"))
    with pytest.raises(ConfigurationError, match="OutputTag"):
        env.from_collection([1]).map(str).get_side_output("x")


# -- the alert state machine, failures, restore, rescale ----------------------------------------


def alert_job(env, data, fail=None):
    # one assigner subtask, chained to the collection source: every key sees its readings in
    # source order whatever the keyed operator's parallelism (the alerts depend on the order)
    ds = env.from_collection(data).assign_timestamps_and_watermarks(readings_strategy())
    ds.set_parallelism(1)
    if fail is not None:
        ds = ds.map(fail).name("inject")
        ds.set_parallelism(1)  # chained too: the same order as without it
    alerts = ds.key_by(lambda r: r[0]).process(TemperatureJumpAlert()).uid("alerts")
    return collect(alerts), collect(alerts.get_side_output(ALERTS_LATE))


DATA = readings(120)


@pytest.fixture(scope="module")
def alert_baseline():
    env = make_env(max_records=10)
    main, late = alert_job(env, DATA)
    env.execute()
    return main.get_results(), late.get_results()


def test_alert_state_machine(alert_baseline):
    out, late = alert_baseline
    alerts = [r for r in out if r[0] == "ALERT"]
    expired = [r for r in out if r[0] == "EXPIRED"]
    assert alerts and expired
    # every alert pairs two readings of its sensor <= 1 minute apart with a jump > 20
    for _, _s, t1, t2, diff in alerts:
        assert abs(t2 - t1) <= 60_000 and diff > 20
    # every sensor's last reading expires at the end (final watermark)
    last = {}
    for s, _, ts in DATA:
        last[s] = max(last.get(s, ts), ts)
    assert {r[1] for r in expired} == set(last)
    assert all(r[3] == "EVENT_TIME" for r in expired)
    # the readings are at most 4 s out of order, the bound is 5 s: nothing is late
    assert late == []


def test_late_readings_go_to_the_side_output():
    data = [("s1", 20.0, 100_000), ("s1", 20.0, 200_000), ("s1", 90.0, 1_000)]
    env = make_env(1, max_records=1)  # one assigner subtask: it sees every reading
    main, late = alert_job(env, data)
    env.execute()
    assert late.get_results() == [("s1", 1_000)]


@pytest.fixture
def rocksdb_dir():
    """RocksDB directories on tmpfs when there is one (each open syncs metadata files)."""
    import os
    import shutil
    import tempfile

    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    d = tempfile.mkdtemp(prefix="streamstate-et-rocksdb-", dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def use_backend(env, backend: str, rocksdb_dir: str) -> None:
    if backend == "rocksdb":
        from streamstate.datastream.state_backend import EmbeddedRocksDBStateBackend

        b = EmbeddedRocksDBStateBackend()
        b.set_db_storage_paths(rocksdb_dir)
        env.set_state_backend(b)


@pytest.mark.parametrize("epoch, backend", [(3, "hashmap"), (6, "hashmap"), (4, "rocksdb")])
def test_alerts_with_a_failure_equal_the_failure_free_run(
    tmp_path, clock, alert_baseline, epoch, backend, rocksdb_dir
):
    env = make_env(max_records=10)
    use_backend(env, backend, rocksdb_dir)
    env.enable_checkpointing(2500)  # every 2-3 epochs: the failure replays uncheckpointed epochs
    fail = FailOnce(str(tmp_path), epoch=epoch, subtask=0)
    main, late = alert_job(env, DATA, fail)
    result = env.execute()
    assert fail.fired and result.get_accumulator_result("restarts") == 1
    assert Counter(main.get_results()) == Counter(alert_baseline[0])
    assert late.get_results() == alert_baseline[1]


class WatermarkLog(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timer_service().current_watermark()


def test_watermarks_are_checkpointed_and_restored(tmp_path, clock):
    def job(env, fail=None):
        ds = (
            env.from_sequence(0, 79)
            .assign_timestamps_and_watermarks(
                WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
                    lambda v, t: v
                )
            )
            .uid("wm")
        )
        if fail is not None:
            ds = ds.map(fail)
        return collect(ds.key_by(lambda v: v % 5).process(WatermarkLog()).uid("log"))

    env = make_env(max_records=5)
    base = job(env)
    env.execute()
    env = make_env(max_records=5)
    env.enable_checkpointing(1)
    fail = FailOnce(str(tmp_path), epoch=5, subtask=1)
    failed = job(env, fail)
    env.execute()
    assert fail.fired
    # every element saw the same watermark as in the failure-free run: the restored
    # generators and operator watermarks continued where the checkpoint left them
    assert sorted(failed.get_results()) == sorted(base.get_results())
    assert any(wm > 0 for _, wm in base.get_results())


def test_checkpoint_metadata_holds_watermarks(tmp_path, clock):
    from streamstate.runtime.checkpoint.storage import load_metadata_from_path

    env = make_env(max_records=10)
    env.enable_checkpointing(1)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    alert_job(env, DATA)
    result = env.execute()
    path = result.get_accumulator_result("latest-checkpoint")
    md = load_metadata_from_path(path)
    wms = md.properties["watermarks"]
    assert wms["alerts"] == [{"wm": MAX_WATERMARK}, {"wm": MAX_WATERMARK}]
    gens = [v for v in wms.values() if any(s and "gen" in s for s in v)]
    assert len(gens) == 1  # the assigner: its generators' largest timestamps
    assert max(s["gen"]["max"] for s in gens[0]) == max(ts for _, _, ts in DATA)


@pytest.mark.parametrize(
    "parallelisms, backend", [((2, 3), "hashmap"), ((3, 1), "hashmap"), ((2, 3), "rocksdb")]
)
def test_timers_rescale_with_their_keys(
    tmp_path, clock, alert_baseline, parallelisms, backend, rocksdb_dir
):
    """Stop after a few epochs with a retained checkpoint, restore at another parallelism:
    pending timers (and the last readings) move with their key groups and fire there."""
    outputs = []
    restore = None
    for parallelism, max_epochs in [(parallelisms[0], 5), (parallelisms[1], None)]:
        env = make_env(
            parallelism, max_records=10, **{"execution.epoch.max-epochs": str(max_epochs or 0)}
        )
        use_backend(env, backend, rocksdb_dir)
        env.enable_checkpointing(1)
        cc = env.get_checkpoint_config()
        cc.set_checkpoint_storage_dir(str(tmp_path / "chk"))
        cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
        if restore is not None:
            env.set_restore_path(restore)
        main, late = alert_job(env, DATA)
        result = env.execute()
        outputs.append(main.get_results())
        restore = result.get_accumulator_result("latest-checkpoint")
    assert outputs[0] and outputs[1]
    merged = outputs[0] + outputs[1]
    assert Counter(merged) == Counter(alert_baseline[0])


# -- two-input process functions ----------------------------------------------------------------


class JoinWithTimeout(KeyedCoProcessFunction):
    """Orders (input 1) wait for their payment (input 2) until event time ts + 10; unpaid
    orders go to the ``unpaid`` side output when the timer fires."""

    UNPAID = OutputTag("unpaid")

    def open(self, ctx):
        self.order = ctx.get_state(ValueStateDescriptor("order", Types.PICKLED_BYTE_ARRAY()))
        self.paid = ctx.get_state(ValueStateDescriptor("paid", Types.BOOLEAN()))

    def process_element1(self, value, ctx):
        self.order.update((value, ctx.timestamp()))
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)

    def process_element2(self, value, ctx):
        self.paid.update(True)
        yield "paid", ctx.get_current_key(), ctx.timestamp()

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() is TimeDomain.EVENT_TIME
        order = self.order.value()
        if order is not None and not self.paid.value():
            ctx.output(self.UNPAID, (ctx.get_current_key(), timestamp, ctx.timestamp()))
        self.order.clear()


def test_keyed_co_process_timers_timestamps_and_side_outputs():
    env = make_env(1, max_records=3)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        lambda v, t: v[1]
    )
    orders = env.from_collection(
        [(f"o{i}", i * 5) for i in range(8)]
    ).assign_timestamps_and_watermarks(strategy)
    payments = env.from_collection([(f"o{i}", i * 5 + 2) for i in range(8) if i % 3 == 0])
    payments = payments.assign_timestamps_and_watermarks(strategy)
    joined = (
        orders.connect(payments).key_by(lambda o: o[0], lambda p: p[0]).process(JoinWithTimeout())
    )
    paid = collect(joined)
    unpaid = collect(joined.get_side_output(JoinWithTimeout.UNPAID))
    env.execute()
    assert sorted(paid.get_results()) == [("paid", f"o{i}", i * 5 + 2) for i in (0, 3, 6)]
    assert sorted(unpaid.get_results()) == sorted(
        (f"o{i}", i * 5 + 10, i * 5 + 10) for i in range(8) if i % 3
    )


def test_from_source_with_a_watermark_strategy():
    from streamstate.datastream.connectors.number_seq import NumberSequenceSource

    env = make_env(1, max_records=5)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(by_value)
    ds = env.from_source(NumberSequenceSource(0, 19), strategy, "numbers")
    sink = collect(ds.key_by(lambda v: v % 2).process(SeeWatermarkAndTimestamp()))
    plain = collect(
        env.from_source(NumberSequenceSource(0, 3), WatermarkStrategy.no_watermarks(), "plain")
        .key_by(lambda v: v)
        .process(SeeWatermarkAndTimestamp())
    )
    env.execute()
    out = sorted(sink.get_results())
    assert [ts for _, ts, _ in out] == [v * 10 for v in range(20)]
    # 5 records per epoch: epoch k's records see the watermark of the end of epoch k-1
    assert [wm for _, _, wm in out] == [MIN_WATERMARK] * 5 + [
        50 * (v // 5) - 11 for v in range(5, 20)
    ]
    # no_watermarks() without an assigner adds no operator: no timestamps
    assert sorted(plain.get_results()) == [(v, None, MIN_WATERMARK) for v in range(4)]


class SeeWatermarkAndTimestamp(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timestamp(), ctx.timer_service().current_watermark()


class ThresholdRules(KeyedBroadcastProcessFunction):
    """Broadcast side: thresholds per key; keyed side: a reading above its threshold goes to
    the ``high`` side output, and an event-time timer 5 ms later reports the key with the
    threshold seen (read-only broadcast state) from ``on_timer``."""

    RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())
    HIGH = OutputTag("high")

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(self.RULES).put(value[0], value[1])

    def process_element(self, value, ctx):
        limit = ctx.get_broadcast_state(self.RULES).get(value[0])
        if limit is not None and value[1] > limit:
            ctx.output(self.HIGH, (value[0], value[1], ctx.timestamp()))
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 5)

    def on_timer(self, timestamp, ctx):
        limit = ctx.get_broadcast_state(self.RULES).get(ctx.get_current_key())
        yield ctx.get_current_key(), timestamp, limit, ctx.time_domain().name


def test_keyed_broadcast_process_timers_and_side_outputs():
    env = make_env(1, max_records=4)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        lambda v, t: v[2]
    )
    readings_ = [("a", 5, 0), ("b", 50, 10), ("a", 30, 20), ("b", 70, 30)]
    rules = env.from_collection([("a", 10), ("b", 60)]).broadcast(ThresholdRules.RULES)
    ds = (
        env.from_collection(readings_)
        .assign_timestamps_and_watermarks(strategy)
        .key_by(lambda r: r[0])
        .connect(rules)
        .process(ThresholdRules())
    )
    main = collect(ds)
    high = collect(ds.get_side_output(ThresholdRules.HIGH))
    env.execute()
    assert sorted(high.get_results()) == [("a", 30, 20), ("b", 70, 30)]
    assert sorted(main.get_results()) == [
        ("a", 5, 10, "EVENT_TIME"),
        ("a", 25, 10, "EVENT_TIME"),
        ("b", 15, 60, "EVENT_TIME"),
        ("b", 35, 60, "EVENT_TIME"),
    ]
