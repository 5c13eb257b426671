"""The keyed count (K1) and the state-scaling workload on the cluster bed, streamstate next
to Spark's ``transformWithState`` on the same cluster, interleaved in one run.

Builds the bed of tests/cluster/bed.py (needs root): 3 worker machines of one core each,
a driver machine, SeaweedFS as the only shared storage. Spark's streaming checkpoints need
a Hadoop file system on the store: this Spark has no ``s3a`` (hadoop-aws and the AWS SDK
are not in the pip install, and no registry reached here has them), so the bucket is
mounted with SeaweedFS's own FUSE client (``weed mount`` of the bucket's directory: the same
objects that the S3 API serves) at the same path, ``/tmp/s3``, on the driver and every
worker; the peer's input files and checkpoint location live there. streamstate writes its
checkpoints to ``s3://`` through the S3 API. One driver process (``drive``, on the driver
machine) holds one Spark application with an executor on each worker and runs, in turn:

* **K1** (benchmarks/keyed_count.py): ``--records`` records ``(f"k{i % keys}", 1)``, a
  running count per key, as 1 epoch and as 10 epochs, parallelism 3; streamstate with a
  checkpoint every epoch on S3 (heap and RocksDB backends) and the peer
  (benchmarks/peers/spark_stateful.py: Parquet input, one file per micro-batch, RocksDB
  state store, every micro-batch committed) alternately, ``--repeat`` times each; records/s.
* **State scaling** (benchmarks/state_scaling.py): ``N`` keys of state built by the stream
  itself (epochs of ``--epoch-records`` records, one per key), then ``--epochs`` epochs of
  ``--epoch-records`` records touching ``--touched`` keys each; a checkpoint every epoch
  (Spark commits every micro-batch); the median epoch (streamstate's epoch time, Spark's
  trigger execution time) over those epochs, both engines on the same epochs of keys.

Ratios are streamstate's speed over Spark's in the same run (>1: streamstate faster); every
figure carries the load average when it was taken (the box is shared). Everything is torn
down at the end.

Run (as root): ``python -m benchmarks.cluster_throughput
[--records 100000] [--sizes 10000,100000,1000000] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from benchmarks.cluster_bed import benchmark_bed
from benchmarks.report import render_table
from benchmarks.results import Sitting, Table, publish, ratio, records_per_s

MOUNT = "/tmp/s3"
PEER = "transformWithState"
PARALLELISM = 3
SIGNING_KEY = "bed-benchmark-signing-key"


def _load() -> float:
    return round(os.getloadavg()[0], 1)


# --------------------------------------------------------------------- the driver's side
def drive(args: argparse.Namespace) -> None:
    """The measurements, in one Spark application on the bed; one ``REPORT`` line each."""
    from benchmarks import keyed_count, state_scaling
    from benchmarks.peers import spark_stateful as peers
    from tests.cluster.jobs import cluster_session, wait_executors

    spark = cluster_session(args.master, peers.peer_spark_conf(PARALLELISM))
    wait_executors(spark, PARALLELISM)
    peer_dir = f"{MOUNT}/{args.run}/peer"
    os.makedirs(peer_dir, exist_ok=True)
    runs = iter(range(10**6))

    def checkpoints() -> str:
        return f"{args.checkpoints.rstrip('/')}/{next(runs)}"

    def report(row: dict[str, Any]) -> None:
        print("REPORT " + json.dumps({**row, "load": _load()}), flush=True)

    keyed_count.SOURCE_PARALLELISM[0] = PARALLELISM
    data = keyed_count.workload(args.records, args.keys)
    # untimed warm-up: executors' Python workers, subtask hosts, the peer's classes
    keyed_count.run_streamstate(spark, data[:20_000], 2, True, PARALLELISM, checkpoints())
    peers.run_transform_with_state(spark, 20_000, 2, 1_000, work_dir=peer_dir)
    for backend in args.backends.split(","):
        keyed_count.STATE_BACKEND[0] = backend
        for epochs in (1, 10):
            for _ in range(args.repeat):
                rps, acc = keyed_count.run_streamstate(
                    spark, data, epochs, True, PARALLELISM, checkpoints()
                )
                report(
                    {
                        "workload": "K1",
                        "engine": "streamstate",
                        "backend": backend,
                        "epochs": epochs,
                        "records_per_s": round(rps),
                        "cache_misses": acc.get("cache_misses"),
                    }
                )
                rps = peers.run_transform_with_state(
                    spark, args.records, epochs, args.keys, work_dir=peer_dir
                )
                report(
                    {
                        "workload": "K1",
                        "engine": PEER,
                        "backend": backend,
                        "epochs": epochs,
                        "records_per_s": round(rps),
                    }
                )
    scaling = argparse.Namespace(
        backend=args.scaling_backend,
        records=args.epoch_records,
        epochs=args.epochs,
        touched=args.touched,
        checkpoint_every=1,
        changelog=False,
    )
    for keys in (int(s) for s in args.sizes.split(",") if s):
        row = state_scaling.run(spark, scaling, keys, None, "/tmp", PARALLELISM, checkpoints())
        report(
            {
                "workload": "scaling",
                "engine": "streamstate",
                "backend": args.scaling_backend,
                "keys": keys,
                "median_epoch_ms": round(row["median_epoch_ms"]),
                "p90_epoch_ms": round(row["p90_epoch_ms"]),
                "cache_misses": row["cache_misses"],
            }
        )
        preload = state_scaling.preload_records(keys, args.epoch_records)
        key_of = state_scaling.KeyOf(args.epoch_records, args.touched, keys, preload)
        size = args.epoch_records
        batches = [
            [key_of(i) for i in range(b * size, (b + 1) * size)]
            for b in range((preload + args.epochs * size) // size)
        ]
        progress = peers.run_batches(spark, batches, PEER, work_dir=peer_dir)
        times = sorted(p["ms"] for p in progress[-args.epochs :])
        report(
            {
                "workload": "scaling",
                "engine": PEER,
                "backend": "rocksdb",
                "keys": keys,
                "median_epoch_ms": round(statistics.median(times)),
                "p90_epoch_ms": round(times[int(0.9 * (len(times) - 1))]),
            }
        )
    spark.stop()


# ----------------------------------------------------------------------- the host's side
class MountError(RuntimeError):
    """The bucket could not be mounted on a machine (names the log)."""


def filer_address(bed: Any) -> str:
    """``ip:port.grpc_port`` of the store's filer (the bed's ``weed server``, read from its
    command line: the bed records only the S3 endpoint)."""
    with open(f"/proc/{bed.store_pid}/cmdline") as f:
        flags = dict(
            a.split("=", 1) for a in f.read().split("\0") if a.startswith("-") and "=" in a
        )
    return f"{flags['-ip']}:{flags['-filer.port']}.{flags['-filer.port.grpc']}"


def mount_bucket(bed: Any, name: str) -> None:
    """The bed's bucket at ``MOUNT`` on machine ``name`` (``weed mount``: a process of the
    machine, gone with it; its cache on the machine's own disk)."""
    from tests.cluster.bed import BUCKET, VENV_BIN

    os.makedirs(os.path.join(bed.machines[name].tmp, MOUNT.removeprefix("/tmp/")), exist_ok=True)
    bed.spawn(
        name,
        [os.path.join(VENV_BIN, "weed"), "mount", f"-filer={filer_address(bed)}"]
        + [f"-filer.path=/buckets/{BUCKET}", f"-dir={MOUNT}", "-cacheDir=/tmp/weed-cache"],
        "weed-mount",
    )
    deadline = time.monotonic() + 60
    while bed.run(name, ["mountpoint", "-q", MOUNT], 10).returncode != 0:
        if time.monotonic() > deadline:
            raise MountError(f"no mount on {name}: {bed.log(name, 'weed-mount')[-2000:]}")
        time.sleep(0.5)


