"""Queryable heap state answered from the version files themselves (``queryable/search.py``):
for keys of an integer type, a lookup searches the lineage's deltas newest first, then the
base's section, without a serving copy. Its answers must equal a serving copy's and the
state the subtask committed, for every state kind, with tombstones, TTL, full versions,
checkpoints and a rescaled base; key types it cannot search fall back to the copies."""

from __future__ import annotations

import functools
import json
import pickle
import shutil
import struct
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamstate.common import Time, Types
from streamstate.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from streamstate.errors import CorruptCheckpointError
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.handles import (
    ByteStreamStateHandle,
    KeyGroupsStateHandle,
)
from streamstate.runtime.keygroups import (
    compute_key_group_for_serialized_key,
    compute_key_group_range_for_operator_index,
)
from streamstate.runtime.protocol import EpochSpec, Lineage, SubtaskAck
from streamstate.runtime.queryable.feature import QueryableStage, keeps_copies
from streamstate.runtime.queryable.serving import (
    QueryableOperator,
    ServingCache,
    ServingSnapshot,
)
from streamstate.runtime.serializers.registry import serializer_for
from streamstate.runtime.state.format import keyed_index
from streamstate.runtime.state.format.keyed_index import INDEX_AFTER, Block, find_key
from streamstate.runtime.state.registry import create_keyed_backend
from streamstate.runtime.state.ttl_clock import ManualTtlTimeProvider
from streamstate.runtime.versions import StateVersions, commit_keyed_state
from tests.support.backends import AvgAgg

MAX_P = 16
LONG = serializer_for(Types.LONG())
KEYS = list(range(-20, 40))

#: what a worker of a job with queryable state asks of a full version (features.bridged)
BRIDGED = functools.partial(keeps_copies, QueryableStage())


def descriptors() -> dict[str, Any]:
    ttl = StateTtlConfig.new_builder(Time.milliseconds(10_000)).build()
    with_ttl = ValueStateDescriptor("t", Types.LONG())
    with_ttl.enable_time_to_live(ttl)
    return {
        "v": ValueStateDescriptor("v", Types.LONG()),
        "s": ValueStateDescriptor("s", Types.STRING()),
        "l": ListStateDescriptor("l", Types.LONG()),
        "m": MapStateDescriptor("m", Types.STRING(), Types.LONG()),
        "r": ReducingStateDescriptor("r", lambda a, b: a + b, Types.LONG()),
        "a": AggregatingStateDescriptor("a", AvgAgg(), Types.TUPLE([Types.LONG(), Types.LONG()])),
        "t": with_ttl,
    }


KINDS = {"v": "value", "s": "value", "l": "list", "m": "map", "r": "reducing", "a": "aggregating"}
KINDS["t"] = "value"


def kg_of(key: int) -> int:
    return compute_key_group_for_serialized_key(LONG.serialize(key), MAX_P)


def backend(parallelism: int = 1, index: int = 0, key_serializer: Any = LONG) -> Any:
    b = create_keyed_backend(
        "hashmap",
        operator_name="op",
        key_group_range=compute_key_group_range_for_operator_index(MAX_P, parallelism, index),
        max_parallelism=MAX_P,
        key_serializer=key_serializer,
    )
    b.ttl_time_provider = ManualTtlTimeProvider(0)
    return b


def read_one(state: Any, kind: str) -> Any:
    if kind == "value":
        return state.value()
    if kind == "list":
        return list(state.get()) or None
    if kind == "map":
        return dict(state.items()) or None
    return state.get()


def apply(b: Any, states: dict[str, Any], op: tuple[str, int, str, int]) -> None:
    name, key, what, n = op
    b.set_current_key(key, kg_of(key))
    s = states[name]
    if what == "clear":
        s.clear()
    elif name in ("v", "t"):
        s.update(n)
    elif name == "s":
        s.update("x" * (n % 5))
    elif name == "l":
        s.add(n)
    elif name == "m":
        s.put(f"u{n % 3}", n)
    else:
        s.add(n)


def assert_answers(lin: Lineage, op: QueryableOperator, b: Any, states: dict[str, Any]) -> None:
    search, copies = ServingCache(512), ServingCache(512, search=False)
    indexed = ServingCache(512)  # every block indexed at its first search
    for name, kind in KINDS.items():
        state = (name, kind, None)
        assert search.search is not None
        assert search.search.plan(lin, op, name, kind) is not None, name
        for key in KEYS:
            kg = kg_of(key)
            if kg not in b.key_group_range:
                continue
            b.set_current_key(key, kg)
            want = read_one(states[name], kind)  # TTL: the user value, as lookups answer
            got = search.read_lineage(lin, op, state, key, kg)
            assert got == copies.read_lineage(lin, op, state, key, kg), (name, key)
            keyed_index.INDEX_AFTER = 1
            try:
                assert got == indexed.read_lineage(lin, op, state, key, kg), (name, key)
            finally:
                keyed_index.INDEX_AFTER = INDEX_AFTER
            if kind == "aggregating":  # answered as the stored accumulator
                got = None if got is None else AvgAgg().get_result(got)
            assert got == want, (name, key)
    assert search.builds == 0 and len(search) == 0  # no copy was made


