"""Rescaling in place vs restarting from a savepoint, at 10^6 keys of state (issue 31).

One run on Spark ``local[2]``, per backend (``--backends``):

* the state: ``--keys`` keys of a ``ValueState[int]``, bootstrapped into a savepoint by
  the State Processor API and restored by job 1;
* the work: a keyed running count (uid ``count``) over ``--records`` records per epoch
  (a sequence source at parallelism 2), keys spread over the key space; no periodic
  checkpoints (the interval is huge), so the only checkpoint epochs are those a rescale
  or a savepoint asks for;
* job 1 runs ``--warm`` epochs with ``count`` at ``--from`` parallelism, then
  ``--cycles`` times: rescaled in place to ``--to``
  (``JobClient.rescale(operators={"count": to})``), ``--after`` epochs, rescaled in
  place back to ``--from``, ``--after`` epochs; then it stops with a savepoint. It runs
  twice, keeping state in place (``execution.rescale.keep-state-in-place``, the
  default) and not (every subtask reads its key groups from the rescale's checkpoint);
* job 2 restores that savepoint with ``count`` at ``--to`` (restart-from-savepoint at
  the new parallelism, in the same process and SparkSession) and runs ``--after``
  epochs, ``--cycles`` times.

An epoch's cost is the wall time from the end of the epoch before it to its own end (the
driver's work between epochs included). A rescale asked after epoch ``r`` runs epoch
``r+1`` with a checkpoint barrier (the *barrier epoch*), then restores that checkpoint at
the new parallelism and runs epoch ``r+2`` (the *rescaling epoch*). Reported (medians
over the cycles): the rescaling epoch / the normal epoch at the new parallelism (the
issue's goal: <= 2x); the restart (job 1's end after its savepoint epoch, plus job 2's
start, restore and first epoch) / the same normal epoch; the barrier epoch next to the
savepoint epoch; key groups kept in place and read; the load average before and after.

Run: ``python -m benchmarks.rescale [--keys 1000000] [--backends heap,rocksdb] [--json F]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any

from benchmarks.report import render_table
from benchmarks.results import Sitting, Table, add_result_option, ratio, record
from benchmarks.state_scaling import MAX_PARALLELISM, CountPerKey, bootstrap
from streamstate.common import Configuration, Types
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.datastream.connectors import DiscardingSink
from streamstate.runtime.job_status import EpochStats, JobObserver

RESTART = "restart from savepoint, first epoch at to s"
#: a prime stride spreads an epoch's keys over all key groups
STRIDE = 1_000_003


class KeyOf:
    """Record ``i`` -> one of ``keys`` keys, strided over the key space."""

    def __init__(self, keys: int) -> None:
        self.keys = keys

    def __call__(self, i: int) -> str:
        return f"k{(i * STRIDE) % self.keys}"


class Script(JobObserver):
    """Records every epoch's end (wall time) and, after the ``n``-th epoch the job ran
    (counted from 1) for ``n`` in ``actions``, calls ``action(client)`` (a rescale, a
    stop-with-savepoint, a cancel) on the job's client."""

    def __init__(self, actions: dict[int, Any]) -> None:
        self.actions = actions
        self.client: Any = None
        self.ready = threading.Event()
        self.ends: list[float] = [0.0]  # [n]: when the n-th epoch ended
        self.stats: list[EpochStats | None] = [None]
        self.futures: list[Any] = []

    def on_status_change(self, job_id: str, status: Any, timestamp_ms: int) -> None:
        pass

    def on_failure(self, job_id: str, failure: Any) -> None:
        pass

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        self.ends.append(time.perf_counter())
        self.stats.append(stats)
        action = self.actions.get(len(self.ends) - 1)
        if action is not None:
            assert self.ready.wait(60)
            self.futures.append(action(self.client))


def backend_conf(backend: str, local_dir: str) -> dict[str, str]:
    if backend == "rocksdb":
        return {
            "state.backend.type": "rocksdb",
            "state.backend.incremental": "true",
            "state.backend.rocksdb.localdir": local_dir,
        }
    return {"state.backend.type": "hashmap"}


