"""State schema migration cost (issue 12): a restore that migrates vs a plain restore of
the same state, and the typed serializers vs pickle.

**Migration.** One subtask's keyed backend (all 128 key groups) holds ``N`` keys of a
value state whose value is a record with three fields (``Types.ROW_NAMED`` or a
dataclass). A canonical snapshot of it is restored into a fresh backend twice:

* *plain*: the descriptor declares the same type (nothing to migrate);
* *migrating*: the descriptor's type adds a field (``unit``; a dataclass default),
  so every entry is converted once at registration (heap: the objects; RocksDB: the
  column family is rewritten).

Both times include the restore itself and the registration; the ratio migrating/plain
is the issue's yardstick (goal: within 3x), and ``entries/s`` is ``N`` over the
migrating restore's time.

**Serializers.** ``M`` values of a ROW_NAMED row, a dataclass and an Avro record
(fastavro) are serialized and deserialized one by one (RocksDB's path) and in bulk
(``serialize_many`` / ``deserialize_many``, the heap snapshot's path) by the typed
serializer and by pickle (the serializer of state without type information), same run.

Run: ``python -m benchmarks.schema_migration [--sizes 1000000] [--values 200000]
[--part all|serializers|migration]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import tempfile
import time
from typing import Any

from benchmarks.results import Sitting, add_result_option, record, rows_table
from benchmarks.rocksdb_state import key_groups, make
from streamstate.common import Row, Types
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.checkpoint.handles import ByteStreamStateHandle, KeyGroupsStateHandle
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.serializers.registry import serializer_for

MAX_P = 128


@dataclasses.dataclass
class Reading:
    sensor: str
    temp: float
    count: int


@dataclasses.dataclass
class ReadingV2:
    sensor: str
    temp: float
    count: int
    unit: str = "C"


ROW_V1 = Types.ROW_NAMED(
    ["sensor", "temp", "count"], [Types.STRING(), Types.DOUBLE(), Types.LONG()]
)
ROW_V2 = Types.ROW_NAMED(
    ["sensor", "temp", "count", "unit"],
    [Types.STRING(), Types.DOUBLE(), Types.LONG(), Types.STRING()],
)
AVRO = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "temp", "type": "double"},
        {"name": "count", "type": "long"},
    ],
}
KINDS: dict[str, tuple[Any, Any, Any]] = {
    "row": (ROW_V1, ROW_V2, lambda i: Row(sensor=f"s{i}", temp=i * 0.5, count=i)),
    "dataclass": (
        Types.DATACLASS(Reading),
        Types.DATACLASS(ReadingV2),
        lambda i: Reading(f"s{i}", i * 0.5, i),
    ),
}


def snapshot_of(backend_kind: str, kind: str, n: int, tmp: str) -> KeyGroupsStateHandle:
    old, _, value = KINDS[kind]
    b = make(backend_kind, tempfile.mkdtemp(dir=tmp))
    try:
        keys = [f"key-{i}" for i in range(n)]
        st = b.get_partitioned_state(ValueStateDescriptor("s", old))
        for i, (k, kg) in enumerate(zip(keys, key_groups(keys), strict=True)):
            b.set_current_key(k, kg)
            st.update(value(i))
        snap = b.snapshot()
    finally:
        b.dispose()
    return KeyGroupsStateHandle(
        ByteStreamStateHandle.of(snap.data), KeyGroupRange(0, MAX_P - 1), snap.offsets, snap.meta
    )


def restore_time(backend_kind: str, handle: Any, type_info: Any, tmp: str) -> tuple[float, int]:
    b = make(backend_kind, tempfile.mkdtemp(dir=tmp))
    try:
        t0 = time.perf_counter()
        b.restore([handle])
        b.get_partitioned_state(ValueStateDescriptor("s", type_info))
        return time.perf_counter() - t0, sum(b.migrated_entries.values())
    finally:
        b.dispose()


def migration(sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    tmp = tempfile.mkdtemp(prefix="schema-bench-")
    try:
        for n in sizes:
            for backend_kind in ("hashmap", "rocksdb"):
                for kind, (old, new, _) in KINDS.items():
                    h = snapshot_of(backend_kind, kind, n, tmp)
                    plain, migr = float("inf"), float("inf")
                    for _ in range(2):
                        t, none = restore_time(backend_kind, h, old, tmp)
                        plain = min(plain, t)
                        t, migrated = restore_time(backend_kind, h, new, tmp)
                        migr = min(migr, t)
                    assert none == 0 and migrated == n, (none, migrated)
                    rows.append(
                        {
                            "n": n,
                            "backend": backend_kind,
                            "kind": kind,
                            "plain_s": round(plain, 3),
                            "migrating_s": round(migr, 3),
                            "ratio": round(migr / plain, 2),
                            "entries_per_s": int(n / migr),
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def _time(fn: Any) -> float:
    """The best of three runs (the machine is shared: the minimum is the least disturbed)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def serializers(m: int) -> list[dict[str, Any]]:
    cases: dict[str, tuple[Any, list[Any]]] = {
        "row": (serializer_for(ROW_V1), [KINDS["row"][2](i) for i in range(m)]),
        "dataclass": (
            serializer_for(Types.DATACLASS(Reading)),
            [KINDS["dataclass"][2](i) for i in range(m)],
        ),
        "avro": (
            serializer_for(Types.AVRO(AVRO)),
            [{"sensor": f"s{i}", "temp": i * 0.5, "count": i} for i in range(m)],
        ),
    }
    pickle = PickleSerializer()
    out = []
    for name, (typed, values) in cases.items():
        res: dict[str, Any] = {"type": name, "values": m}
        # ratios from the unrounded times: a small --values rounds a time to 0.000 s
        seconds: dict[str, float] = {}
        for label, ser in (("typed", typed), ("pickle", pickle)):
            blobs = [ser.serialize(v) for v in values]
            one = _time(lambda s=ser, vs=values: [s.serialize(v) for v in vs])
            one += _time(lambda s=ser, b=blobs: [s.deserialize(x) for x in b])
            bulk_blob = ser.serialize_many(values)
            bulk = _time(lambda s=ser, vs=values: s.serialize_many(vs))
            bulk += _time(lambda s=ser, b=bulk_blob: s.deserialize_many(b))
            seconds[f"{label}_one_by_one"], seconds[f"{label}_bulk"] = one, bulk
            res[f"{label}_one_by_one_s"] = round(one, 3)
            res[f"{label}_bulk_s"] = round(bulk, 3)
            res[f"{label}_bytes"] = sum(len(b) for b in blobs)
        res["one_by_one_typed_over_pickle"] = round(
            seconds["typed_one_by_one"] / seconds["pickle_one_by_one"], 2
        )
        res["bulk_typed_over_pickle"] = round(seconds["typed_bulk"] / seconds["pickle_bulk"], 2)
        out.append(res)
        print(json.dumps(res), flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000000")
    p.add_argument("--values", type=int, default=200_000)
    p.add_argument("--part", choices=["all", "serializers", "migration"], default="all")
    add_result_option(p)
    a = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.schema_migration", argv)
    # run from the importable module, so that pickle finds the dataclasses by reference
    # (a class of __main__ is pickled by value, which would not be a fair baseline)
    from benchmarks import schema_migration as importable

    tables = []
    if a.part in ("all", "serializers"):
        tables.append(rows_table(importable.serializers(a.values)))
    if a.part in ("all", "migration"):
        tables.insert(0, rows_table(importable.migration([int(s) for s in a.sizes.split(",")])))
    if a.result:
        record("schema_migration", sitting.run(tables))


if __name__ == "__main__":
    main()