op_strategy = st.tuples(
    st.sampled_from(sorted(KINDS)),
    st.sampled_from(KEYS),
    st.sampled_from(["put", "put", "put", "clear"]),
    st.integers(-(2**40), 2**40),
)
epochs_strategy = st.lists(
    st.tuples(st.lists(op_strategy, max_size=25), st.sampled_from(["delta", "delta", "full"])),
    min_size=1,
    max_size=7,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(epochs=epochs_strategy)
def test_lookups_from_the_files_equal_the_copies_and_the_committed_state(
    epochs: list[tuple[list[tuple[str, int, str, int]], str]],
) -> None:
    tmp = tempfile.mkdtemp(prefix="streamstate-search-")
    b = backend()
    try:
        storage = FileSystemCheckpointStorageAccess(f"{tmp}/chk")
        storage.initialize_job("job")
        ds = descriptors()
        for d in ds.values():
            d.set_queryable(f"q-{d.name}")
        states = {n: b.get_partitioned_state(d) for n, d in ds.items()}
        op = QueryableOperator("op", "op", 1, MAX_P, LONG, "hashmap")
        versions = StateVersions()
        versions.reset([("op", 0)], (0, 0))
        for epoch, (ops, how) in enumerate(epochs, start=1):
            for o in ops:
                apply(b, states, o)
            es = EpochSpec(epoch, 0, None, epoch == 1 or how == "full", ())
            v = commit_keyed_state(storage, {"op": b}, 0, es, "job", BRIDGED)[0]["op"]
            storage.discard_epoch_state(
                versions.fold(SubtaskAck(0, 0, (0, epoch), versions={"op": v}))
            )
            lin = versions.keyed[("op", 0)]
            assert_answers(lin, op, b, states)
    finally:
        b.dispose()
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_lineage_unpickled_again_reads_no_file_again(tmp_path: Any) -> None:
    """A query host gets each pinned lineage unpickled anew (new handle objects for the
    same files): the files it parsed for the previous epoch are not read again."""
    b = backend()
    try:
        storage = FileSystemCheckpointStorageAccess(str(tmp_path / "chk"))
        storage.initialize_job("job")
        d = ValueStateDescriptor("v", Types.LONG())
        d.set_queryable("vs")
        state = b.get_partitioned_state(d)
        op = QueryableOperator("op", "op", 1, MAX_P, LONG, "hashmap")
        versions = StateVersions()
        versions.reset([("op", 0)], (0, 0))
        cache = ServingCache(512)
        assert cache.search is not None
        for epoch in range(1, 5):
            for key in KEYS[epoch::3]:
                b.set_current_key(key, kg_of(key))
                state.update(epoch * 100 + key)
            es = EpochSpec(epoch, 0, None, epoch == 1, ())
            v = commit_keyed_state(storage, {"op": b}, 0, es, "job", BRIDGED)[0]["op"]
            versions.fold(SubtaskAck(0, 0, (0, epoch), versions={"op": v}))
            lin = pickle.loads(pickle.dumps(versions.keyed[("op", 0)]))
            before = cache.search.files_read
            for key in KEYS:
                b.set_current_key(key, kg_of(key))
                got = cache.read_lineage(lin, op, ("v", "value", None), key, kg_of(key))
                assert got == state.value()
            # epoch 1: the base; later: only the epoch's new delta
            assert cache.search.files_read - before == 1, epoch
            cache.refresh(ServingSnapshot("epoch", epoch, 0, None, {("op", 0): lin}, {"op": op}))
    finally:
        b.dispose()


def test_a_rescaled_base_of_several_handles_and_in_memory_bytes() -> None:
    """Two subtasks' snapshots are the base of one subtask after scaling in (the
    lineage of a restore), inline bytes as with in-memory checkpoint storage."""
    ds = descriptors()
    olds = [backend(2, i) for i in range(2)]
    handles = []
    for b in olds:
        states = {n: b.get_partitioned_state(d) for n, d in ds.items()}
        for i, key in enumerate(KEYS):
            if kg_of(key) in b.key_group_range:
                for name in KINDS:
                    apply(b, states, (name, key, "put", i * 7 - 50))
        snap = b.snapshot()
        handles.append(
            KeyGroupsStateHandle(
                ByteStreamStateHandle.of(snap.data), b.key_group_range, snap.offsets, snap.meta
            )
        )
    merged = backend()
    merged.restore(handles)
    states = {n: merged.get_partitioned_state(d) for n, d in ds.items()}
    lin = Lineage((0, 1), base=tuple(handles))
    op = QueryableOperator("op", "op", 1, MAX_P, LONG, "hashmap")
    assert_answers(lin, op, merged, states)
    for b in (*olds, merged):
        b.dispose()


def test_key_types_it_cannot_search_fall_back_to_the_copies() -> None:
    """STRING keys (variable width) and DOUBLE keys (0.0 == -0.0 with other bytes) are read
    from serving copies; so is a lineage whose files recorded other serializers for the
    state (a schema change inside it)."""
    for key_type, key in ((Types.STRING(), "k"), (Types.DOUBLE(), 1.5)):
        ser = serializer_for(key_type)
        b = backend(key_serializer=ser)
        kg = compute_key_group_for_serialized_key(ser.serialize(key), MAX_P)
        b.set_current_key(key, kg)
        b.get_partitioned_state(ValueStateDescriptor("v", Types.LONG())).update(5)
        snap = b.snapshot()
        h = KeyGroupsStateHandle(
            ByteStreamStateHandle.of(snap.data), b.key_group_range, snap.offsets, snap.meta
        )
        op = QueryableOperator("op", "op", 1, MAX_P, ser, "hashmap")
        cache = ServingCache(512)
        assert (
            cache.read_lineage(Lineage((0, 1), base=(h,)), op, ("v", "value", None), key, kg) == 5
        )
        assert cache.builds == 1 and cache.search is not None and cache.search.lookups == 0
        b.dispose()

    # the same state with other value serializers in the base and in a delta
    b = backend()
    b.set_current_key(3, kg_of(3))
    b.get_partitioned_state(ValueStateDescriptor("v", Types.LONG())).update(5)
    snap = b.snapshot()
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(snap.data), b.key_group_range, snap.offsets, snap.meta
    )
    meta = json.loads(json.dumps(h.meta))
    meta["states"][0]["value_serializer"] = (
        serializer_for(Types.INT()).snapshot_configuration().to_dict()
    )
    other = KeyGroupsStateHandle(h.stream, h.key_group_range, h.offsets, meta)
    op = QueryableOperator("op", "op", 1, MAX_P, LONG, "hashmap")
    cache = ServingCache(512)
    assert cache.search is not None
    assert cache.search.plan(Lineage((0, 1), base=(h, other)), op, "v", "value") is None
    assert cache.search.plan(Lineage((0, 1), base=(h,)), op, "v", "value") is not None
    b.dispose()


