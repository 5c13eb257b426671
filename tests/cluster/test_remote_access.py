"""A job used from machines other than its driver's, and moved between clusters, with its
state in S3 only (tests/cluster/bed.py; the job: tests/cluster/remote_job.py). One scenario
in three steps, on the bed every test of tests/cluster shares; the state goes RocksDB ->
heap -> RocksDB, and each backend's job is steered from the ``client`` machine:

1. A job on the ``driver`` machine (the bed's cluster, parallelism 3, RocksDB incremental
   checkpoints on S3) binds its REST and query servers to every interface with a token.
   From the ``client`` machine, while the job is held mid-epoch (:func:`steer`):
   ``streamstate list`` and ``info``, the REST API (401 without the token), queryable
   state looked up at the query hosts on the worker machines (the driver only hands out
   their route; each host printed the worker address it listens on), the dashboard in
   headless Chromium; then ``streamstate savepoint`` to S3 and ``streamstate cancel``.
2. A second Spark cluster (its own master and two worker machines) restores that savepoint
   on the heap backend at parallelism 2 on a driver machine of its own, while the
   ``client`` machine reads the savepoint as a DataFrame (State Processor API, its own
   SparkSession). The restored job is steered from the ``client`` as in step 1, at the
   second cluster's query hosts; ``streamstate stop`` from the ``driver`` machine ends it
   with a savepoint on S3, which ``streamstate state`` / ``describe`` / ``checkpoints``
   read there: exactly the totals of a prefix of the input, past where step 1 stopped.
3. That heap savepoint restored on the first cluster on RocksDB at parallelism 3, run to
   the end of the input while the ``client`` reads it as a DataFrame: the job's last
   checkpoint holds exactly the totals of the whole input.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.cluster.bed import ROOT, SPARK_PORT, Bed
from tests.cluster.checks import machine_paths_in_store
from tests.cluster.remote_job import KEYS, totals_after
from tests.cluster.test_machine_loss import gate_holder, release, wait_for

JOB = os.path.join(ROOT, "tests", "cluster", "remote_job.py")
RUN = "remote"
RECORDS = 180
EPOCH_RECORDS = 15
#: held here: the reads and the savepoint (first gate), the cancel (second), the stop (third)
FIRST, SECOND, THIRD = 30, 60, 90
TOKEN = "bed-remote-token"
#: every driver and reader of the deployment signs and checks checkpoints with this key
SIGNING = {"STREAMSTATE_CHECKPOINT_KEY": "bed-deployment-signing-key"}
MASTER_UI = 8080

#: what later steps need from earlier ones (the steps are one scenario, in file order)
found: dict[str, Any] = {}


def run_command(
    bed: Bed, master: str, parallelism: int, backend: str, restore: str | None
) -> list[str]:
    """``streamstate run`` of the job with its servers open to other machines."""
    defines = {
        "execution.epoch.max-records": str(EPOCH_RECORDS),
        "rest.bind-address": "0.0.0.0",
        "rest.token": TOKEN,
        "queryable-state.bind-address": "0.0.0.0",
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.executorEnv.PYTHONPATH": ROOT,
        "spark.ui.enabled": "false",
    }
    return (
        ["streamstate", "run", "--master", master, "-p", str(parallelism)]
        + (["--from-savepoint", restore] if restore else [])
        + [arg for k, v in defines.items() for arg in ("-D", f"{k}={v}")]
        + [JOB, "--", "--checkpoints", bed.s3_url(f"{RUN}/chk"), "--gates"]
        + [bed.s3_url(f"{RUN}/gates"), "--records", str(RECORDS), "--backend", backend]
        + [arg for g in (FIRST, SECOND, THIRD) for arg in ("--gate", str(g))]
    )


def result(got: subprocess.CompletedProcess[str]) -> Any:
    """The ``RESULT {json}`` a tests.cluster.remote_client verb printed."""
    assert got.returncode == 0, f"{got.stdout[-3000:]}\n{got.stderr[-6000:]}"
    return json.loads(got.stdout.split("RESULT ", 1)[1].splitlines()[0])


def cli(bed: Bed, machine: str, *args: str, timeout: float = 120) -> str:
    got = bed.run(machine, ["streamstate", *args], timeout, SIGNING)
    assert got.returncode == 0, f"streamstate {' '.join(args)}\n{got.stdout}\n{got.stderr}"
    return got.stdout


def served_at(bed: Bed, machine: str, log_name: str, driver: subprocess.Popen[bytes]) -> Any:
    """(job id, REST address, query address) from the line the job printed at start."""

    def probe() -> Any:
        if driver.poll() is not None:
            pytest.fail(f"the job ended\n{bed.log(machine, log_name)[-6000:]}")
        return re.search(
            r"streamstate: job '[^']*' \((\w+)\): (http://\S+)/ \(([^)]*)\) "
            r"\(queryable state: ([^;\s]+); ([^)]*)\)",
            bed.log(machine, log_name),
        )

    m = wait_for("the job's address line", probe, 300, lambda: bed.log(machine, log_name))
    # the queryable-state server says where it listens too (bound to every interface)
    assert m.group(5).startswith("bound to 0.0.0.0, reachable from other machines"), m.group(0)
    return m.group(1), m.group(2), m.group(3), m.group(4)


def listening(bed: Bed, address: str) -> list[str]:
    """The lines the query hosts on the machine of ``address`` printed where they listen
    (into their executors' stderr: ``<work dir>/app-*/<executor>/stderr``)."""
    (machine,) = [m for m in bed.machines.values() if m.address == address]
    lines = []
    for path in glob.glob(os.path.join(machine.tmp, "spark-work", "app-*", "*", "stderr")):
        with open(path, errors="replace") as f:
            lines += [ln for ln in f if ln.startswith("streamstate: query host of job ")]
    return lines


def queried(bed: Bed, queryable: str, job_id: str, workers: set[str]) -> int:
    """Every key's total looked up from the ``client`` machine, each lookup answered by a
    query host on one of the ``workers`` (addresses) that said where it listens; the count
    of first records the totals are of."""
    got = result(
        bed.run(
            "client",
            ["python", "-m", "tests.cluster.remote_client", "query", queryable, TOKEN, job_id],
            120,
        )
    )
    # the driver checked the token and named the hosts; the hosts answered every lookup
    assert (got["direct"], got["via_driver"]) == (1 + KEYS, 0), got
    assert got["hosts"] and {h.rsplit(":", 1)[0] for h in got["hosts"]} <= workers, got
    for host in got["hosts"]:  # each printed the routable address it listens on
        said = listening(bed, host.rsplit(":", 1)[0])
        expected = f"job {job_id} on "
        mine = [ln for ln in said if expected in ln and f"listening on {host} " in ln]
        assert mine and "reachable from other machines" in mine[0], (host, said)
    as_of = prefix_of(got["values"])
    # one consistent epoch's values: the totals of the records before some epoch end
    assert as_of is not None and as_of % EPOCH_RECORDS == 0, got
    return as_of


def held(bed: Bed, value: int, driver: subprocess.Popen[bytes], machine: str) -> str:
    fs = bed.s3fs()

    def probe() -> str | None:
        if driver.poll() is not None:
            pytest.fail(f"the job ended\n{bed.log(machine, 'job')[-6000:]}")
        return gate_holder(fs, RUN, value)

    return str(wait_for(f"gate {value}", probe, 420, lambda: bed.log(machine, "job")[-6000:]))


def prefix_of(totals: dict[str, int]) -> int | None:
    """The count of first records whose running totals ``totals`` are (None: no prefix)."""
    matching = [n for n in range(RECORDS + 1) if totals_after(n) == totals]
    return matching[0] if matching else None


@dataclass
class Cluster:
    """A Spark standalone cluster on the bed besides the bed's own."""

    bed: Bed
    master: str
    worker_names: list[str]

    @property
    def workers(self) -> int:
        return len(self.worker_names)

    @property
    def url(self) -> str:
        return f"spark://{self.bed.machines[self.master].address}:{SPARK_PORT}"

    def alive(self) -> int:
        """How many workers the master has ALIVE."""
        address = self.bed.machines[self.master].address
        try:
            with urllib.request.urlopen(f"http://{address}:{MASTER_UI}/json/", timeout=5) as r:
                workers = json.load(r).get("workers", [])
        except OSError:
            return 0
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def wait(self) -> str:
        """Its master URL, once every worker registered."""
        wait_for(
            f"the {self.workers} workers of {self.url}",
            lambda: self.alive() >= self.workers,
            300,
            lambda: self.bed.log(self.master, "spark-master")[-3000:],
        )
        return self.url


@pytest.fixture(scope="module")
def second_cluster(bed: Bed) -> Iterator[Cluster]:
    """Another Spark standalone cluster on the bed: a master and two worker machines of
    its own (the object store is the only thing it shares with the first). Started when
    the first step starts, so that it boots while that step's job runs."""
    names = ["c2-master", "c2-w1", "c2-w2"]
    try:
        for name in names:
            bed.add_machine(name)
        cluster = Cluster(bed, names[0], names[1:])
        master = bed.machines[cluster.master].address
        bed.spawn(
            cluster.master,
            [bed._spark_class(), "org.apache.spark.deploy.master.Master"]
            + ["--host", master, "--port", str(SPARK_PORT), "--webui-port", str(MASTER_UI)],
            "spark-master",
        )
        for name in names[1:]:
            bed.spawn(
                name,
                [bed._spark_class(), "org.apache.spark.deploy.worker.Worker", cluster.url]
                + ["--host", bed.machines[name].address, "--cores", "1", "--memory", "1g"]
                + ["--work-dir", "/tmp/spark-work", "--webui-port", "8081"],
                "spark-worker",
            )
        yield cluster
    finally:
        for name in names:
            if name in bed.machines:
                bed.lose(name)


def steer(bed: Bed, job_id: str, address: str, queryable: str, workers: set[str]) -> int:
    """From the ``client`` machine, with the token: ``streamstate list`` and ``info``, the
    REST API, the CLI refused without the token, every key's total at the query hosts on
    ``workers``, the dashboard. The count of first records the queried totals are of."""
    listed = cli(bed, "client", "list", "--address", address, "--token", TOKEN)
    assert job_id in listed and "RUNNING" in listed, listed
    info = cli(bed, "client", "info", job_id, "--address", address, "--token", TOKEN)
    assert "bed-remote" in info and "sums" in info, info
    client = ["python", "-m", "tests.cluster.remote_client"]
    got = result(bed.run("client", [*client, "rest", address, TOKEN, job_id], 60))
    assert (got["anonymous"], got["wrong"], got["with_token"]) == (401, 403, 200), got
    assert got["state"] == "RUNNING" and got["epochs"] >= 1, got
    # the CLI without the token: refused, naming it
    refused = bed.run("client", ["streamstate", "list", "--address", address], 60)
    assert refused.returncode != 0 and "token" in refused.stderr.lower(), refused

    as_of = queried(bed, queryable, job_id, workers)

    shot = f"/tmp/dashboard-{job_id}.png"
    got = result(bed.run("client", [*client, "dashboard", address, TOKEN, job_id, shot], 180))
    print(f"dashboard from the client machine: {got}")
    assert got["checkpoint_rows"] >= 1 and got["running"] and not got["token_in_url"], got
    assert got["screenshot_bytes"] > 10_000 and got["errors"] == [], got
    return as_of


def test_a_job_is_watched_and_steered_from_another_machine(bed, second_cluster):
    """Step 1 (see the module docstring)."""
    fs = bed.s3fs()
    driver_address = bed.machines["driver"].address
    driver = bed.spawn(
        "driver", run_command(bed, bed.spark_master, 3, "rocksdb", None), "job", SIGNING
    )
    try:
        job_id, address, reach, queryable = served_at(bed, "driver", "job", driver)
        # addresses others can use, and the line says they can
        assert address.startswith(f"http://{driver_address}:"), address
        assert queryable.startswith(f"{driver_address}:"), queryable
        assert "reachable from other machines" in reach
        held(bed, FIRST, driver, "driver")

        workers = {m.address for m in bed.workers}
        assert 0 < steer(bed, job_id, address, queryable, workers) <= FIRST

        # a savepoint to S3 asked from the client; it completes once the gate opens
        asked = bed.spawn(
            "client",
            ["streamstate", "savepoint", job_id, bed.s3_url(f"{RUN}/savepoints")]
            + ["--address", address, "--token", TOKEN],
            "savepoint",
        )
        release(fs, RUN, FIRST)
        assert asked.wait(300) == 0, bed.log("client", "savepoint")
        path = bed.log("client", "savepoint").split("Savepoint completed. Path: ", 1)[1].split()[0]
        assert path.startswith(bed.s3_url(f"{RUN}/savepoints/")), path
        found["savepoint"] = path

        held(bed, SECOND, driver, "driver")
        cancelled = bed.spawn(
            "client",
            ["streamstate", "cancel", job_id, "--address", address, "--token", TOKEN],
            "cancel",
        )
        assert cancelled.wait(120) == 0, bed.log("client", "cancel")
        release(fs, RUN, SECOND)
        driver.wait(300)
        log = bed.log("driver", "job")
        assert "CANCELED" in log, log[-4000:]
    finally:
        for value in (FIRST, SECOND):
            release(fs, RUN, value)
        if driver.poll() is None:
            driver.kill()


def test_a_savepoint_in_s3_restores_on_another_cluster_and_reads_back(bed, second_cluster):
    """Step 2 (see the module docstring)."""
    savepoint = found.get("savepoint")
    if savepoint is None:
        pytest.skip("step 1 took no savepoint")
    fs = bed.s3fs()
    bed.add_machine("c2-driver")
    command = run_command(bed, second_cluster.wait(), 2, "hashmap", savepoint)
    driver = bed.spawn("c2-driver", command, "job", SIGNING)
    # meanwhile the client machine reads the savepoint as a DataFrame of its own Spark
    reader = start_reading(bed, savepoint, "read-state")
    try:
        job_id, address, _, queryable = served_at(bed, "c2-driver", "job", driver)
        assert address.startswith(f"http://{bed.machines['c2-driver'].address}:")
        held(bed, THIRD, driver, "c2-driver")
        # the restored job steered from the client, its state at the second cluster's hosts
        c2_workers = {bed.machines[n].address for n in second_cluster.worker_names}
        assert FIRST < steer(bed, job_id, address, queryable, c2_workers) <= THIRD
        # stopped with a savepoint from the first cluster's driver machine
        stop = bed.spawn(
            "driver",
            ["streamstate", "stop", job_id, "--savepoint-path", bed.s3_url(f"{RUN}/savepoints")]
            + ["--address", address, "--token", TOKEN],
            "stop",
        )
        release(fs, RUN, THIRD)
        assert stop.wait(300) == 0, bed.log("driver", "stop")
        stopped = bed.log("driver", "stop").split("Savepoint completed. Path: ", 1)[1].split()[0]
        assert driver.wait(300) == 0, bed.log("c2-driver", "job")[-6000:]
        assert reader.wait(300) == 0, bed.log("client", "read-state")[-6000:]
    finally:
        release(fs, RUN, THIRD)
        for proc in (driver, reader):
            if proc.poll() is None:
                proc.kill()
        bed.lose("c2-driver")

    # the first cluster's savepoint (RocksDB) as a DataFrame: the totals of an exact prefix,
    # past the first gate, where the savepoint was asked
    read = read_back(bed, "read-state")
    saved = prefix_of(read["totals"][savepoint])
    assert saved is not None and FIRST < saved <= SECOND, read

    # the stop savepoint of the second cluster (heap, parallelism 2) read with the CLI there
    upto = prefix_of(cli_totals(bed, stopped))
    # exactly the totals of the first `upto` records: each once, none lost in the move;
    # past the third gate, so the second cluster did the work after the savepoint
    assert upto is not None and THIRD < upto <= RECORDS, upto
    print(f"saved after {saved} records; restored on the second cluster, stopped after {upto}")
    found["stopped"], found["stopped_after"] = stopped, upto
    described = json.loads(cli(bed, "driver", "describe", stopped, "--json"))
    assert described["is_savepoint"] and described["operators"]["sums"]["parallelism"] == 2
    listed = json.loads(cli(bed, "driver", "checkpoints", bed.s3_url(f"{RUN}/chk"), "--json"))
    assert listed and {c["status"] for c in listed} == {"valid"}, listed
    assert machine_paths_in_store(bed, RUN) == []


def test_a_heap_savepoint_restores_on_rocksdb_back_on_the_first_cluster(bed):
    """Step 3 (see the module docstring)."""
    stopped = found.get("stopped")
    if stopped is None:
        pytest.skip("step 2 took no savepoint")
    command = run_command(bed, bed.spark_master, 3, "rocksdb", stopped)
    reader = start_reading(bed, stopped, "read-heap-state")
    try:
        done = bed.run("driver", command, 600, SIGNING)
        assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
        assert reader.wait(300) == 0, bed.log("client", "read-heap-state")[-6000:]
    finally:
        if reader.poll() is None:
            reader.kill()
    # the heap savepoint as a DataFrame: the totals the CLI read in step 2
    read = read_back(bed, "read-heap-state")
    assert prefix_of(read["totals"][stopped]) == found["stopped_after"], read
    # the RocksDB job's last checkpoint: every record of the input counted exactly once
    report = json.loads(done.stdout.split("REPORT ", 1)[1].splitlines()[0])
    last = report["checkpoint"]
    assert last and last.startswith(bed.s3_url(f"{RUN}/chk/{report['job_id']}/")), report
    assert cli_totals(bed, last) == totals_after(RECORDS)
    described = json.loads(cli(bed, "client", "describe", last, "--json"))
    assert described["operators"]["sums"]["parallelism"] == 3, described
    assert machine_paths_in_store(bed, RUN) == []


def start_reading(bed: Bed, path: str, log_name: str) -> subprocess.Popen[bytes]:
    """``remote_client read-state PATH`` started on the ``client`` machine (its own Spark
    reads the savepoint or checkpoint as a DataFrame); :func:`read_back` has its result."""
    command = ["python", "-m", "tests.cluster.remote_client", "read-state", path]
    return bed.spawn("client", command, log_name, SIGNING)


def read_back(bed: Bed, log_name: str) -> Any:
    """The ``RESULT`` of a :func:`start_reading` run, once it ended."""
    return json.loads(bed.log("client", log_name).split("RESULT ", 1)[1].splitlines()[0])


def cli_totals(bed: Bed, path: str) -> dict[str, int]:
    """The ``sums`` operator's totals of a savepoint or checkpoint, read with
    ``streamstate state`` on the ``driver`` machine."""
    rows = cli(bed, "driver", "state", path, "--operator", "sums", "--state", "total", "--json")
    return dict(json.loads(line) for line in rows.splitlines())
