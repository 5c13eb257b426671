"""Savepoint cost vs state size (issue 11): write time and size, canonical vs native, heap
and RocksDB, restore time, and a RocksDB incremental checkpoint for comparison.

One subtask's keyed backend with ``N`` keys of a ``ValueState[int]`` (all key groups of
max parallelism 128), measured in this process, every figure in the same run:

* **canonical savepoint** (the shared heap format; restores on any backend and
  parallelism) of the heap and of the RocksDB backend;
* **native savepoint** of RocksDB (its own SST files, self-contained: every file copied);
* **incremental checkpoint** of the same RocksDB database from scratch (every SST file
  uploaded to ``shared/``): the issue's yardstick, native within 2x of it;
* **restore** of each into a fresh backend (canonical into heap and RocksDB, native into
  RocksDB);
* with ``--reader N``: the State Processor API's ``read_keyed_state`` of a canonical
  savepoint of ``N`` keys as a Spark DataFrame (``count()``), rows/s on ``local[1]`` and
  ``local[2]`` (one process per master) and their ratio.

Run: ``python -m benchmarks.savepoints [--sizes 100000,1000000,10000000] [--reader N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from typing import Any

from benchmarks.results import Sitting, Table, add_result_option, record
from benchmarks.rocksdb_state import DESC, key_groups, make
from streamstate.common import Row, Types
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.handles import FileStateHandle
from streamstate.runtime.checkpoint.savepoint import SavepointTarget
from streamstate.runtime.versions import write_savepoint
from streamstate.state_processor import (
    KeyedStateBootstrapFunction,
    KeyedStateReaderFunction,
    OperatorTransformation,
    SavepointReader,
    SavepointWriter,
)


def fill(backend: Any, n: int) -> None:
    keys = [f"key-{i}" for i in range(n)]
    kgs = key_groups(keys)
    state = backend.get_partitioned_state(DESC)
    for k, kg in zip(keys, kgs, strict=True):
        backend.set_current_key(k, kg)
        state.update(1)


def dir_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def savepoint(backend: Any, root: str, native: bool) -> tuple[float, int, Any]:
    target = SavepointTarget.create(root, "benchjob", native=native)
    t0 = time.perf_counter()
    keyed, _ = write_savepoint(target, {"op": backend}, {}, {}, 0, 1, "benchjob")
    dt = time.perf_counter() - t0
    # a savepoint's file handles are relative to its directory (relocatable): resolve them
    # as its _metadata would be
    handle = keyed["op"].map_streams(
        lambda h: (
            FileStateHandle(os.path.join(target.url, h.path), h.size, h.crc, h.sha256)
            if isinstance(h, FileStateHandle) and not os.path.isabs(h.path)
            else h
        )
    )
    return dt, dir_size(target.url), handle


def restore(kind: str, local_dir: str, handle: Any) -> float:
    b = make(kind, local_dir)
    t0 = time.perf_counter()
    b.restore([handle])
    dt = time.perf_counter() - t0
    b.dispose()
    return dt


def measure(n: int, work: str) -> dict[str, Any]:
    row: dict[str, Any] = {"keys": n}
    heap = make("hashmap", work)
    fill(heap, n)
    dt, size, canonical_heap = savepoint(heap, f"{work}/sp-heap", native=False)
    row["heap canonical s"], row["heap canonical MB"] = dt, size / 1e6
    row["restore heap<-canonical s"] = restore("hashmap", work, canonical_heap)
    del heap

    rocks = make("rocksdb", f"{work}/rocks")
    fill(rocks, n)
    dt, size, canonical = savepoint(rocks, f"{work}/sp-rc", native=False)
    row["rocksdb canonical s"], row["rocksdb canonical MB"] = dt, size / 1e6
    dt, size, native = savepoint(rocks, f"{work}/sp-rn", native=True)
    row["rocksdb native s"], row["rocksdb native MB"] = dt, size / 1e6
    storage = FileSystemCheckpointStorageAccess(f"{work}/chk")
    storage.initialize_job("benchjob")
    rocks.incremental = True
    t0 = time.perf_counter()
    rocks.snapshot_incremental(storage, 1, "benchjob-op-0")
    row["rocksdb incremental checkpoint s"] = time.perf_counter() - t0
    row["native / incremental"] = row["rocksdb native s"] / row["rocksdb incremental checkpoint s"]
    row["restore rocksdb<-canonical s"] = restore("rocksdb", f"{work}/r1", canonical)
    row["restore rocksdb<-native s"] = restore("rocksdb", f"{work}/r2", native)
    rocks.dispose()
    return row


class CountReader(KeyedStateReaderFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(DESC)

    def read_key(self, key: Any, ctx: Any, out: Any) -> None:
        out.collect(Row(key=key, count=self.count.value()))


ROWS = Types.ROW_NAMED(["key", "count"], [Types.STRING(), Types.LONG()])


def read_rate(master: str, path: str) -> float:
    """Rows/s of ``read_keyed_state(...).count()`` on ``master`` (run in its own process)."""
    reader = SavepointReader.read(_spark(master), path)
    reader.read_keyed_state("op", CountReader(), output_type=ROWS).count()  # warm-up
    t0 = time.perf_counter()
    n = reader.read_keyed_state("op", CountReader(), output_type=ROWS).count()
    return n / (time.perf_counter() - t0)


class Preload(KeyedStateBootstrapFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(DESC)

    def process_element(self, row: Any, ctx: Any) -> None:
        self.count.update(1)


def _spark(master: str) -> Any:
    from pyspark.sql import SparkSession

    from benchmarks.peers.spark_stateful import use_this_python_for_workers

    use_this_python_for_workers()
    spark = SparkSession.builder.master(master).config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def write_bootstrapped(path: str, n: int) -> str:
    """A savepoint of ``n`` keys written by the State Processor API (local[2])."""
    spark = _spark("local[2]")
    df = spark.range(n).selectExpr("concat('key-', cast(id as string)) as key")
    t = OperatorTransformation.bootstrap_with(df).key_by(lambda r: r.key).transform(Preload())
    return str(SavepointWriter.new_savepoint(spark).with_operator("op", t).write(path))


def reader_scaling(n: int, work: str) -> dict[str, Any]:
    import subprocess
    import sys

    def run(*args: str) -> str:
        cmd = [sys.executable, "-m", "benchmarks.savepoints", *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    path = run("--write", f"{work}/sp", str(n)).strip().splitlines()[-1]
    rates = {
        m: float(run("--read", m, path).strip().splitlines()[-1]) for m in ("local[1]", "local[2]")
    }
    return {
        "keys": n,
        **{f"rows/s {m}": r for m, r in rates.items()},
        "local[2] / local[1]": rates["local[2]"] / rates["local[1]"],
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,1000000")
    p.add_argument("--reader", type=int, metavar="N", help="also time read_keyed_state of N keys")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--write", nargs=2, metavar=("PATH", "N"), help=argparse.SUPPRESS)
    p.add_argument("--read", nargs=2, metavar=("MASTER", "PATH"), help=argparse.SUPPRESS)
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.savepoints", argv)
    if args.write:  # helper processes of --reader
        print(write_bootstrapped(args.write[0], int(args.write[1])))
        return
    if args.read:
        print(read_rate(*args.read))
        return
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        work = tempfile.mkdtemp(prefix=f"ss-sp-bench-{n}-")
        try:
            row = measure(n, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        rows.append(row)
        print(json.dumps(row), flush=True)
    cols = [k for k in rows[0] if k != "keys"]
    print()
    for c in cols:
        print(f"{c:36s}" + "".join(f"{r[c]:>12.3f}" for r in rows))
    reader = None
    if args.reader:
        work = tempfile.mkdtemp(prefix="ss-sp-reader-")
        try:
            reader = reader_scaling(args.reader, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(reader))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backends": rows, "reader": reader}, f, indent=2)
    if args.result:
        table = Table(
            ("figure", *(f"{r['keys']:,} keys" for r in rows)),
            tuple((c, *(f"{r[c]:.3f}" for r in rows)) for c in cols),
        )
        notes = [f"read_keyed_state: {json.dumps(reader)}"] if reader else []
        record("savepoints", sitting.run([table], notes))


if __name__ == "__main__":
    main()
