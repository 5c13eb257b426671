"""Keyed running count: streamstate vs Spark's own stateful APIs, in one run on one machine.

Workload (issue 2): 1,000,000 records ``(key, 1)`` over 10,000 keys, parallelism 2,
a running count per key in ``ValueState`` on the heap backend. Reported:

* streamstate records/s with checkpointing off and with a checkpoint every epoch
  (the overhead ratio), as one epoch and as 10 epochs;
* Spark's ``transformWithStateInPandas``, ``transformWithState`` (Row) and
  ``applyInPandasWithState`` on the same data, as one batch and as 10 micro-batches;
* ratios streamstate / peer, measured in the same run (never absolute targets).

``--runners`` runs streamstate on several epoch runners in the same run: ``rdd`` (the
classic runner), ``dataframe`` (the DataFrame runner on the same classic session) and
``connect`` (the DataFrame runner on a Spark Connect server, ``local[2]``, that the
benchmark starts and stops) and ``barrier`` (one Spark barrier stage of co-scheduled tasks
for the whole job, ``spark/barrier_runner.py``); the first one named is the base of the runner ratios. The
runners take turns within each cell, run after run, so a shared machine's changing load
meets them alike.

``--state-backend hashmap rocksdb`` measures both backends in the same run, interleaved
cell by cell (1 epoch: heap, RocksDB; 10 epochs: heap, RocksDB), and reports RocksDB
against heap; the first one named is the base.

Run: ``make bench`` (or ``python -m benchmarks.keyed_count [--records N] [--no-peers]
[--state-backend hashmap rocksdb] [--runners rdd dataframe connect barrier]``).
Every figure, streamstate's and each peer's, is the best of ``--repeat`` runs after an
untimed warm-up run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import time
from typing import Any

from benchmarks.results import Sitting, add_result_option, rates_table, record
from streamstate.common import Configuration, Types
from streamstate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from streamstate.datastream.connectors import DiscardingSink
from streamstate.datastream.state import ValueStateDescriptor


class CountPerKey(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield value[0], c


def workload(records: int, keys: int) -> list[tuple[str, int]]:
    return [(f"k{i % keys}", 1) for i in range(records)]


#: ``--subtask-hosts``: whether subtasks run in their per-executor host process
SUBTASK_HOSTS = ["true"]
#: ``--source-parallelism``: readers of the collection (adjacent stripes of each epoch)
SOURCE_PARALLELISM = [2]
#: ``--state-backend``: the keyed state backend (``state.backend.type``)
STATE_BACKEND = ["hashmap"]
#: the runner of the next run_streamstate (``execution.runner``)
RUNNER = ["rdd"]


def run_streamstate(
    spark: Any,
    data: list[Any],
    epochs: int,
    checkpoint: bool,
    parallelism: int = 2,
    checkpoint_dir: str | None = None,
) -> tuple[float, dict[str, Any]]:
    """The keyed count over ``data`` in ``epochs`` epochs; records/s and the accumulators.
    ``checkpoint_dir``: the checkpoint storage (default: the in-memory one)."""
    conf = Configuration()
    if RUNNER[0] != "rdd":
        # the default ("spark" on a classic session) is the RDD runner; left unset, the
        # benchmark also runs revisions older than the key's "rdd" value (compare_revisions)
        conf.set_string("execution.runner", RUNNER[0])
    readers = SOURCE_PARALLELISM[0]
    # max-records is per reader subtask: an epoch reads len(data) / epochs records in all
    conf.set_string("execution.epoch.max-records", str(-(-len(data) // (epochs * readers))))
    conf.set_string("execution.runner.spark.subtask-hosts", SUBTASK_HOSTS[0])
    conf.set_string("state.backend.type", STATE_BACKEND[0])
    env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
    env.set_parallelism(parallelism)
    if checkpoint:
        env.enable_checkpointing(1)  # due at every epoch boundary: a checkpoint per epoch
        if checkpoint_dir is not None:
            env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoint_dir)
    env.from_collection(data).set_parallelism(readers).key_by(lambda v: v[0]).process(
        CountPerKey()
    ).uid("count").add_sink(DiscardingSink())
    previous_job_cleaned_up()
    t0 = time.perf_counter()
    result = env.execute("keyed-count-bench")
    dt = time.perf_counter() - t0
    acc = result.get_all_accumulator_results()
    # every record reached the keyed operator exactly once (no lost or replayed epochs)
    assert acc["records-in.count"] == len(data), acc
    return len(data) / dt, acc


def previous_job_cleaned_up() -> None:
    """Wait for the previous job's end-of-job work: the Spark runner stops a finished job's
    subtask hosts with a small Spark job in the background after ``execute()`` returned
    (``spark/runner.py``). Started back to back, the next job's first tasks waited for its
    two task slots (measured: it ran over the next job's first 0.1-0.5 s; joining it first,
    6 pairs of 1M-record epochs at load 6-8: best 454,656 against 423,728 rec/s, median
    +5 %). A user's job does not start inside another job's cleanup, and Spark's peers
    leave none behind, so the measured job does not either."""
    try:
        from streamstate.spark.runner import join_host_stoppers
    except ImportError:  # a revision before it (compare_revisions): nothing to wait for
        return
    join_host_stoppers()


_BACKEND_NAMES = {"hashmap": "heap", "rocksdb": "RocksDB"}


def _backend_label(backends: list[str], backend: str) -> str:
    """The rows' label of ``backend``: none for the default run (heap alone)."""
    return "" if backends == ["hashmap"] else f", {_BACKEND_NAMES[backend]}"


