"""Subtasks stay on their executor: two executor JVMs (local-cluster), one Spark app.

Placement is tested with subtask hosts off, so that a subtask's state is found only in
the Python worker of the executor that ran it last: only preferred locations keep it
there. With hosts on (the default), both executors of local-cluster reach the same
hosts (one machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = {
    "no-placement": "false:false:hashmap",
    "placement-heap": "false:true:hashmap",
    "placement-rocksdb": "false:true:rocksdb",
    "default": "true:true:hashmap",
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    chk = tmp_path_factory.mktemp("cluster") / "chk"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(HERE, "cluster_job.py"),
            "local-cluster[2,1,1024]",
            str(chk),
            *CONFIGS.values(),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and len(lines) == len(CONFIGS), proc.stderr[-3000:]
    by_config = {r["config"]: r for r in (json.loads(ln[len("REPORT ") :]) for ln in lines)}
    out = {name: by_config[c] for name, c in CONFIGS.items()}
    for r in out.values():
        assert r["executors"] == 2
        assert r["correct"], r  # correctness never depends on placement
    return out


def in_place(report: dict) -> float:
    hits, misses = report["cache_hits"], report["cache_misses"]
    return hits / (hits + misses)


def test_without_preferred_locations_spark_moves_subtasks_and_state_is_rebuilt(reports):
    report = reports["no-placement"]
    # subtasks ran in more than one Python worker across the epochs: their state was
    # rebuilt from the epoch versions elsewhere, and the counts are right
    assert any(len(w) >= 2 for w in report["subtask_workers"].values()), report
    assert report["executor_moved"] > 0, report
    assert report["cache_misses"] > len(report["subtask_workers"]), report


@pytest.mark.parametrize("name", ["placement-heap", "placement-rocksdb"])
def test_preferred_locations_keep_each_subtask_on_its_executor(reports, name):
    report = reports[name]
    # each subtask runs on the executor of its previous epoch: its state, heap or an open
    # RocksDB database, is found in place in >= 95% of subtask-epochs
    assert in_place(report) >= 0.95, report
    assert report["executor_kept"] >= 0.95 * (report["executor_kept"] + report["executor_moved"])
    assert all(e.startswith("executor_") for e in report["subtask_executors"].values()), report
    if name == "placement-rocksdb":
        assert report["restores"].get("state_restores_reused", 0) > 0, report


def test_subtask_hosts_keep_state_in_place_across_executors_of_one_machine(reports):
    # both executors of local-cluster run on this machine: they reach the same hosts
    report = reports["default"]
    # stage 0 reads the collection in the task's Python worker (no state, no function: a
    # stateless source stage needs no host) and is counted neither as a hit nor a miss
    hosted = {s: w for s, w in report["subtask_workers"].items() if not s.startswith("0/")}
    assert hosted and len(hosted) < len(report["subtask_workers"]), report
    assert report["cache_misses"] == len(hosted)  # only each subtask's first epoch
    assert in_place(report) >= 0.95, report
    assert all(len(w) == 1 for w in hosted.values()), report