@given(
    keys=st.lists(
        st.integers(0, 2**16 - 1).map(
            lambda n: int.from_bytes(
                bytes([n >> 8, 0, 0, 1, n & 1, 0, 0, n & 255]), "big", signed=True
            )
        ),
        unique=True,
        max_size=40,
    ),
    probe=st.integers(0, 2**16 - 1),
)
def test_find_key_never_takes_a_match_straddling_two_keys(keys: list[int], probe: int) -> None:
    """Keys made of few distinct bytes, so a probe's bytes often occur across two keys; the
    same answers from the index a block gets after INDEX_AFTER searches. The keys lie
    inside other bytes, as in a file."""
    data = b"\x00\x01\x00" + struct.pack(f">{len(keys)}q", *keys) + b"\x01\x00"
    block = Block(data, 0, True)
    block.keys_at, block.keys_end = 3, len(data) - 2
    candidates = [
        *keys[:3],
        probe,
        int.from_bytes(data[6:14], "big", signed=True) if len(keys) > 1 else probe,
    ]
    for k in candidates:
        want = keys.index(k) if k in keys else -1
        assert find_key(block, LONG.serialize(k), 8) == want
    block.probes = INDEX_AFTER
    for k in candidates:
        want = keys.index(k) if k in keys else -1
        assert find_key(block, LONG.serialize(k), 8) == want
    assert block.index is not None and len(block.index) == len(keys)


def test_a_value_outside_its_block_is_a_corrupt_checkpoint() -> None:
    block = Block(b"\x00" * 8, 0, True)
    block.values_at, block.values_end = 0, 8
    with pytest.raises(CorruptCheckpointError):
        block.value(1, "value", type("S", (), {"value": LONG})(), 8)


def test_a_full_version_of_searchable_keys_writes_no_bridge(tmp_path: Any) -> None:
    """Lookups of integer keys keep no serving copy, so the job writes no bridge (the
    epoch's delta beside a full version) for them; string keys still get one."""
    storage = FileSystemCheckpointStorageAccess(str(tmp_path / "chk"))
    storage.initialize_job("job")
    for key_type, key, bridged in ((Types.LONG(), 5, False), (Types.STRING(), "k", True)):
        ser = serializer_for(key_type)
        b = backend(key_serializer=ser)
        d = ValueStateDescriptor("v", Types.LONG())
        d.set_queryable("vs")
        b.set_current_key(key, compute_key_group_for_serialized_key(ser.serialize(key), MAX_P))
        b.get_partitioned_state(d).update(1)
        v = commit_keyed_state(
            storage, {"op": b}, 0, EpochSpec(1, 0, None, True, ()), "job", BRIDGED
        )
        assert (v[0]["op"].bridge is not None) is bridged, key_type
        b.dispose()