def _measure(
    args: Any,
    sessions: dict[str, Any],
    data: list[Any],
    rows: dict[str, dict[str, float]],
    extra: dict[str, Any],
) -> None:
    """streamstate's rows (and extras) of every runner of ``args.runners``: 1 and 10
    epochs, checkpoints off/on, each state backend of ``args.state_backend`` in turn within
    each cell. Within a cell the runners take turns, run after run (the best of
    ``--repeat`` each), so that a shared machine's changing load meets them alike."""
    labels = {
        runner: ("" if args.runners == ["rdd"] else f", {runner} runner") for runner in args.runners
    }
    kinds = [
        ("no checkpoints", False, args.subtask_hosts),
        ("checkpoint every epoch", True, args.subtask_hosts),
    ]
    if args.compare_hosts:  # the same, subtasks in the Spark workers (hosts off), same run
        kinds.append(("checkpoint every epoch, hosts off", True, "false"))
    for epochs in (1, 10):
        for backend in args.state_backend:
            STATE_BACKEND[0] = backend
            best: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
            for kind, checkpoint, hosts in kinds:
                SUBTASK_HOSTS[0] = hosts
                for _ in range(args.repeat):
                    for runner in args.runners:
                        RUNNER[0] = "dataframe" if runner == "connect" else runner
                        run = run_streamstate(sessions[runner], data, epochs, checkpoint)
                        if run[0] > best.get((runner, kind), (0.0, {}))[0]:
                            best[runner, kind] = run
            SUBTASK_HOSTS[0] = args.subtask_hosts
            for runner in args.runners:
                label = labels[runner] + _backend_label(args.state_backend, backend)
                for kind, _checkpoint, _hosts in kinds:
                    rows.setdefault(f"streamstate ({kind}{label})", {})[str(epochs)] = best[
                        runner, kind
                    ][0]
                off = best[runner, "no checkpoints"][0]
                on, acc_on = best[runner, "checkpoint every epoch"]
                extra[f"checkpoint overhead, {epochs} epoch(s){label}"] = 1 - on / off
                extra[f"cache hits/misses, {epochs} epoch(s), checkpointing{label}"] = (
                    acc_on.get("cache_hits"),
                    acc_on.get("cache_misses"),
                )
                extra[f"subtask seconds, {epochs} epoch(s), checkpointing{label}"] = {
                    k.split(".", 1)[1]: v
                    for k, v in acc_on.items()
                    if k.startswith("subtask-seconds.")
                }
                if args.compare_hosts:
                    plain, acc_plain = best[runner, "checkpoint every epoch, hosts off"]
                    extra[f"hosts on / off, {epochs} epoch(s){label}"] = on / plain
                    extra[f"cache hits/misses, {epochs} epoch(s), hosts off{label}"] = (
                        acc_plain.get("cache_hits"),
                        acc_plain.get("cache_misses"),
                    )


