"""RocksDB state backend vs heap: throughput, checkpoint cost and restore time, one run.

Reported (issue 3), every ratio measured in the same run on the same machine:

* **keyed count throughput**, RocksDB vs heap: the backend hot path alone (per record:
  ``set_current_key`` + ``value()`` + ``update()``, 10^6 records over 10^5 keys) and,
  with ``--spark``, the whole keyed-count job on Spark ``local[2]``;
* **checkpoint duration and bytes written vs state size** (10^5, 10^6 keys; 10^7 with
  ``--sizes``): a full checkpoint (heap format, what the heap backend and the RocksDB
  backend without incremental checkpoints write) vs incremental checkpoints, with 1% of
  the keys updated between checkpoints; "bytes changed" is the serialized size of the
  updated keys and values (what a delta holds), the target is incremental bytes <= 3x
  that. Each size runs 5 incremental steps: the first step and the mean are reported
  (RocksDB compactions make later steps upload rewritten files too);
* **restore time vs state size**: incremental handle restored remotely (download),
  locally (local copy), and a full heap-format snapshot restored into RocksDB and heap.

Run: ``python -m benchmarks.rocksdb_state [--sizes 100000,1000000] [--spark] [--json F]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from typing import Any

from benchmarks.results import Sitting, add_result_option, figures_table, publish, rows_table
from streamstate.common import Types
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.handles import KeyGroupsStateHandle
from streamstate.runtime.keygroups import KeyGroupRange, compute_key_group_for_serialized_key
from streamstate.runtime.serializers.key import default_key_serializer
from streamstate.runtime.state.registry import create_keyed_backend
from streamstate.runtime.state.rocksdb import incremental as inc

MAX_P = 128
DESC = ValueStateDescriptor("count", Types.LONG())


def make(kind: str, local_dir: str, incremental: bool = False) -> Any:
    extra = {"local_dir": local_dir, "incremental": incremental} if kind == "rocksdb" else {}
    return create_keyed_backend(
        kind,
        operator_name="bench",
        key_group_range=KeyGroupRange(0, MAX_P - 1),
        max_parallelism=MAX_P,
        key_serializer=default_key_serializer(),
        **extra,
    )


def key_groups(keys: list[str]) -> list[int]:
    ser = default_key_serializer().serialize
    return [compute_key_group_for_serialized_key(ser(k), MAX_P) for k in keys]


def count(backend: Any, keys: list[str], kgs: list[int], records: int) -> float:
    """Records/s of the keyed count hot path (records cycle over the keys)."""
    state = backend.get_partitioned_state(DESC)
    set_key, value, update = backend.set_current_key, state.value, state.update
    n = len(keys)
    t0 = time.perf_counter()
    for i in range(records):
        j = i % n
        set_key(keys[j], kgs[j])
        update((value() or 0) + 1)
    return records / (time.perf_counter() - t0)


def bench_throughput(local_dir: str, records: int, nkeys: int, repeat: int) -> dict[str, Any]:
    keys = [f"k{i}" for i in range(nkeys)]
    kgs = key_groups(keys)
    best: dict[str, float] = {}
    for _ in range(repeat):
        for kind in ("hashmap", "rocksdb"):
            b = make(kind, local_dir)
            try:
                best[kind] = max(best.get(kind, 0.0), count(b, keys, kgs, records))
            finally:
                b.dispose()
    return {
        "records": records,
        "keys": nkeys,
        "heap records/s": round(best["hashmap"]),
        "rocksdb records/s": round(best["rocksdb"]),
        "rocksdb / heap": round(best["rocksdb"] / best["hashmap"], 3),
    }


def fill(backend: Any, keys: list[str], kgs: list[int], value: int) -> None:
    state = backend.get_partitioned_state(DESC)
    for k, kg in zip(keys, kgs, strict=True):
        backend.set_current_key(k, kg)
        state.update(value)


def bench_checkpoints(local_dir: str, chk_dir: str, n: int, steps: int = 5) -> dict[str, Any]:
    keys = [f"key-{i:09d}" for i in range(n)]
    kgs = key_groups(keys)
    storage = FileSystemCheckpointStorageAccess(os.path.join(chk_dir, f"n{n}"))
    storage.initialize_job("bench")
    out: dict[str, Any] = {"keys": n}

    # full checkpoint (heap format) from the heap backend and from RocksDB
    for kind in ("hashmap", "rocksdb"):
        b = make(kind, local_dir)
        try:
            fill(b, keys, kgs, 1)
            t0 = time.perf_counter()
            snap = b.snapshot()
            h = storage.write_state(1, f"full-{kind}", snap.data)
            out[f"full checkpoint s ({kind})"] = round(time.perf_counter() - t0, 3)
            out[f"full checkpoint bytes ({kind})"] = h.size
            if kind == "rocksdb":
                handle = KeyGroupsStateHandle(h, b.key_group_range, dict(snap.offsets), snap.meta)
        finally:
            b.dispose()

    # incremental: first checkpoint uploads everything, then 1% of the keys per step
    b = make("rocksdb", local_dir, incremental=True)
    try:
        fill(b, keys, kgs, 1)
        t0 = time.perf_counter()
        first = b.snapshot_incremental(storage, 2, "bench-0")
        out["incremental first checkpoint s"] = round(time.perf_counter() - t0, 3)
        out["incremental first checkpoint bytes"] = b.bytes_uploaded
        state = b.get_partitioned_state(DESC)
        ser = default_key_serializer().serialize
        step = max(1, n // 100)
        secs, sent, changed = [], [], []
        last = first
        for s in range(steps):
            lo = (s * 7919 * step) % n
            idx = [(lo + i) % n for i in range(step)]
            changed.append(sum(len(ser(keys[i])) + 2 + 8 for i in idx))  # kg + key + long
            for i in idx:
                b.set_current_key(keys[i], kgs[i])
                state.update(s + 2)
            before = b.bytes_uploaded
            t0 = time.perf_counter()
            last = b.snapshot_incremental(storage, 3 + s, "bench-0")
            secs.append(time.perf_counter() - t0)
            sent.append(b.bytes_uploaded - before)
        out["keys updated per step"] = step
        out["bytes changed per step"] = round(sum(changed) / steps)
        out["incremental step 1 s"] = round(secs[0], 4)
        out["incremental step 1 bytes"] = sent[0]
        out["incremental step 1 / changed"] = round(sent[0] / changed[0], 2)
        out[f"incremental mean of {steps} steps s"] = round(sum(secs) / steps, 4)
        out[f"incremental mean of {steps} steps bytes"] = round(sum(sent) / steps)
        out[f"incremental mean of {steps} steps / changed"] = round(sum(sent) / sum(changed), 2)
        out["incremental state size (files named by the last handle)"] = last.state_size
    finally:
        b.dispose()

    # restore times
    timings: dict[str, float] = {}
    for label in ("incremental, local copy", "incremental, download"):
        if label.endswith("download"):
            shutil.rmtree(os.path.join(local_dir, inc.LOCAL_DIR_NAME), ignore_errors=True)
        r = make("rocksdb", local_dir)
        try:
            t0 = time.perf_counter()
            r.restore([last])
            timings[label] = time.perf_counter() - t0
            assert r.restore_source == ("local" if "local" in label else "remote")
        finally:
            r.dispose()
    for kind in ("rocksdb", "hashmap"):
        r = make(kind, local_dir)
        try:
            t0 = time.perf_counter()
            r.restore([handle])
            timings[f"full heap-format snapshot into {kind}"] = time.perf_counter() - t0
        finally:
            r.dispose()
    for label, t in timings.items():
        out[f"restore s ({label})"] = round(t, 3)
    return out


def bench_spark(local_dir: str, chk_dir: str, records: int, nkeys: int, repeat: int) -> Any:
    """The keyed-count job on Spark local[2] (10 epochs) with each backend, same session."""
    from benchmarks.keyed_count import CountPerKey, workload
    from benchmarks.peers import spark_stateful as peers
    from streamstate.common import Configuration
    from streamstate.datastream import (
        EmbeddedRocksDBStateBackend,
        HashMapStateBackend,
        StreamExecutionEnvironment,
    )
    from streamstate.datastream.connectors import DiscardingSink

    spark = peers.build_spark("streamstate-bench-rocksdb")
    spark.sparkContext.setLogLevel("ERROR")
    data = workload(records, nkeys)

    def run(backend: Any, checkpoint: bool, tag: str, n: int = len(data)) -> float:
        conf = Configuration()
        conf.set_string("execution.epoch.max-records", str(-(-n // 10)))
        env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
        env.set_parallelism(2)
        env.set_state_backend(backend)
        if checkpoint:
            env.enable_checkpointing(1)
            env.get_checkpoint_config().set_checkpoint_storage_dir(os.path.join(chk_dir, tag))
        env.from_collection(data[:n]).key_by(lambda v: v[0]).process(CountPerKey()).uid(
            "count"
        ).add_sink(DiscardingSink())
        t0 = time.perf_counter()
        acc = env.execute("rocksdb-bench").get_all_accumulator_results()
        dt = time.perf_counter() - t0
        assert acc["records-in.count"] == n, acc
        return n / dt

    def rocks(incremental: bool) -> Any:
        b = EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=incremental)
        b.set_db_storage_paths(local_dir)
        return b

    run(HashMapStateBackend(), True, "warm", 20_000)
    run(rocks(True), True, "warm2", 20_000)
    configs = {
        "heap, no checkpoints": (HashMapStateBackend, False),
        "rocksdb, no checkpoints": (lambda: rocks(False), False),
        "heap, checkpoint every epoch": (HashMapStateBackend, True),
        "rocksdb full, checkpoint every epoch": (lambda: rocks(False), True),
        "rocksdb incremental, checkpoint every epoch": (lambda: rocks(True), True),
    }
    best: dict[str, float] = {}
    for r in range(repeat):
        for i, (label, (factory, chk)) in enumerate(configs.items()):
            best[label] = max(best.get(label, 0.0), run(factory(), chk, f"r{r}-{i}"))
    out: dict[str, Any] = {"records": records, "keys": nkeys, "epochs": 10}
    out.update({f"{k} records/s": round(v) for k, v in best.items()})
    out["rocksdb / heap, no checkpoints"] = round(
        best["rocksdb, no checkpoints"] / best["heap, no checkpoints"], 3
    )
    out["rocksdb incremental / heap, checkpoint every epoch"] = round(
        best["rocksdb incremental, checkpoint every epoch"] / best["heap, checkpoint every epoch"],
        3,
    )
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,1000000", help="state sizes in keys")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--local-dir", default=None, help="RocksDB local dir (default: temp dir)")
    p.add_argument("--spark", action="store_true", help="also run the keyed-count job on Spark")
    p.add_argument("--spark-records", type=int, default=1_000_000)
    p.add_argument("--spark-keys", type=int, default=10_000)
    p.add_argument("--json", help="also write the figures to this file")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.rocksdb_state", argv)
    work = tempfile.mkdtemp(prefix="streamstate-bench-rocksdb-")
    local_dir = args.local_dir or os.path.join(work, "local")
    os.makedirs(local_dir, exist_ok=True)
    results: dict[str, Any] = {}
    try:
        results["throughput"] = bench_throughput(local_dir, args.records, args.keys, args.repeat)
        print(json.dumps(results["throughput"], indent=1), flush=True)
        if args.spark:
            results["spark"] = bench_spark(
                local_dir,
                os.path.join(work, "spark-chk"),
                args.spark_records,
                args.spark_keys,
                args.repeat,
            )
            print(json.dumps(results["spark"], indent=1), flush=True)
        results["checkpoints"] = []
        for n in (int(x) for x in args.sizes.split(",")):
            row = bench_checkpoints(local_dir, os.path.join(work, "chk"), n)
            results["checkpoints"].append(row)
            print(json.dumps(row, indent=1), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tables = [figures_table({k: v for k, v in results.items() if k != "checkpoints"})]
    tables.append(rows_table(results["checkpoints"]))
    publish("rocksdb_state", lambda: sitting.run(tables), args.result, args.json, results)


if __name__ == "__main__":
    main()
