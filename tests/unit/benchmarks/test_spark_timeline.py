"""The epoch timeline read from Spark's event log (benchmarks/spark_timeline.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.spark_timeline import epoch_jobs, epoch_phases, event_log_conf, read_events


def _job(job: int, epoch: int | None, at: int, stages: list[int]) -> dict[str, Any]:
    description = f"streamstate epoch {epoch}" if epoch is not None else "stop subtask hosts"
    return {
        "Event": "SparkListenerJobStart",
        "Job ID": job,
        "Submission Time": at,
        "Stage IDs": stages,
        "Properties": {"spark.job.description": description},
    }


def _stage(stage: int, at: int) -> dict[str, Any]:
    return {
        "Event": "SparkListenerStageSubmitted",
        "Stage Info": {"Stage ID": stage, "Submission Time": at},
    }


def _task(stage: int, launch: int, finish: int, run: int) -> dict[str, Any]:
    return {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": stage,
        "Task Info": {"Launch Time": launch, "Finish Time": finish},
        "Task Metrics": {"Executor Run Time": run},
    }


def _end(job: int, at: int) -> dict[str, Any]:
    return {"Event": "SparkListenerJobEnd", "Job ID": job, "Completion Time": at}


def _epoch(job: int, epoch: int, t: int, boundary: int) -> list[dict[str, Any]]:
    """A source stage (1 task) then a keyed stage (2 tasks), as a K6 epoch's job."""
    s, k = 2 * job, 2 * job + 1
    return [
        _job(job, epoch, t, [s, k]),
        _stage(s, t + 2),
        _task(s, t + 10, t + 150, 120),
        _stage(k, t + 152),
        _task(k, t + 150 + boundary, t + 230, 40),
        _task(k, t + 150 + boundary, t + 250, 60),
        _end(job, t + 251),
    ]


def _write(directory: Path, events: list[dict[str, Any]]) -> None:
    sub = directory / "eventlog_v2_local-1"
    sub.mkdir()
    (sub / "events_1_local-1").write_text("".join(json.dumps(e) + "\n" for e in events))
    (sub / "appstatus_local-1").write_text("")
    (sub / ".events_1_local-1.crc").write_text("not json")


def test_an_epoch_jobs_phases_follow_its_stages_in_order(tmp_path: Path) -> None:
    _write(tmp_path, _epoch(0, 7, 1000, 12))
    (job,) = epoch_jobs(read_events(str(tmp_path)))
    assert job.epoch == 7
    assert job.phases() == {
        "job": 251.0,
        "submit_to_first_task": 10.0,
        "stage 0 tasks": 140.0,
        "stage 0 task run": 120.0,
        "stage 0 -> 1": 12.0,
        "stage 1 tasks": 88.0,
        "stage 1 task run": 50.0,
        "last_task_to_job_end": 1.0,
    }


def test_medians_over_the_chosen_epochs_leave_other_jobs_out(tmp_path: Path) -> None:
    events = [
        *_epoch(0, 1, 0, 100),  # a warm-up epoch, not asked for
        *_epoch(1, 2, 1000, 10),
        *_epoch(2, 3, 2000, 20),
        *_epoch(3, 4, 3000, 30),
        _job(4, None, 4000, [99]),  # not an epoch's job
        _stage(99, 4001),
        _task(99, 4002, 4900, 800),
        _end(4, 4901),
        _job(5, 5, 5000, [11, 12]),  # never ended: the application stopped during it
    ]
    _write(tmp_path, events)
    phases = epoch_phases(str(tmp_path), epochs=[2, 3, 4, 5])
    assert phases["jobs"] == 3.0
    assert phases["stage 0 -> 1"] == 20.0
    assert phases["stage 1 task run"] == 50.0


def test_no_epoch_job_is_an_error_that_names_the_directory(tmp_path: Path) -> None:
    _write(tmp_path, [_job(0, None, 0, [1]), _end(0, 5)])
    with pytest.raises(ValueError, match=str(tmp_path)):
        epoch_phases(str(tmp_path))


def test_the_session_settings_ask_for_a_plain_log_in_that_directory(tmp_path: Path) -> None:
    conf = event_log_conf(str(tmp_path))
    assert conf["spark.eventLog.enabled"] == "true"
    assert conf["spark.eventLog.dir"] == f"file://{tmp_path}"
    assert conf["spark.eventLog.compress"] == "false"
