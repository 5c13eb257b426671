"""The cluster bed itself and the smoke test on it: three worker machines, a driver machine,
checkpoints in the object store (tests/cluster/bed.py)."""

from __future__ import annotations

from tests.cluster.checks import machine_paths_in_store
from tests.cluster.jobs import run_reports

SHELL = ["sh", "-c"]


def test_machines_share_nothing_but_the_network(bed):
    bed.run("w1", [*SHELL, "echo w1 > /tmp/probe && echo w1 > $HOME/probe"], 30)
    on_w2 = bed.run("w2", [*SHELL, "hostname; ls /tmp/probe $HOME/probe; ps -e -o comm="], 30)
    lines = on_w2.stdout.split()
    assert lines[0] == "w2"
    assert "No such file" in on_w2.stderr and on_w2.stderr.count("probe") == 2
    # w2 sees its own processes only: w1's Spark worker JVM is not among them
    assert on_w2.stdout.count("java") == 1
    # ... and reaches the others by name over the bridge
    reach = bed.run(
        "w2",
        [
            "python",
            "-c",
            "import socket; socket.create_connection(('master', 7077), 5); print('ok')",
        ],
        30,
    )
    assert reach.stdout.strip() == "ok", reach.stderr


def test_keyed_count_with_checkpoints_in_the_object_store(bed):
    reports = run_reports(
        bed,
        "driver",
        ["count", "--master", bed.spark_master, "--checkpoints", bed.s3_url("smoke")]
        + ["--run", "hashmap:3", "--run", "rocksdb:2", "--records", "2000", "--keys", "40"],
        timeout=600,
    )
    assert [(r["backend"], r["parallelism"], r["correct"]) for r in reports] == [
        ("hashmap", 3, True),
        ("rocksdb", 2, True),
    ]
    workers = {w.name for w in bed.workers}
    for r in reports:
        hosts = {w.split(":")[0] for ws in r["subtask_workers"].values() for w in ws}
        # every subtask ran on a worker machine (which ones is Spark's choice)
        assert hosts and hosts <= workers, r["subtask_workers"]
        assert bed.s3fs().exists(f"bed/smoke/{r['checkpoints'].rsplit('/', 1)[1]}/{r['job_id']}")
    assert machine_paths_in_store(bed, "smoke") == []


def test_state_directories_the_machines_do_not_share_are_refused(bed):
    """No storage settings (epoch versions in the driver's temp dir) and a checkpoint
    directory on a local path (each machine its own /tmp): refused at the first epoch,
    naming the setting, instead of failing after a move or restoring private copies."""
    reports = run_reports(
        bed,
        "driver",
        ["count", "--master", bed.spark_master, "--records", "200", "--keys", "10"]
        + ["--run", "hashmap:2:none", "--run", "rocksdb:2:file:///tmp/chk"],
        timeout=600,
    )
    assert [(r.get("error"), r.get("cause")) for r in reports] == [
        ("JobExecutionError", "StorageNotSharedError"),
    ] * 2
    default, local = (r["message"] for r in reports)
    assert "/tmp/streamstate-0/jobs/" in default and "execution.epoch.state-dir" in default
    assert "execution.checkpointing.dir" in default
    assert "file:///tmp/chk" not in local and "/tmp/chk/" in local
    assert "the checkpoint directory is a local path" in local


def test_a_bed_of_other_code_still_holds_its_slot(tmp_path):
    """Two engineers' beds on one box: a bed.json with fields this checkout does not know
    (another branch's bed) is read, and its slot is not reclaimed while its machine runs."""
    import json
    import subprocess
    import time

    from tests.cluster.bed import Bed, _comm, _slot_stale

    init = subprocess.Popen(["sleep", "60"])  # stands in for the machine's PID 1
    try:
        # Popen may return before the child has exec'd (it is still "python" then)
        deadline = time.monotonic() + 30
        while _comm(init.pid) != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _comm(init.pid) == "sleep"
        machine = {"name": "w1", "index": 10, "address": "10.29.249.10", "netns": "x"}
        machine.update(root=str(tmp_path / "w1"), init_pid=init.pid, cut=False)
        bed = {"slot": 249, "root": str(tmp_path), "s3_endpoint": "http://10.29.249.1:1"}
        bed.update(s3_environment={}, store_pid=0, machines=[machine], added_later=True)
        (tmp_path / "bed.json").write_text(json.dumps(bed))
        assert Bed.load(str(tmp_path)).machines["w1"].address == "10.29.249.10"
        slot = tmp_path / "249"
        slot.write_text(str(tmp_path))
        assert not _slot_stale(str(slot))
    finally:
        init.kill()
        init.wait()
    assert _slot_stale(str(slot))
