"""RocksDB specifics: layout, limits, local directory errors, disposal, registry."""

from __future__ import annotations

import os
import stat
import struct
from typing import Any

import pytest

from streamstate.common import Types
from streamstate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from streamstate.errors import StateAccessError, StateSerializationError
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.state.rocksdb import access as raccess
from streamstate.runtime.state.rocksdb.backend import (
    RocksDBKeyedStateBackend,
    RocksDBStorageError,
)
from tests.support import backends as H
from tests.support.backends import Made

# ------------------------------------------------------------------------ RocksDB specifics


def test_reads_are_copies_and_writes_serialize_eagerly(rocks: Made) -> None:
    b = rocks.backend(op="my-operator")
    v = b.get_partitioned_state(ValueStateDescriptor("counts"))
    H.at(b, "k")
    obj = [1]
    v.update(obj)
    assert v.value() == [1] and v.value() is not obj
    with pytest.raises(StateSerializationError) as e:
        v.update(lambda: 1)  # pickle cannot serialize a lambda: fails at once
    err = e.value
    assert err.state_name == "counts" and err.operator == "my-operator"
    assert "counts" in str(err) and "my-operator" in str(err)
    assert v.value() == [1]  # the failed write changed nothing


def test_unserializable_key_is_typed(rocks: Made) -> None:
    class Local:  # hashable but not picklable (local class)
        pass

    b = rocks.backend()
    v = b.get_partitioned_state(H.V)
    b.set_current_key(Local(), 0)
    with pytest.raises(StateSerializationError, match="Local"):
        v.update(1)