def measure(argv: list[str]) -> list[dict[str, Any]]:
    """Build the bed, mount the bucket, run :func:`drive` on the driver machine; its rows."""
    run = f"throughput-{int(time.time())}"
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    with benchmark_bed() as bed:
        for machine in ["driver", *(w.name for w in bed.workers)]:
            mount_bucket(bed, machine)
        command = [sys.executable, "-m", "benchmarks.cluster_throughput", "drive"]
        command += ["--master", bed.spark_master, "--run", run]
        command += ["--checkpoints", bed.s3_url(f"{run}/streamstate"), *argv]
        driver = bed.spawn(
            "driver",
            command,
            f"drive-{run}",
            {"STREAMSTATE_CHECKPOINT_KEY": SIGNING_KEY},
        )
        seen = 0
        while True:
            code = driver.poll()
            lines = bed.log("driver", f"drive-{run}").splitlines()
            for line in [ln for ln in lines if ln.startswith("REPORT ")][seen:]:
                rows.append(json.loads(line.removeprefix("REPORT ")))
                print(json.dumps(rows[-1]), flush=True)
                seen += 1
            if code is not None:
                break
            time.sleep(2)
        if code != 0:  # its output without the JVM's stack frames
            log = bed.log("driver", f"drive-{run}").splitlines()
            text = "\n".join(ln for ln in log if not ln.startswith("\tat "))
            raise RuntimeError(f"the driver failed:\n{text[-8000:]}")
    print(f"whole run {time.monotonic() - t0:.0f} s", flush=True)
    return rows


