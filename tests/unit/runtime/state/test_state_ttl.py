"""State TTL on every keyed state primitive, with a fake clock (no Spark).

Every registered keyed backend runs the backend-level tests (the TTL wrappers
are backend-agnostic); strategies a backend lacks are skipped for it.
"""

from __future__ import annotations

import datetime
import pickle
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamstate.common.time import Duration, Time
from streamstate.common.typeinfo import Types
from streamstate.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from streamstate.errors import (
    ConfigurationError,
    StateAccessError,
    StateDescriptorConflictError,
)
from streamstate.runtime.checkpoint.handles import ByteStreamStateHandle, KeyGroupsStateHandle
from streamstate.runtime.keygroups import KeyGroupRange, compute_key_group_for_serialized_key
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.serializers.basic import LongSerializer, StringSerializer
from streamstate.runtime.serializers.registry import restore_serializer
from streamstate.runtime.serializers.ttl import TtlSerializer, TtlValue
from streamstate.runtime.state.registry import create_keyed_backend, registered_keyed_backends
from streamstate.runtime.state.ttl import TtlCleanupWarning
from streamstate.runtime.state.ttl_clock import (
    DriverTtlTimeProvider,
    EpochTtlTimeProvider,
    ManualTtlTimeProvider,
    SystemTtlTimeProvider,
    ttl_time_provider_from_configuration,
    ttl_time_provider_from_string,
)

MAX_P = 128
KEY_SER = PickleSerializer()
TTL = 100
UT = StateTtlConfig.UpdateType
SV = StateTtlConfig.StateVisibility


def kg(key: Any) -> int:
    return compute_key_group_for_serialized_key(KEY_SER.serialize(key), MAX_P)


