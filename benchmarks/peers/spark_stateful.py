"""Spark stateful-API peers for the keyed running-count benchmark.

Workload: ``records`` rows of ``(key, 1)`` with ``key = f"k{i % keys}"`` (fixed,
deterministic), keyed running count. Each peer keeps a per-key count in Spark's
state store and, per micro-batch, emits one ``(key, count)`` row per key touched
in that batch (the key's running count after the batch). The final count of a
key is therefore the largest count emitted for it, which is what we verify.

The data is written up front (not timed) as ``batches`` Parquet files in a temp
directory and read back with a file stream source using ``maxFilesPerTrigger=1``
and ``trigger(availableNow=True)``, so ``batches`` files -> ``batches``
micro-batches, with state carried across them. The timed part covers building
the streaming query (planning) and running it to completion; Spark session
startup and data generation are excluded. Output goes to the ``memory`` sink so
the result can be checked after the timer stops.

Usage::

    python -m benchmarks.peers.spark_stateful --records 1000000 --keys 10000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

OUTPUT_DDL = "key string, count long"


def peer_spark_conf(parallelism: int = 2) -> dict[str, str]:
    """Spark confs the peer functions need (the caller builds the session with them);
    ``parallelism``: the stateful operator's partitions.

    The caller should also use ``master("local[2]")`` for parallelism 2, and make sure the
    Python workers run an interpreter with pandas/pyarrow/protobuf: PySpark takes the worker
    executable from ``PYSPARK_PYTHON`` when the SparkContext is created (the
    ``spark.pyspark.python`` conf below is not enough for the transformWithState driver-side
    worker), so call :func:`use_this_python_for_workers` before building the session.
    """
    return {
        # Python workers must use this interpreter (it has pandas/pyarrow/protobuf).
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.shuffle.partitions": str(parallelism),
        # transformWithState / transformWithStateInPandas require RocksDB; we use it for
        # applyInPandasWithState as well so all three peers share the same state backend.
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.adaptive.enabled": "false",
    }


def use_this_python_for_workers() -> None:
    """Point PySpark's Python workers at the running interpreter (unless already set)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Workload:
    records: int
    keys: int
    batches: int
    data_dir: str

    def expected_counts(self) -> dict[str, int]:
        base, extra = divmod(self.records, self.keys)
        return {
            f"k{j}": base + (1 if j < extra else 0) for j in range(min(self.keys, self.records))
        }