def tables(rows: list[dict[str, Any]]) -> list[Table]:
    """The K1 and state-scaling tables; ratio: streamstate's speed over Spark's."""
    k1 = [r for r in rows if r["workload"] == "K1"]
    scaling = [r for r in rows if r["workload"] == "scaling"]
    return [
        Table(
            (
                "streamstate backend",
                "epochs",
                "streamstate (records/s)",
                f"Spark {PEER} (records/s)",
                "ratio",
                "load average",
            ),
            tuple(
                (
                    mine["backend"],
                    str(mine["epochs"]),
                    records_per_s(mine["records_per_s"]),
                    records_per_s(peer["records_per_s"]),
                    ratio(mine["records_per_s"] / peer["records_per_s"]),
                    f"{mine['load']}, {peer['load']}",
                )
                for mine, peer in zip(k1[::2], k1[1::2], strict=True)
            ),
            "K1: the keyed count on 3 worker machines, checkpoint every epoch / micro-batch",
        ),
        Table(
            (
                "keys",
                "streamstate median (p90) ms",
                f"Spark {PEER} median (p90) ms",
                "ratio",
                "load average",
            ),
            tuple(
                (
                    f"{mine['keys']:,}",
                    f"{mine['median_epoch_ms']} ({mine['p90_epoch_ms']})",
                    f"{peer['median_epoch_ms']} ({peer['p90_epoch_ms']})",
                    ratio(peer["median_epoch_ms"] / mine["median_epoch_ms"]),
                    f"{mine['load']}, {peer['load']}",
                )
                for mine, peer in zip(scaling[::2], scaling[1::2], strict=True)
            ),
            "State scaling: epoch time after the state is built, both RocksDB, "
            "checkpoint every epoch / micro-batch",
        ),
    ]


def _workload_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=100_000, help="K1's records")
    p.add_argument("--keys", type=int, default=10_000, help="K1's keys")
    p.add_argument("--repeat", type=int, default=1, help="K1's runs per engine and setting")
    p.add_argument("--backends", default="hashmap,rocksdb", help="K1's streamstate backends")
    p.add_argument("--sizes", default="10000,100000,1000000", help="state scaling's keys")
    p.add_argument("--scaling-backend", choices=("heap", "rocksdb"), default="rocksdb")
    p.add_argument("--epoch-records", type=int, default=50_000)
    p.add_argument("--epochs", type=int, default=6, help="measured epochs per size")
    p.add_argument("--touched", type=int, default=5_000, help="keys touched per epoch")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["drive"]:
        p = argparse.ArgumentParser(prog="python -m benchmarks.cluster_throughput drive")
        p.add_argument("--master", required=True)
        p.add_argument("--run", required=True)
        p.add_argument("--checkpoints", required=True)
        _workload_options(p)
        drive(p.parse_args(argv[1:]))
        return
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.cluster_throughput", description=__doc__.splitlines()[0]
    )
    _workload_options(p)
    p.add_argument("--json", help="write the rows to this file")
    p.add_argument("--result", action="store_true", help="record the run in benchmarks/results")
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.cluster_throughput", argv)
    forwarded = [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("json", "result")
    ]
    rows = measure(forwarded)
    run = sitting.run(tables(rows))
    print(f"\nload average (1 min): {run.load_average} (start-end)")
    for table in run.tables:
        print("\n" + "\n".join(render_table(table)))
    publish(
        "cluster_throughput",
        lambda: run,
        args.result,
        args.json,
        {"args": vars(args), "rows": rows},
    )


if __name__ == "__main__":
    main()