class Backend:
    """A backend over every key group with a manual TTL clock."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.clock = ManualTtlTimeProvider(0)
        self.b = self.fresh()

    def fresh(self) -> Any:
        b = create_keyed_backend(
            self.name,
            operator_name="op",
            key_group_range=KeyGroupRange(0, MAX_P - 1),
            max_parallelism=MAX_P,
            key_serializer=KEY_SER,
        )
        b.ttl_time_provider = self.clock
        return b

    def key(self, k: Any) -> None:
        self.b.set_current_key(k, kg(k))

    def restored(self) -> Any:
        snap = self.b.snapshot()
        h = KeyGroupsStateHandle(
            ByteStreamStateHandle.of(snap.data),
            KeyGroupRange(0, MAX_P - 1),
            snap.offsets,
            snap.meta,
        )
        nb = self.fresh()
        nb.restore([h])
        return nb


@pytest.fixture(params=registered_keyed_backends())
def be(request: Any) -> Backend:
    backend = Backend(request.param)
    yield backend
    backend.b.dispose()


def cfg(
    update: Any = UT.OnCreateAndWrite, visibility: Any = SV.NeverReturnExpired, *extra: str
) -> StateTtlConfig:
    b = StateTtlConfig.new_builder(Time.milliseconds(TTL)).set_update_type(update)
    b.set_state_visibility(visibility)
    for e in extra:
        getattr(b, e)()
    return b.build()


def with_ttl(d: StateDescriptor, c: StateTtlConfig) -> StateDescriptor:
    d.enable_time_to_live(c)
    return d


class SumReduce:
    def reduce(self, a: Any, b: Any) -> Any:
        return a + b


class AvgAgg:
    """Accumulator [sum, count]; result sum/count."""

    def create_accumulator(self) -> Any:
        return [0, 0]

    def add(self, value: Any, acc: Any) -> Any:
        return [acc[0] + value, acc[1] + 1]

    def get_result(self, acc: Any) -> Any:
        return acc[0] / acc[1]

    def merge(self, a: Any, b: Any) -> Any:
        return [a[0] + b[0], a[1] + b[1]]


# kind -> (descriptor factory, write(state, v), read(state) -> user view or None)
PRIMITIVES: dict[str, tuple[Any, Any, Any]] = {
    "value": (
        lambda: ValueStateDescriptor("s", Types.LONG()),
        lambda s, v: s.update(v),
        lambda s: s.value(),
    ),
    "list": (
        lambda: ListStateDescriptor("s", Types.LONG()),
        lambda s, v: s.add(v),
        lambda s: (list(s.get()) or [None])[-1],
    ),
    "map": (
        lambda: MapStateDescriptor("s", Types.STRING(), Types.LONG()),
        lambda s, v: s.put("k", v),
        lambda s: s.get("k"),
    ),
    "reducing": (
        lambda: ReducingStateDescriptor("s", SumReduce(), Types.LONG()),
        lambda s, v: s.add(v),
        lambda s: s.get(),
    ),
    "aggregating": (
        lambda: AggregatingStateDescriptor("s", AvgAgg()),
        lambda s, v: s.add(v),
        lambda s: s.get(),
    ),
}


@pytest.mark.parametrize("kind", sorted(PRIMITIVES))
@pytest.mark.parametrize("update", [UT.OnCreateAndWrite, UT.OnReadAndWrite])
@pytest.mark.parametrize("visibility", [SV.NeverReturnExpired, SV.ReturnExpiredIfNotCleanedUp])
def test_expiry_per_primitive_update_type_and_visibility(
    be: Backend, kind: str, update: Any, visibility: Any
) -> None:
    make, write, read = PRIMITIVES[kind]
    s = be.b.get_partitioned_state(
        with_ttl(make(), cfg(update, visibility, "disable_cleanup_in_background"))
    )
    be.key("a")
    write(s, 4)
    be.clock.set(50)
    assert read(s) == 4  # alive; OnReadAndWrite re-stamps it at 50
    be.clock.set(120)  # past 0 + 100, before 50 + 100
    if update is UT.OnReadAndWrite:
        assert read(s) == 4
        be.clock.set(120 + TTL)  # exactly at expiry: expired (ts + ttl <= now)
    returned = read(s)
    if visibility is SV.ReturnExpiredIfNotCleanedUp:
        assert returned == 4  # the expired value, this one last time
    else:
        assert returned is None
    assert read(s) is None  # cleaned up by the read
    be.key("b")
    assert read(s) is None
    # a write after expiry starts afresh (an expired aggregate is not added to)
    be.key("a")
    write(s, 6)
    assert read(s) == 6


@pytest.mark.parametrize("visibility", [SV.NeverReturnExpired, SV.ReturnExpiredIfNotCleanedUp])
def test_list_elements_expire_independently(be: Backend, visibility: Any) -> None:
    s = be.b.get_partitioned_state(
        with_ttl(
            ListStateDescriptor("l"),
            cfg(UT.OnCreateAndWrite, visibility, "disable_cleanup_in_background"),
        )
    )
    be.key(1)
    s.add("a")
    be.clock.set(60)
    s.add_all(["b", "c"])
    be.clock.set(120)
    if visibility is SV.ReturnExpiredIfNotCleanedUp:
        assert list(s.get()) == ["a", "b", "c"]
    assert list(s.get()) == ["b", "c"]
    s.update(["x"])  # re-stamped at 120
    be.clock.set(219)
    assert list(s) == ["x"]
    be.clock.set(220)
    if visibility is SV.ReturnExpiredIfNotCleanedUp:
        assert list(s.get()) == ["x"]
    assert list(s.get()) == []
    with pytest.raises(ValueError):
        s.add(None)
    with pytest.raises(ValueError):
        s.update([1, None])


def test_list_on_read_and_write_restamps_only_unexpired(be: Backend) -> None:
    s = be.b.get_partitioned_state(with_ttl(ListStateDescriptor("l"), cfg(UT.OnReadAndWrite)))
    be.key(1)
    s.add("a")
    be.clock.set(60)
    s.add("b")
    be.clock.set(120)
    assert list(s.get()) == ["b"]  # "a" expired and is dropped; "b" re-stamped at 120
    be.clock.set(219)
    assert list(s.get()) == ["b"]  # re-stamped at 219
    be.clock.set(318)
    assert list(s.get()) == ["b"]


@pytest.mark.parametrize("update", [UT.OnCreateAndWrite, UT.OnReadAndWrite])
def test_map_entries_expire_independently(be: Backend, update: Any) -> None:
    s = be.b.get_partitioned_state(
        with_ttl(MapStateDescriptor("m", Types.STRING(), Types.LONG()), cfg(update))
    )
    be.key("k")
    s.put("a", 1)
    be.clock.set(60)
    s.put_all({"b": 2, "c": None})  # None user values are allowed with TTL
    be.clock.set(90)
    assert s.contains("a") and s.get("a") == 1
    be.clock.set(150)
    if update is UT.OnReadAndWrite:  # "a" was re-stamped at 90
        assert sorted(s.keys()) == ["a", "b", "c"]  # ... and now all at 150
        be.clock.set(249)
        assert s.get("a") == 1  # re-stamps "a" only
        be.clock.set(250)  # "b"/"c" (150) expired
        assert dict(s.items()) == {"a": 1}
        be.clock.set(1000)
        assert s.is_empty()
        return
    assert sorted(s.keys()) == ["b", "c"]
    assert not s.contains("a") and s.get("a") is None
    assert dict(s.items()) == {"b": 2, "c": None}
    assert sorted(s.values(), key=str) == [2, None]
    assert not s.is_empty()
    s.remove("b")
    be.clock.set(1000)
    assert s.is_empty()
    assert list(s) == []


def test_reducing_and_aggregating_drop_an_expired_aggregate(be: Backend) -> None:
    for visibility, want_sum, want_avg in (
        (SV.NeverReturnExpired, 5, 5.0),
        (SV.ReturnExpiredIfNotCleanedUp, 6, 3.0),
    ):
        r = be.b.get_partitioned_state(
            with_ttl(
                ReducingStateDescriptor(f"r{visibility.value}", SumReduce()),
                cfg(UT.OnCreateAndWrite, visibility, "disable_cleanup_in_background"),
            )
        )
        a = be.b.get_partitioned_state(
            with_ttl(
                AggregatingStateDescriptor(f"a{visibility.value}", AvgAgg()),
                cfg(UT.OnCreateAndWrite, visibility, "disable_cleanup_in_background"),
            )
        )
        be.clock.set(0)
        be.key("x")
        r.add(1)
        a.add(1)
        be.clock.set(150)
        r.add(5)  # the stored 1 expired: dropped unless ReturnExpiredIfNotCleanedUp
        a.add(5)
        assert r.get() == want_sum
        assert a.get() == want_avg
        r.add(None)  # clears, as without TTL
        a.clear()
        assert r.get() is None and a.get() is None


def test_ttl_state_survives_snapshot_and_restore_with_timestamps(be: Backend) -> None:
    c = cfg(UT.OnCreateAndWrite, SV.NeverReturnExpired, "disable_cleanup_in_background")
    descs = {k: with_ttl(PRIMITIVES[k][0](), c) for k in PRIMITIVES}
    for k, d in descs.items():
        s = be.b.get_partitioned_state(_renamed(d, k))
        be.key("a")
        PRIMITIVES[k][1](s, 3)
    be.clock.set(60)
    nb = be.restored()
    try:
        for k, d in descs.items():
            s = nb.get_partitioned_state(_renamed(d, k))
            nb.set_current_key("a", kg("a"))
            assert PRIMITIVES[k][2](s) == 3, k
            be.clock.set(100)  # written at 0: the restored timestamp still counts
            assert PRIMITIVES[k][2](s) is None, k
            be.clock.set(60)
    finally:
        nb.dispose()


def _renamed(d: StateDescriptor, name: str) -> StateDescriptor:
    args = list(d._ctor_args())
    args[0] = name
    out = type(d)(*args)
    c = d.get_ttl_config()
    if c is not None:
        out.enable_time_to_live(c)
    return out


def test_full_snapshot_cleanup_drops_expired_entries(be: Backend) -> None:
    c = cfg(
        UT.OnCreateAndWrite,
        SV.ReturnExpiredIfNotCleanedUp,
        "disable_cleanup_in_background",
        "cleanup_full_snapshot",
    )
    v = be.b.get_partitioned_state(with_ttl(ValueStateDescriptor("v"), c))
    lst = be.b.get_partitioned_state(with_ttl(ListStateDescriptor("l"), c))
    m = be.b.get_partitioned_state(with_ttl(MapStateDescriptor("m"), c))
    keep = be.b.get_partitioned_state(
        with_ttl(
            ValueStateDescriptor("keep"),
            cfg(
                UT.OnCreateAndWrite, SV.ReturnExpiredIfNotCleanedUp, "disable_cleanup_in_background"
            ),
        )
    )
    if be.b.state_entry_transformer("v") is None:
        pytest.skip(f"{be.name} cannot rewrite entries")
    for key in range(10):
        be.key(key)
        v.update(key)
        lst.add(key)
        m.put("old", key)
        keep.update(key)
    be.clock.set(50)
    for key in range(5):
        be.key(key)
        v.update(key * 10)
        lst.add(key * 10)
        m.put("new", key)
    be.clock.set(100)  # the writes at 0 expired, those at 50 did not
    nb = be.restored()
    try:
        v2 = nb.get_partitioned_state(with_ttl(ValueStateDescriptor("v"), c))
        l2 = nb.get_partitioned_state(with_ttl(ListStateDescriptor("l"), c))
        m2 = nb.get_partitioned_state(with_ttl(MapStateDescriptor("m"), c))
        assert sorted(nb.get_keys("v")) == list(range(5))
        assert sorted(nb.get_keys("keep")) == list(range(10))  # no full-snapshot cleanup
        for key in range(10):
            nb.set_current_key(key, kg(key))
            assert v2.value() == (key * 10 if key < 5 else None)
            assert list(l2.get()) == ([key * 10] if key < 5 else [])
            assert dict(m2.items()) == ({"new": key} if key < 5 else {})
    finally:
        nb.dispose()
    # the local state was cleaned too: a ReturnExpiredIfNotCleanedUp read finds nothing
    be.key(7)
    assert v.value() is None
    assert keep.value() == 7  # not cleaned: returned once more


def _incremental(be: Backend, name: str) -> bool:
    entries = be.b.state_entry_transformer(name)
    return entries is not None and entries.supports_incremental


def test_incremental_cleanup_on_access_and_per_record(be: Backend) -> None:
    c = (
        StateTtlConfig.new_builder(Time.milliseconds(TTL))
        .return_expired_if_not_cleaned_up()
        .cleanup_incrementally(3, True)
        .build()
    )
    s = be.b.get_partitioned_state(with_ttl(ValueStateDescriptor("v"), c))
    if not _incremental(be, "v"):
        pytest.skip(f"{be.name} has no incremental cleanup")
    keys = list(range(30))
    for k in keys:
        be.key(k)
        s.update(k)
    assert sorted(be.b.get_keys("v")) == keys
    be.clock.set(TTL)
    # every set_current_key checks 3 more entries (per-record cleanup)
    for i in range(5):
        be.key(1000 + i)
    left = len(list(be.b.get_keys("v")))
    assert 30 - 15 <= left < 30
    # every access checks 3 more, until all are gone
    be.key(1000)
    for _ in range(20):
        s.value()
    assert list(be.b.get_keys("v")) == []
    # a delta records the removals, so a rebuilt backend agrees
    delta = be.b.snapshot_delta()
    assert delta


def test_incremental_cleanup_reaches_restored_and_old_entries(be: Backend) -> None:
    # the cleanup skips work while nothing can have expired; restored entries (of unknown
    # age) and entries that age while the state is busy must still be reached
    c = StateTtlConfig.new_builder(TTL).cleanup_incrementally(5, False).build()
    s = be.b.get_partitioned_state(with_ttl(ValueStateDescriptor("v"), c))
    if not _incremental(be, "v"):
        pytest.skip(f"{be.name} has no incremental cleanup")
    for k in range(50):
        be.key(k)
        s.update(k)
    be.clock.set(10 * TTL)
    nb = be.restored()
    try:
        s2 = nb.get_partitioned_state(with_ttl(ValueStateDescriptor("v"), c))
        nb.set_current_key("new", kg("new"))
        s2.update(1)
        for _ in range(10):
            s2.value()
        # 51 entries, 11 accesses x 5 checks: every old entry was reached
        assert list(nb.get_keys("v")) == ["new"]
        # steady state: nothing expires, the cleanup has nothing to do...
        for k in range(40):
            nb.set_current_key(k, kg(k))
            s2.update(k)
        for _ in range(100):
            s2.value()
        assert len(list(nb.get_keys("v"))) == 41
        # ... until entries age: then every access checks entries again
        be.clock.advance(TTL)
        nb.set_current_key("newer", kg("newer"))
        s2.update(2)
        for _ in range(20):
            s2.value()
        assert list(nb.get_keys("v")) == ["newer"]
    finally:
        nb.dispose()


def test_incremental_cleanup_default_is_on_access_only(be: Backend) -> None:
    s = be.b.get_partitioned_state(
        with_ttl(ListStateDescriptor("l"), StateTtlConfig.new_builder(TTL).build())
    )
    if not _incremental(be, "l"):
        pytest.skip(f"{be.name} has no incremental cleanup")
    for k in range(20):
        be.key(k)
        s.add(k)
    be.clock.set(TTL)
    for i in range(10):
        be.key(500 + i)  # no per-record cleanup by default
    assert len(list(be.b.get_keys("l"))) == 20
    s.get()  # one access: 5 entries checked
    assert len(list(be.b.get_keys("l"))) == 15


def test_namespaced_ttl_state(be: Backend) -> None:
    s = be.b.get_partitioned_state(
        with_ttl(ListStateDescriptor("w"), cfg(UT.OnCreateAndWrite, SV.NeverReturnExpired))
    )
    probe = be.b.get_partitioned_state(ListStateDescriptor("probe"))
    try:
        probe.set_current_namespace(("window", 0))
    except (AttributeError, StateAccessError):
        pytest.skip(f"{be.name} states have no namespaces")
    be.key("k")
    s.set_current_namespace(("window", 1))
    s.add("a")
    be.clock.set(50)
    s.set_current_namespace(("window", 2))
    s.add("b")
    be.clock.set(120)
    assert list(s.get()) == ["b"]
    s.set_current_namespace(("window", 1))
    assert list(s.get()) == []


def test_disabled_update_type_means_no_ttl(be: Backend) -> None:
    d = ValueStateDescriptor("v", Types.LONG())
    d.enable_time_to_live(StateTtlConfig.new_builder(10).set_update_type(UT.Disabled).build())
    assert not d.has_ttl()
    s = be.b.get_partitioned_state(d)
    be.key("a")
    s.update(1)
    be.clock.set(10**9)
    assert s.value() == 1
    meta = be.b.snapshot().meta["states"][0]
    assert meta["value_serializer"]["name"] == "long"


@pytest.mark.parametrize("kind", sorted(PRIMITIVES))
def test_enabling_and_disabling_ttl_on_restore_migrates_the_state(be: Backend, kind: str) -> None:
    # Flink 2.x: TTL switched on or off across a restore migrates the state
    make, write, read = PRIMITIVES[kind]
    s = be.b.get_partitioned_state(make())  # no TTL
    be.key("a")
    write(s, 1)
    be.clock.set(5_000)
    nb = be.restored()
    ns = nb.get_partitioned_state(with_ttl(make(), cfg()))  # TTL enabled: stamped "now"
    nb.set_current_key("a", kg("a"))
    assert read(ns) == (1 if kind != "aggregating" else read(s))
    assert nb.snapshot().meta["states"][0]["value_serializer"]["name"] == "ttl"
    assert nb.migrated_entries == {"s": 1}
    be.clock.set(5_000 + 10_000)  # past the TTL of cfg() measured from the migration
    assert read(ns) is None or kind == "aggregating"
    nb.dispose()

    be.b.dispose()
    be.b = be.fresh()
    be.clock.set(0)
    s = be.b.get_partitioned_state(with_ttl(make(), cfg()))
    be.key("a")
    write(s, 1)
    nb = be.restored()
    ns = nb.get_partitioned_state(make())  # TTL disabled: the user values stay
    nb.set_current_key("a", kg("a"))
    assert read(ns) == read(s)
    assert nb.snapshot().meta["states"][0]["value_serializer"]["name"] != "ttl"
    nb.dispose()


def test_changing_only_the_ttl_duration_is_compatible_as_is(be: Backend) -> None:
    s = be.b.get_partitioned_state(with_ttl(ValueStateDescriptor("v", Types.LONG()), cfg()))
    be.key("a")
    s.update(7)
    nb = be.restored()
    longer = StateTtlConfig.new_builder(Duration.of_seconds(3600)).build()
    ns = nb.get_partitioned_state(with_ttl(ValueStateDescriptor("v", Types.LONG()), longer))
    nb.set_current_key("a", kg("a"))
    assert ns.value() == 7
    assert nb.migrated_entries == {}
    nb.dispose()


def test_same_name_with_and_without_ttl_conflicts(be: Backend) -> None:
    be.b.get_partitioned_state(ValueStateDescriptor("v"))
    with pytest.raises(StateDescriptorConflictError, match="(?i)ttl"):
        be.b.get_partitioned_state(with_ttl(ValueStateDescriptor("v"), cfg()))
    d1 = with_ttl(ValueStateDescriptor("w"), cfg())
    assert be.b.get_partitioned_state(d1) is be.b.get_partitioned_state(
        with_ttl(ValueStateDescriptor("w"), cfg())
    )


def test_compaction_filter_without_rocksdb_warns(be: Backend) -> None:
    c = StateTtlConfig.new_builder(TTL).cleanup_in_rocksdb_compact_filter(1000).build()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        be.b.get_partitioned_state(with_ttl(ValueStateDescriptor("v"), c))
    installed = not any(issubclass(w.category, TtlCleanupWarning) for w in caught)
    # a backend either installs the filter or says it cannot
    assert installed == be.b.configure_ttl_compaction_filter("v", c, be.clock)
    if be.name == "hashmap":
        assert not installed
        # the default background cleanup (no explicit strategy) does not warn
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            be.b.get_partitioned_state(
                with_ttl(ValueStateDescriptor("quiet"), StateTtlConfig.new_builder(TTL).build())
            )


def test_compaction_filter_cleans_at_snapshots_where_supported(be: Backend) -> None:
    c = (
        StateTtlConfig.new_builder(TTL)
        .return_expired_if_not_cleaned_up()
        .disable_cleanup_in_background()
        .cleanup_in_rocksdb_compact_filter(2)
        .build()
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        v = be.b.get_partitioned_state(with_ttl(ValueStateDescriptor("v"), c))
        m = be.b.get_partitioned_state(with_ttl(MapStateDescriptor("m"), c))
    if any(issubclass(w.category, TtlCleanupWarning) for w in caught):
        pytest.skip(f"{be.name} has no compaction filter")
    for key in range(10):
        be.key(key)
        v.update(key)
        m.put("old", key)
    be.clock.set(50)
    for key in range(3):
        be.key(key)
        v.update(-key)
        m.put("new", key)
    be.clock.set(TTL)
    nb = be.restored()  # the snapshot runs the filter
    try:
        assert sorted(nb.get_keys("v")) == [0, 1, 2]
        assert sorted(nb.get_keys("m")) == [0, 1, 2]
    finally:
        nb.dispose()
    be.key(7)  # cleaned locally too: ReturnExpiredIfNotCleanedUp finds nothing
    assert v.value() is None and m.get("old") is None
    be.key(1)
    assert v.value() == -1 and dict(m.items()) == {"new": 1}


# ------------------------------------------------------------------------------ config API


def test_builder_defaults_and_setters_mirror_pyflink() -> None:
    c = StateTtlConfig.new_builder(Time.seconds(1)).build()
    assert c.get_ttl() == Time.seconds(1)
    assert c.get_update_type() is UT.OnCreateAndWrite
    assert c.get_state_visibility() is SV.NeverReturnExpired
    assert c.get_ttl_time_characteristic() is StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
    assert c.is_enabled()
    cs = c.get_cleanup_strategies()
    assert cs.is_cleanup_in_background() and not cs.in_full_snapshot()
    inc = cs.get_incremental_cleanup_strategy()
    assert inc is not None and inc.get_cleanup_size() == 5
    assert not inc.run_cleanup_for_every_record()
    rc = cs.get_rocksdb_compact_filter_cleanup_strategy()
    assert rc is not None and rc.get_query_time_after_num_entries() == 1000
    assert rc.get_periodic_compaction_time() == Duration.of_days(30)

    c2 = (
        StateTtlConfig.new_builder(datetime.timedelta(minutes=1))
        .update_ttl_on_read_and_write()
        .return_expired_if_not_cleaned_up()
        .use_processing_time()
        .cleanup_full_snapshot()
        .cleanup_incrementally(10, True)
        .cleanup_in_rocksdb_compact_filter(50, Duration.of_hours(1))
        .disable_cleanup_in_background()
        .build()
    )
    assert c2.get_ttl() == Time.minutes(1)
    assert c2.get_update_type() is UT.OnReadAndWrite
    assert c2.get_state_visibility() is SV.ReturnExpiredIfNotCleanedUp
    cs2 = c2.get_cleanup_strategies()
    assert cs2.in_full_snapshot() and not cs2.is_cleanup_in_background()
    assert cs2.get_incremental_cleanup_strategy().get_cleanup_size() == 10  # type: ignore[union-attr]
    assert (
        cs2.get_rocksdb_compact_filter_cleanup_strategy().get_query_time_after_num_entries() == 50
    )  # type: ignore[union-attr]
    assert StateTtlConfig.new_builder(Duration.of_seconds(2)).build().get_ttl() == Time.seconds(2)
    off = StateTtlConfig.new_builder(1).disable_cleanup_in_background().build()
    assert off.get_cleanup_strategies().get_incremental_cleanup_strategy() is None
    assert off.get_cleanup_strategies().get_rocksdb_compact_filter_cleanup_strategy() is None
    assert StateTtlConfig.new_builder(5).set_ttl(Time.seconds(3)).build().get_ttl() == Time.seconds(
        3
    )
    assert repr(UT.OnReadAndWrite) == "<UpdateType.OnReadAndWrite: 2>"
    assert [m.value for m in UT] == [0, 1, 2]
    assert SV.ReturnExpiredIfNotCleanedUp.value == 0 and SV.NeverReturnExpired.value == 1


def test_config_values_are_immutable_comparable_and_picklable() -> None:
    a = StateTtlConfig.new_builder(1000).cleanup_incrementally(3, False).build()
    b = StateTtlConfig.new_builder(Time.seconds(1)).cleanup_incrementally(3, False).build()
    assert a == b and hash(a) == hash(b)
    assert a != StateTtlConfig.new_builder(1000).build()
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a._ttl = Time.seconds(2)  # type: ignore[misc]


@pytest.mark.parametrize(
    "build",
    [
        lambda: StateTtlConfig.new_builder(0),
        lambda: StateTtlConfig.new_builder(-5),
        lambda: StateTtlConfig.new_builder(1.5),
        lambda: StateTtlConfig.new_builder(1).cleanup_incrementally(0, False),
        lambda: StateTtlConfig.new_builder(1).cleanup_in_rocksdb_compact_filter(-1),
        lambda: StateTtlConfig.new_builder(1).set_update_type("OnReadAndWrite"),  # type: ignore[arg-type]
        lambda: StateTtlConfig.new_builder(1).set_state_visibility(1),  # type: ignore[arg-type]
    ],
)
def test_bad_config_is_a_configuration_error(build: Any) -> None:
    with pytest.raises(ConfigurationError):
        build()


def test_descriptor_with_ttl_stays_frozen_picklable_and_comparable() -> None:
    c = StateTtlConfig.new_builder(1000).build()
    d = ValueStateDescriptor("v", Types.LONG())
    assert d.get_ttl_config() is None and not d.has_ttl()
    d.enable_time_to_live(c)
    assert d.get_ttl_config() == c and d.has_ttl()
    with pytest.raises(AttributeError):
        d.name = "x"  # type: ignore[misc]
    for desc in (
        d,
        with_ttl(ListStateDescriptor("l", Types.STRING()), c),
        with_ttl(MapStateDescriptor("m", Types.STRING(), Types.LONG()), c),
        with_ttl(ReducingStateDescriptor("r", SumReduce()), c),
        with_ttl(AggregatingStateDescriptor("a", AvgAgg()), c),
    ):
        back = pickle.loads(pickle.dumps(desc))
        assert back == desc and back.get_ttl_config() == c
    assert d != ValueStateDescriptor("v", Types.LONG())
    with pytest.raises(TypeError, match="StateTtlConfig"):
        d.enable_time_to_live(1000)  # type: ignore[arg-type]
    assert "ttl=" in repr(d)


def test_public_exports() -> None:
    import streamstate.datastream as ds
    import streamstate.datastream.state as st_mod

    assert ds.StateTtlConfig is StateTtlConfig is st_mod.StateTtlConfig
    assert "StateTtlConfig" in ds.__all__ and "StateTtlConfig" in st_mod.__all__


# ----------------------------------------------------------------------------- clocks


def test_time_providers() -> None:
    e = ttl_time_provider_from_string("epoch:1000:250")
    assert isinstance(e, EpochTtlTimeProvider)
    mine = e.for_backend()
    assert mine is not e and mine == e
    mine.on_epoch(4)
    assert mine.current_timestamp() == 2000 and e.current_timestamp() == 1000
    assert ttl_time_provider_from_string("epoch") == EpochTtlTimeProvider(0, 1000)
    assert isinstance(ttl_time_provider_from_string("system"), SystemTtlTimeProvider)
    assert ttl_time_provider_from_configuration({}) == DriverTtlTimeProvider()
    d = ttl_time_provider_from_string("driver").for_backend()
    d.on_epoch(3, 123_456)
    assert d.current_timestamp() == 123_456
    d.on_epoch(4, None)  # no driver time: the wall clock at the epoch's start
    assert abs(d.current_timestamp() - SystemTtlTimeProvider().current_timestamp()) < 60_000
    assert ttl_time_provider_from_configuration(
        {"state.ttl.time-provider": "epoch:0:5"}
    ) == EpochTtlTimeProvider(0, 5)
    for bad in ("wall", "epoch:x", "epoch:1:2:3", "epoch:0:0"):
        with pytest.raises(ConfigurationError):
            ttl_time_provider_from_string(bad)
    assert pickle.loads(pickle.dumps(e)) == e
    m = ManualTtlTimeProvider(5)
    assert m.for_backend() is m
    m.advance(10)
    assert m.current_timestamp() == 15


# ------------------------------------------------------------------------ serializer

_USER = st.sampled_from(["pickle", "long", "string"])


def _user_ser(name: str) -> Any:
    return {"pickle": PickleSerializer(), "long": LongSerializer(), "string": StringSerializer()}[
        name
    ]


def _user_values(name: str) -> Any:
    if name == "long":
        return st.integers(-(2**63), 2**63 - 1)
    if name == "string":
        return st.text(max_size=20)
    return st.one_of(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3))


@settings(max_examples=200, deadline=None)
@given(data=st.data(), user=_USER)
def test_ttl_serializer_roundtrip(data: Any, user: str) -> None:
    ser = TtlSerializer(_user_ser(user))
    stamps = st.integers(-(2**63), 2**63 - 1)
    values = data.draw(
        st.lists(st.builds(TtlValue, st.one_of(st.none(), _user_values(user)), stamps), max_size=20)
    )
    assert ser.deserialize_many(ser.serialize_many(values)) == values
    for v in values:
        back = ser.deserialize(ser.serialize(v))
        assert back == v and isinstance(back, TtlValue)
    again = restore_serializer(ser.snapshot_configuration())
    assert isinstance(again, TtlSerializer) and again == ser
    assert again.deserialize_many(ser.serialize_many(values)) == values


def test_ttl_serializer_rejects_non_ttl_values() -> None:
    ser = TtlSerializer(LongSerializer())
    for bad in (5, (1, 2, 3), ("x", 1.5)):
        with pytest.raises(TypeError, match="TtlValue"):
            ser.serialize(bad)