def _connect_session() -> tuple[Any, str]:
    """A Spark Connect server (``local[2]``, as the classic session) in a temporary home,
    and a session on it; the caller stops the server."""
    import tempfile

    from benchmarks.peers.spark_stateful import peer_spark_conf
    from streamstate.spark.local_server import start_server
    from streamstate.spark.session import connect_session

    home = tempfile.mkdtemp(prefix="streamstate-bench-connect-")
    conf = {k: v for k, v in peer_spark_conf().items() if not k.startswith("spark.pyspark")}
    # owned by this process: a benchmark killed midway leaves no server behind
    server = start_server(port=0, master="local[2]", conf=conf, home=home, owner_pid=os.getpid())
    return connect_session(server.url), home


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--no-peers", action="store_true", help="skip Spark's stateful APIs")
    p.add_argument("--peers", nargs="+", help="only these of Spark's stateful APIs (default: all)")
    p.add_argument("--subtask-hosts", choices=("true", "false"), default="true")
    p.add_argument("--source-parallelism", type=int, default=2, help="collection readers")
    p.add_argument("--compare-hosts", action="store_true", help="also run with hosts off")
    p.add_argument(
        "--state-backend",
        nargs="+",
        choices=("hashmap", "rocksdb"),
        default=["hashmap"],
        help="the keyed state backends to measure, interleaved (the first is the ratios' base)",
    )
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument(
        "--runners",
        nargs="+",
        choices=("rdd", "dataframe", "connect", "barrier"),
        default=["rdd"],
        help="streamstate's epoch runners to measure (the first is the ratios' base)",
    )
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.keyed_count", argv)
    SUBTASK_HOSTS[0] = args.subtask_hosts
    SOURCE_PARALLELISM[0] = args.source_parallelism
    STATE_BACKEND[0] = args.state_backend[0]

    from benchmarks.peers import spark_stateful as peers

    spark = peers.build_spark("streamstate-bench")
    spark.sparkContext.setLogLevel("ERROR")
    data = workload(args.records, args.keys)
    for backend in args.state_backend:  # warm-up: JVM, workers, each backend's imports
        STATE_BACKEND[0] = backend
        run_streamstate(spark, data[: min(len(data), 50_000)], 2, True)

    rows: dict[str, dict[str, float]] = {}
    extra: dict[str, Any] = {}
    sessions = {"rdd": spark, "dataframe": spark, "barrier": spark}
    server_home = None
    if "connect" in args.runners:
        sessions["connect"], server_home = _connect_session()
    try:
        STATE_BACKEND[0] = args.state_backend[0]
        for runner in args.runners:
            RUNNER[0] = "dataframe" if runner == "connect" else runner
            if runner != "rdd":  # warm-up: this runner's workers and server
                run_streamstate(sessions[runner], data[: min(len(data), 50_000)], 2, True)
            if len(args.runners) > 1:
                # every runner also runs many small epochs before the measured cells, so
                # that its JVM has compiled the per-epoch paths (a Connect epoch's planning
                # ones are many: the first 10-epoch cell ran slower than the second on
                # both runners, 2026-11-29); a warm server is Connect's normal state
                run_streamstate(sessions[runner], data[: min(len(data), 50_000)], 20, False)
        _measure(args, sessions, data, rows, extra)
    finally:
        if server_home is not None:
            from streamstate.spark.local_server import stop_server

            # closed first: an open Connect client's exit hook retries its cleanup RPC
            # against the stopped server for minutes before the process can exit
            sessions["connect"].stop()
            stop_server(server_home)
            shutil.rmtree(server_home, ignore_errors=True)
    backends = args.state_backend
    for backend in backends[1:]:
        for kind in ("no checkpoints", "checkpoint every epoch"):
            mine = rows[f"streamstate ({kind}{_backend_label(backends, backend)})"]
            base_row = rows[f"streamstate ({kind}{_backend_label(backends, backends[0])})"]
            for e in ("1", "10"):
                extra[
                    f"{_BACKEND_NAMES[backend]} / {_BACKEND_NAMES[backends[0]]}, {kind}, "
                    f"{e} epoch(s)"
                ] = f"{mine[e] / base_row[e]:.2f}"
    base_runner = args.runners[0]
    for runner in args.runners[1:]:
        for kind in ("no checkpoints", "checkpoint every epoch"):
            mine = rows[f"streamstate ({kind}, {runner} runner)"]
            base_row = rows[f"streamstate ({kind}, {base_runner} runner)"]
            for e in ("1", "10"):
                extra[f"{runner} / {base_runner}, {kind}, {e} epoch(s)"] = (
                    f"{mine[e] / base_row[e]:.2f}"
                )
    if not args.no_peers:
        for name, fn in peers.PEERS.items():
            if args.peers and name not in args.peers:
                continue
            # as streamstate's: an untimed warm-up (the peer's classes, its workers' imports),
            # then the best of --repeat runs
            fn(spark, 20_000, 2, keys=min(args.keys, 20_000))
            for batches in (1, 10):
                rows.setdefault(f"Spark {name}", {})[str(batches)] = max(
                    fn(spark, args.records, batches, args.keys) for _ in range(args.repeat)
                )

    print(
        f"\nkeyed running count, {args.records:,} records, {args.keys:,} keys, parallelism 2, "
        f"state backend {' and '.join(args.state_backend)}"
    )
    print(f"{'engine':44s} {'1 batch/epoch':>15s} {'10 batches/epochs':>18s}")
    for name, r in rows.items():
        print(f"{name:44s} {r.get('1', 0):>13,.0f}/s {r.get('10', 0):>16,.0f}/s")
    ratios = []
    if not args.no_peers:
        for runner, backend in itertools.product(args.runners, backends):
            suffix = ("" if args.runners == ["rdd"] else f", {runner} runner") + _backend_label(
                backends, backend
            )
            base = rows[f"streamstate (checkpoint every epoch{suffix})"]
            print(f"\nratios: streamstate (checkpoint every epoch{suffix}) / peer")
            for name, r in rows.items():
                if name.startswith("Spark"):
                    of = _BACKEND_NAMES[backend] + ("" if len(args.runners) == 1 else f", {runner}")
                    ratios.append(
                        f"{name} ({of}): {base['1'] / r['1']:.1f}x "
                        f"(1 batch), {base['10'] / r['10']:.1f}x (10)"
                    )
                    print(
                        f"  {name:42s} 1: {base['1'] / r['1']:5.1f}x   "
                        f"10: {base['10'] / r['10']:5.1f}x"
                    )
    for k, v in extra.items():
        print(f"{k}: {v:.1%}" if isinstance(v, float) else f"{k}: {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"rows": rows, "extra": extra, "records": args.records}, f, indent=2, default=str
            )
    if args.result:
        columns = {"1": "1 batch / epoch", "10": "10 batches / epochs"}
        table = rates_table("engine", rows, columns)
        notes = []
        if ratios:
            notes.append(
                "Ratios, streamstate with a checkpoint every epoch / peer: " + "; ".join(ratios)
            )
        notes += [
            f"{k}: {v:.1%}" if isinstance(v, float) else f"{k}: {v}"
            for k, v in extra.items()
            if not isinstance(v, dict)  # the per-phase subtask seconds: printed, not kept
        ]
        # the runners' comparison and the RocksDB backend are runs of their own; the K1
        # table is the default run (heap, rdd runner)
        name = (
            ""
            if args.runners == ["rdd"]
            else "Runners: RDD, DataFrame, Spark Connect"
            if {"dataframe", "connect"} & set(args.runners)
            else "Runners: RDD and barrier (co-scheduled tasks)"
        )
        if backends == ["rocksdb"]:
            name = f"{name}, RocksDB state backend" if name else "RocksDB state backend"
        record("keyed_count", sitting.run([table], notes, name=name))
    spark.stop()


if __name__ == "__main__":
    main()