def test_value_over_the_limit_is_a_typed_error(
    rocks: Made, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(raccess, "MAX_VALUE_BYTES", 1000)
    b = rocks.backend(op="big")
    v = b.get_partitioned_state(H.V)
    lst = b.get_partitioned_state(ListStateDescriptor("big-list"))
    m = b.get_partitioned_state(MapStateDescriptor("big-map"))
    H.at(b, "k")
    with pytest.raises(StateSerializationError, match=r"2\^31"):
        v.update(b"x" * 2000)
    lst.add(b"x" * 600)
    with pytest.raises(StateSerializationError, match="big-list"):
        lst.add(b"y" * 600)  # the appended value would pass the limit
    assert [len(x) for x in lst.get()] == [600]
    with pytest.raises(StateSerializationError, match="big-map"):
        m.put("a", "z" * 2000)
    assert v.value() is None and m.is_empty()


def test_map_keys_do_not_collide_when_key_bytes_are_not_prefix_free(rocks: Made) -> None:
    key_mod = pytest.importorskip("streamstate.runtime.serializers.key")
    ks = key_mod.default_key_serializer()
    assert ks.serialize("ab").startswith(ks.serialize("a"))  # not prefix-free
    b = rocks("op", KeyGroupRange(0, 0), 1, ks)
    m = b.get_partitioned_state(MapStateDescriptor("m"))
    uk = PickleSerializer()
    b.set_current_key("ab", 0)
    m.put("X", 2)
    b.set_current_key("a", 0)
    m.put("b" + "X", 1)  # ("a", "bX") vs ("ab", "X")
    assert dict(m.items()) == {"bX": 1}
    b.set_current_key("ab", 0)
    assert dict(m.items()) == {"X": 2}
    assert sorted(b.get_keys("m")) == ["a", "ab"]
    assert uk.serialize("X")  # user keys are pickled


def test_remembered_key_bytes_keep_equal_keys_of_other_types_apart(
    rocks: Made, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An access remembers the bytes of str and int keys: 1, True and 1.0 compare equal
    but serialize differently, so each keeps its own entry, also once the remembered keys
    are forgotten (the bound) and when the key is set the shuffle's way (the operator's
    fast path writes the current key's fields and resets its bytes)."""
    monkeypatch.setattr(raccess, "_KNOWN_KEYS_MAX", 3)
    b = rocks.backend()
    v = b.get_partitioned_state(ValueStateDescriptor("v"))
    keys: list[Any] = [1, True, 1.0, "1", 2, "k", 3, "z"]
    for round_ in range(3):
        for i, key in enumerate(keys):
            if round_ == 1:
                first, size = b.shuffled_key_slots() or (0, 0)
                kgi = H.kg_of(key, b.max_parallelism) - first
                assert 0 <= kgi < size
                b.current.key, b.current.key_group_index = key, kgi
                b.current.key_bytes = None
            else:
                H.at(b, key)
            assert v.value() == (None if round_ == 0 else (i, round_ - 1))
            v.update((i, round_))
    stored = [PickleSerializer().deserialize(rk[2:]) for rk, _ in b.store("v").scan(b"", None)]
    assert len(stored) == len(keys) and len(set(stored)) == len(keys) - 2  # 1 == True == 1.0


def test_layout_key_group_prefix_and_column_families(rocks: Made) -> None:
    b = rocks.backend()
    for d in H.ALL:
        b.get_partitioned_state(d)
    H.fill(b, H.KEYS[:20])
    assert set(b.db.list_cf(b.path)) >= {"v", "l", "m", "r", "a"}
    col = b.store("v")
    for rk, _ in col.scan(b"", None):
        kg = int.from_bytes(rk[:2], "big")
        assert kg in b.key_group_range
        assert PickleSerializer().deserialize(rk[2:]) in H.KEYS
    keys = [rk for rk, _ in col.scan(b"", None)]
    assert keys == sorted(keys)  # a key group range is a contiguous key range


def test_local_dir_and_dispose(tmp_path: Any, rocks: Made) -> None:
    b = rocks("op", KeyGroupRange(0, 127), 128, PickleSerializer(), local_dir=str(tmp_path))
    assert os.path.dirname(b.path) == str(tmp_path) and os.path.isdir(b.path)
    b.dispose()
    assert not os.path.exists(b.path)
    b.dispose()  # idempotent


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_local_dir_names_the_path(tmp_path: Any) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(RocksDBStorageError, match=str(ro)):
            RocksDBKeyedStateBackend("op", KeyGroupRange(0, 1), 2, PickleSerializer(), str(ro))
    finally:
        ro.chmod(stat.S_IRWXU)


def test_local_dir_that_is_a_file_names_the_path(tmp_path: Any) -> None:
    f = tmp_path / "a-file"
    f.write_text("x")
    with pytest.raises(RocksDBStorageError, match="a-file"):
        RocksDBKeyedStateBackend("op", KeyGroupRange(0, 1), 2, PickleSerializer(), str(f))


_WRITE_FAILS = """
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.state.rocksdb.backend import RocksDBKeyedStateBackend, RocksDBStorageError
d = sys.argv[1]
storage = FileSystemCheckpointStorageAccess(os.path.join(d, "chk"))
storage.initialize_job("j")
b = RocksDBKeyedStateBackend(
    "op", KeyGroupRange(0, 127), 128, PickleSerializer(), local_dir=d, incremental=True
)
v = b.get_partitioned_state(ValueStateDescriptor("v"))
# no file may grow beyond 200 kB from now on: the local disk "is full" for RocksDB
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    for i in range(100_000):
        b.set_current_key(i, i % 128)
        v.update(os.urandom(100))
    b.snapshot_incremental(storage, 1, "op-0")
except RocksDBStorageError as e:
    print("TYPED", e)
else:
    print("NO ERROR")
"""


def test_local_disk_write_failure_is_a_typed_error_naming_the_path(tmp_path: Any) -> None:
    """A local directory that cannot take more bytes (RLIMIT_FSIZE stands in for a full
    disk, in a child process) fails with RocksDBStorageError naming the directory."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _WRITE_FAILS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert out.stdout.startswith("TYPED"), out.stdout + out.stderr
    assert str(tmp_path) in out.stdout and "free space" in out.stdout


def test_default_local_dir_is_the_executors_spark_local_dir(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamstate.runtime.state.rocksdb.backend import default_local_dir

    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path}/a,{tmp_path}/b")
    assert default_local_dir() == f"{tmp_path}/a"
    b = RocksDBKeyedStateBackend("op", KeyGroupRange(0, 1), 2, PickleSerializer())
    try:
        assert os.path.dirname(b.path) == f"{tmp_path}/a"
    finally:
        b.dispose()
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    import tempfile

    assert default_local_dir() == tempfile.gettempdir()


@pytest.mark.parametrize(("old_p", "new_p"), [(2, 4), (4, 2)])
def test_take_key_groups_takes_the_database_over_and_clips_it(
    rocks: Made, old_p: int, new_p: int
) -> None:
    """A rescale in place moves the previous database into the new backend (no entry is
    copied) and deletes the key groups it does not keep: its column families hold
    entries of the kept key groups only, and every one of them."""
    old = rocks.backend(p=old_p, idx=0)
    H.fill(old, [k for k in H.KEYS if H.kg_of(k, H.MAX_P) in old.key_group_range])
    before = H.dump(old)
    old_path = old.path
    new = rocks.backend(p=new_p, idx=0)
    kept = old.key_group_range.intersection(new.key_group_range)
    assert new.take_key_groups(old, kept) == len(kept)
    assert not os.path.exists(old_path)
    old.dispose()  # the database is the new backend's now: disposing the old keeps it
    assert os.path.isdir(new.path)
    for name in new.cf_names:
        cf = new.opened_database().get_column_family(name)
        groups = {int.from_bytes(k[:2], "big") for k in cf.keys()}
        del cf
        assert groups and groups <= set(kept), name
    want = {
        name: {k: v for k, v in entries.items() if H.kg_of(k, H.MAX_P) in kept}
        for name, entries in before.items()
    }
    assert H.dump(new) == want


# ------------------------------------------------------------------------ per-record caches


def test_exactly_round_tripping_values_are_served_decoded_and_stay_coherent(
    rocks: Made,
) -> None:
    b = rocks.backend(op="counts")
    n = b.get_partitioned_state(ValueStateDescriptor("n", Types.LONG()))
    f = b.get_partitioned_state(ReducingStateDescriptor("f", lambda a, c: a + c, Types.FLOAT()))
    H.at(b, "a")
    n.update(5)
    f.add(0.1)
    assert n.value() == 5
    # FLOAT is float32: the written object is not what a read returns, so none is cached
    assert f.get() == struct.unpack(">f", struct.pack(">f", 0.1))[0] != 0.1
    with pytest.raises(StateSerializationError, match="counts"):
        n.update(2**63)  # out of LONG's range: fails at once, nothing cached
    assert n.value() == 5
    n.clear()
    assert n.value() is None
    # past the layer's bound the entries (and their objects) are forgotten and re-read
    b._stores["n"].cf.limit = 4
    for i in range(20):
        H.at(b, f"k{i}")
        n.update(i)
    for i in range(20):
        H.at(b, f"k{i}")
        assert n.value() == i
    restored = rocks.backend()
    restored.restore([H.handle_of(b, b.snapshot())])
    again = restored.get_partitioned_state(ValueStateDescriptor("n", Types.LONG()))
    H.at(restored, "k7")
    assert again.value() == 7
    H.at(restored, "a")
    assert again.value() is None
    # a disposed backend's handles refuse, on the decoded-object paths too
    b.dispose()
    H.at(b, "k7")
    with pytest.raises(StateAccessError, match="disposed"):
        n.update(1)
    with pytest.raises(StateAccessError, match="disposed"):
        n.value()