def start(
    spark: Any,
    args: Any,
    backend: str,
    work: str,
    restore: str,
    count_p: int,
    script: Script,
    in_place: bool = True,
) -> Any:
    conf = Configuration()
    for k, v in {
        "execution.epoch.max-records": str(args.records // 2),  # per source subtask
        "execution.state-recovery.path": restore,
        "execution.checkpointing.dir": f"file://{work}/checkpoints",
        "execution.checkpointing.savepoint-dir": f"file://{work}/savepoints",
        "execution.rescale.keep-state-in-place": str(in_place).lower(),
        **backend_conf(backend, f"{work}/rocksdb"),
    }.items():
        conf.set_string(k, v)
    env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
    env.add_job_observer(script)
    env.set_parallelism(2).set_max_parallelism(MAX_PARALLELISM)
    env.enable_checkpointing(10**9)  # only the checkpoints a rescale or savepoint asks for
    (
        env.from_sequence(0, 10**12)
        .uid("numbers")
        .map(KeyOf(args.keys), output_type=Types.STRING())
        .uid("key-of")
        .key_by(lambda k: k)
        .process(CountPerKey())
        .uid("count")
        .set_parallelism(count_p)
        .add_sink(DiscardingSink())
        .uid("discard")
        .set_parallelism(count_p)
    )
    client = env.execute_async("rescale-bench")
    script.client = client
    script.ready.set()
    return client


def cost(script: Script, epoch: int, since: float | None = None) -> float:
    """Seconds from the end of the epoch before (or ``since``) to the end of ``epoch``."""
    before = script.ends[epoch - 1] if since is None else since
    return script.ends[epoch] - before


def measure(
    spark: Any, args: Any, backend: str, savepoint: str, work: str, in_place: bool, restart: bool
) -> dict[str, Any]:
    """One job 1 (``in_place``: ``execution.rescale.keep-state-in-place``) and, when
    ``restart``, ``--cycles`` runs of job 2 from its savepoint."""
    w, a, p_from, p_to = args.warm, args.after, args.from_p, args.to_p
    # ordinals of job 1's epochs (its first restores the bootstrap savepoint): a rescale
    # asked after epoch r runs its barrier in r+1 and its rescaling epoch in r+2; the
    # ``a`` epochs after that one are normal epochs at the new parallelism
    outs, backs = [], []
    asked = w
    actions: dict[int, Any] = {}
    for _ in range(args.cycles):
        outs.append(asked)
        actions[asked] = lambda c: c.rescale(operators={"count": p_to})
        asked += 2 + a
        backs.append(asked)
        actions[asked] = lambda c: c.rescale(operators={"count": p_from})
        asked += 2 + a
    stopped: dict[str, Any] = {}

    def stop(client: Any) -> Any:
        stopped["future"] = future = client.stop_with_savepoint()
        return future

    actions[asked] = stop
    job1 = Script(actions)
    client1 = start(spark, args, backend, work, savepoint, p_from, job1, in_place)
    acc1 = client1.get_job_execution_result().result(3600).get_all_accumulator_results()
    ended = time.perf_counter()
    applied = [f.result(1)["count"] for f in job1.futures[:-1]]
    assert applied == [p_to, p_from] * args.cycles, applied
    taken = str(stopped["future"].result(1))
    savepoint_epoch = asked + 1

    def median(xs: Any) -> float:
        return statistics.median(list(xs))

    normal_to = median(cost(job1, r + e) for r in outs for e in range(3, 3 + a))
    normal_from = median(cost(job1, r + e) for r in backs for e in range(3, 3 + a))
    rescale_out = median(cost(job1, r + 2) for r in outs)
    rescale_in = median(cost(job1, r + 2) for r in backs)
    barrier = median(cost(job1, r + 1) for r in outs + backs)
    row: dict[str, Any] = {
        "backend": backend,
        "keep state in place": in_place,
        "keys": args.keys,
        "records_per_epoch": args.records,
        "from": p_from,
        "to": p_to,
        "cycles": args.cycles,
        "key groups kept": acc1.get("key_groups_kept.count", 0),
        "key groups read": acc1.get("key_groups_read.count", 0),
        "normal epoch at to s": normal_to,
        "normal epoch at from s": normal_from,
        "barrier epoch (checkpoint) s": barrier,
        "savepoint epoch s": cost(job1, savepoint_epoch),
        "rescaling epoch from->to s": rescale_out,
        "rescaling epoch to->from s": rescale_in,
        "rescale out / normal": rescale_out / normal_to,
        "rescale in / normal": rescale_in / normal_from,
        "barrier + rescaling epoch s": barrier + rescale_out,
    }
    if not restart:
        return row
    # restart from the savepoint at p_to: job 1's end (its savepoint epoch's end to its
    # result), then a new job until its first epoch ended; job 2 runs --cycles times
    stop_s = ended - job1.ends[savepoint_epoch]
    restarts, normal2 = [], []
    for _ in range(args.cycles):
        job2 = Script({a + 1: lambda c: c.cancel()})
        t0 = time.perf_counter()
        start(spark, args, backend, work, taken, p_to, job2).get_job_execution_result().result(3600)
        restarts.append(stop_s + cost(job2, 1, since=t0))
        normal2 += [cost(job2, e) for e in range(2, len(job2.ends))]
    restart_s = median(restarts)
    row.update(
        {
            "normal epoch at to, job 2 s": median(normal2),
            "restart from savepoint, first epoch at to s": restart_s,
            "restart / normal": restart_s / normal_to,
            "restart / rescale out": restart_s / rescale_out,
            "savepoint epoch + restart s": cost(job1, savepoint_epoch) + restart_s,
        }
    )
    return row


#: (row label, key in a measured row, unit) of the page's table
FIGURES = (
    ("normal epoch at the new parallelism (s)", "normal epoch at to s", "s"),
    ("rescaling epoch, out (s)", "rescaling epoch from->to s", "s"),
    ("**rescaling epoch / normal epoch**, out", "rescale out / normal", "x"),
    ("rescaling epoch / normal epoch, back in", "rescale in / normal", "x"),
    ("barrier epoch (its checkpoint) (s)", "barrier epoch (checkpoint) s", "s"),
    ("savepoint epoch (s)", "savepoint epoch s", "s"),
    ("restart from savepoint at the new parallelism (s)", RESTART, "s"),
    ("restart / normal epoch", "restart / normal", "x"),
    ("**restart / rescaling epoch**", "restart / rescale out", "x"),
    ("key groups kept in place / read", "key groups", ""),
)


def tables(rows: list[dict[str, Any]]) -> list[Table]:
    """One column per (backend, keep state in place) run, one row per figure."""
    columns = [
        "",
        *(f"{r['backend']}, {'in place' if r['keep state in place'] else 'reload'}" for r in rows),
    ]
    out = []
    for label, key, unit in FIGURES:
        cells = []
        for r in rows:
            if key == "key groups":
                cells.append(f"{r['key groups kept']} / {r['key groups read']}")
            elif key not in r:
                cells.append("-")
            elif unit == "x":
                cells.append(f"{ratio(r[key])}x")
            else:
                cells.append(f"{r[key]:.2f}")
        out.append((label, *cells))
    first = rows[0]
    caption = (
        f"{first['keys']:,} keys, {first['records_per_epoch']:,} records per epoch, "
        f"count at {first['from']} -> {first['to']} -> {first['from']}, medians over "
        f"{first['cycles']} cycle(s)"
    )
    return [Table(tuple(columns), tuple(out), caption)]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--records", type=int, default=100_000, help="records per epoch")
    p.add_argument("--backends", default="heap,rocksdb")
    p.add_argument("--warm", type=int, default=4, help="epochs before the first rescale")
    p.add_argument("--after", type=int, default=4, help="epochs after each rescale")
    p.add_argument("--from", dest="from_p", type=int, default=2)
    p.add_argument("--to", dest="to_p", type=int, default=4)
    p.add_argument("--cycles", type=int, default=3, help="rescales out and back (medians)")
    p.add_argument("--json", help="also write the figures to this file")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.rescale", argv)

    from benchmarks.peers import spark_stateful as peers

    spark = peers.build_spark("streamstate-rescale")
    spark.sparkContext.setLogLevel("ERROR")
    load_before = os.getloadavg()
    rows = []
    work = tempfile.mkdtemp(prefix="ss-rescale-bench-")
    try:
        t0 = time.perf_counter()
        savepoint = bootstrap(spark, args.keys, f"{work}/bootstrap")
        print(f"bootstrap of {args.keys} keys: {time.perf_counter() - t0:.1f} s", flush=True)
        for backend in args.backends.split(","):
            for in_place in (True, False):  # after vs before keeping state in place
                run_dir = tempfile.mkdtemp(prefix=f"{backend}-", dir=work)
                row = measure(spark, args, backend, savepoint, run_dir, in_place, in_place)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"\nload average before {load_before}, after {load_after}")
    for r in rows:
        print(
            f"\n{r['backend']}: {r['keys']} keys, {r['from']} -> {r['to']}, keep state in "
            f"place {r['keep state in place']}, key groups kept {r['key groups kept']}, "
            f"read {r['key groups read']}"
        )
        for k, v in r.items():
            if isinstance(v, float):
                print(f"  {k:45s} {v:8.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "args": vars(args),
                    "load_before": load_before,
                    "load_after": load_after,
                    "rows": rows,
                },
                f,
                indent=2,
            )
    run = sitting.run(tables(rows))
    print(f"\nload average (1 min): {run.load_average} (start-end)")
    for table in run.tables:
        print("\n" + "\n".join(render_table(table)))
    if args.result:
        record("rescale", run)


if __name__ == "__main__":
    main()