def make_workload(records: int, keys: int, batches: int, root: str) -> Workload:
    """Write ``batches`` Parquet files holding records ``(f"k{i % keys}", 1)``, in order."""
    if records <= 0 or keys <= 0 or batches <= 0:
        raise ValueError("records, keys and batches must be positive")
    bounds = [records * b // batches for b in range(batches + 1)]
    data_dir = write_batches(
        ([f"k{i % keys}" for i in range(bounds[b], bounds[b + 1])] for b in range(batches)),
        root,
    )
    return Workload(records, keys, batches, data_dir)


def write_batches(key_batches: Iterable[list[str]], root: str) -> str:
    """One Parquet file of rows ``(key, 1)`` per list of keys, in order (one micro-batch
    each with ``maxFilesPerTrigger=1``), under ``<root>/input``; that directory."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data_dir = os.path.join(root, "input")
    os.makedirs(data_dir)
    for b, batch in enumerate(key_batches):
        table = pa.table(
            {
                "key": pa.array(batch, type=pa.string()),
                "value": pa.array([1] * len(batch), type=pa.int64()),
            }
        )
        # Zero-padded names: the file source orders files by modification time, then path.
        path = os.path.join(data_dir, f"part-{b:05d}.parquet")
        pq.write_table(table, path)
        mtime = 1_600_000_000 + b
        os.utime(path, (mtime, mtime))
    return data_dir


# ------------------------------------------------------------------ stateful functions


def _tws_pandas_processor() -> Any:
    """A ``StatefulProcessor`` for transformWithStateInPandas (pandas in/out).

    Defined inside a function so cloudpickle ships the class by value (workers need not
    import this module).
    """
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    class PandasCountProcessor(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.count_state = handle.getValueState("count", "count long")

        def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
            count = self.count_state.get()[0] if self.count_state.exists() else 0
            for pdf in rows:
                count += int(pdf["value"].sum())
            self.count_state.update((count,))
            yield pd.DataFrame({"key": [key[0]], "count": [count]})

        def close(self) -> None:
            pass

    return PandasCountProcessor()


def _tws_row_processor() -> Any:
    """A ``StatefulProcessor`` for the Row-based transformWithState (Spark 4.1+)."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    class RowCountProcessor(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.count_state = handle.getValueState("count", "count long")

        def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
            count = self.count_state.get()[0] if self.count_state.exists() else 0
            for row in rows:
                count += row.value
            self.count_state.update((count,))
            yield Row(key=key[0], count=count)

        def close(self) -> None:
            pass

    return RowCountProcessor()


def _apply_in_pandas_count_fn() -> Callable[..., Any]:
    import pandas as pd

    def count_fn(key, pdf_iter, state) -> Iterator[pd.DataFrame]:
        count = state.get[0] if state.exists else 0
        for pdf in pdf_iter:
            count += int(pdf["value"].sum())
        state.update((count,))
        yield pd.DataFrame({"key": [key[0]], "count": [count]})

    return count_fn


# ---------------------------------------------------------------------- runner


def _start_query(
    spark: Any, data_dir: str, checkpoint: str, api: str, sink: str, query_name: str
) -> Any:
    """The peer's streaming query over the Parquet files of ``data_dir`` (one per
    micro-batch), output mode Update into ``sink`` (``memory``: the view ``query_name``;
    ``noop``: discarded), run to the end of the files (``availableNow``)."""
    source = (
        spark.readStream.schema("key string, value long")
        .option("maxFilesPerTrigger", 1)
        .parquet(data_dir)
    )
    grouped = source.groupBy("key")
    #: the transformWithState variants by name: the method and its processor's factory
    tws = {
        "transformWithStateInPandas": (grouped.transformWithStateInPandas, _tws_pandas_processor),
        "transformWithState": (grouped.transformWithState, _tws_row_processor),
    }
    if api in tws:
        method, processor = tws[api]
        result = method(
            statefulProcessor=processor(),
            outputStructType=OUTPUT_DDL,
            outputMode="Update",
            timeMode="None",
        )
    elif api == "applyInPandasWithState":
        from pyspark.sql.streaming.state import GroupStateTimeout

        result = grouped.applyInPandasWithState(
            _apply_in_pandas_count_fn(),
            outputStructType=OUTPUT_DDL,
            stateStructType="count long",
            outputMode="Update",
            timeoutConf=GroupStateTimeout.NoTimeout,
        )
    else:
        raise ValueError(f"unknown api {api!r}")
    writer = result.writeStream.format(sink).outputMode("update")
    if sink == "memory":
        writer = writer.queryName(query_name)
    return writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()


def _data_batches(query: Any, api: str, batches: int, rows: int) -> list[dict[str, Any]]:
    """The progress of the query's non-empty micro-batches; raises unless there were
    ``batches`` of them over ``rows`` rows in all."""
    if query.exception() is not None:
        raise RuntimeError(f"{api}: query failed: {query.exception()}")
    data_batches = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
    rows_in = sum(p["numInputRows"] for p in data_batches)
    if len(data_batches) != batches or rows_in != rows:
        raise AssertionError(
            f"{api}: expected {batches} micro-batches / {rows} rows, "
            f"got {len(data_batches)} / {rows_in}"
        )
    return data_batches


def _run(
    spark: Any, records: int, batches: int, keys: int, api: str, work_dir: str | None = None
) -> float:
    """Run one peer end to end; return records/second; raise if the result is wrong.
    Its input files and checkpoint go to a new directory under ``work_dir`` (default: the
    temp dir; on a cluster, a path that the driver and every executor see)."""
    root = tempfile.mkdtemp(prefix=f"streamstate-peer-{api}-", dir=work_dir)
    query_name = f"peer_{api}_{uuid.uuid4().hex[:8]}"
    try:
        wl = make_workload(records, keys, batches, root)
        start = time.perf_counter()
        query = _start_query(
            spark, wl.data_dir, os.path.join(root, "checkpoint"), api, "memory", query_name
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - start
        _data_batches(query, api, batches, records)
        _verify(spark, query_name, wl, api)
        spark.catalog.dropTempView(query_name)
        return records / elapsed
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_batches(
    spark: Any,
    key_batches: list[list[str]],
    api: str = "transformWithState",
    work_dir: str | None = None,
) -> list[dict[str, Any]]:
    """A running count over the given micro-batches of keys (one row ``(key, 1)`` per key
    named), output discarded (``noop`` sink); per micro-batch: its ``rows``, its
    ``ms`` (the trigger's execution, as Spark reports it) and the state's ``state_rows``
    after it. Raises unless every batch ran and the state ends with one row per distinct
    key. Input and checkpoint under a new directory in ``work_dir`` (see :func:`_run`)."""
    root = tempfile.mkdtemp(prefix=f"streamstate-peer-{api}-", dir=work_dir)
    try:
        data_dir = write_batches(key_batches, root)
        query = _start_query(
            spark, data_dir, os.path.join(root, "checkpoint"), api, "noop", "unused"
        )
        query.awaitTermination()
        rows = sum(len(b) for b in key_batches)
        progress = _data_batches(query, api, len(key_batches), rows)
        out = [
            {
                "rows": p["numInputRows"],
                "ms": p["durationMs"]["triggerExecution"],
                "state_rows": sum(op["numRowsTotal"] for op in p["stateOperators"]),
            }
            for p in progress
        ]
        keys = len({k for b in key_batches for k in b})
        if out[-1]["state_rows"] != keys:
            raise AssertionError(f"{api}: {out[-1]['state_rows']} keys in state, expected {keys}")
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _verify(spark: Any, query_name: str, wl: Workload, api: str) -> None:
    final = {
        r["key"]: r["final"]
        for r in spark.sql(
            f"SELECT key, max(count) AS final FROM {query_name} GROUP BY key"
        ).collect()
    }
    expected = wl.expected_counts()
    total = sum(final.values())
    if total != wl.records:
        raise AssertionError(f"{api}: final counts sum to {total}, expected {wl.records}")
    if final != expected:
        bad = sorted(k for k in set(final) | set(expected) if final.get(k) != expected.get(k))
        sample = {k: (final.get(k), expected.get(k)) for k in bad[:5]}
        raise AssertionError(f"{api}: {len(bad)} keys have wrong counts, e.g. {sample}")


def run_transform_with_state_in_pandas(
    spark: Any, records: int, batches: int, keys: int = 10_000, work_dir: str | None = None
) -> float:
    """transformWithStateInPandas (StatefulProcessor + ValueState, pandas API); records/s."""
    return _run(spark, records, batches, keys, "transformWithStateInPandas", work_dir)


def run_transform_with_state(
    spark: Any, records: int, batches: int, keys: int = 10_000, work_dir: str | None = None
) -> float:
    """Row-based transformWithState (Spark 4.1+; StatefulProcessor + ValueState); records/s."""
    return _run(spark, records, batches, keys, "transformWithState", work_dir)


def run_apply_in_pandas_with_state(
    spark: Any, records: int, batches: int, keys: int = 10_000, work_dir: str | None = None
) -> float:
    """applyInPandasWithState (GroupState); records/s."""
    return _run(spark, records, batches, keys, "applyInPandasWithState", work_dir)


PEERS: dict[str, Callable[..., float]] = {
    "transformWithStateInPandas": run_transform_with_state_in_pandas,
    "transformWithState": run_transform_with_state,
    "applyInPandasWithState": run_apply_in_pandas_with_state,
}


def build_spark(
    app_name: str = "streamstate-peers", extra_conf: dict[str, str] | None = None
) -> Any:
    """The peers' session (``local[2]``); ``extra_conf``: more settings (e.g. an event log)."""
    from pyspark.sql import SparkSession

    use_this_python_for_workers()
    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for k, v in {**peer_spark_conf(), **(extra_conf or {})}.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument(
        "--batches", type=int, nargs="+", default=[1, 10], help="micro-batch counts to run"
    )
    parser.add_argument(
        "--peers", nargs="+", choices=sorted(PEERS), default=list(PEERS), help="peers to run"
    )
    parser.add_argument(
        "--warmup-records",
        type=int,
        default=20_000,
        help="untimed warm-up run per peer (0 disables)",
    )
    args = parser.parse_args(argv)

    spark = build_spark()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        results: dict[tuple[str, int], float] = {}
        for name in args.peers:
            fn = PEERS[name]
            if args.warmup_records > 0:
                fn(spark, args.warmup_records, 2, keys=min(args.keys, args.warmup_records))
            for batches in args.batches:
                rps = fn(spark, args.records, batches, keys=args.keys)
                results[(name, batches)] = rps
                print(
                    f"# {name} batches={batches}: {rps:,.0f} records/s (verified)",
                    flush=True,
                )
        header = f"{'peer':<28}" + "".join(f"{f'{b} batch(es)':>16}" for b in args.batches)
        print()
        print(f"records={args.records:,} keys={args.keys:,} parallelism=2 (records/s)")
        print(header)
        print("-" * len(header))
        for name in args.peers:
            print(f"{name:<28}" + "".join(f"{results[(name, b)]:>16,.0f}" for b in args.batches))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
