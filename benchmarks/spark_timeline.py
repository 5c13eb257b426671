"""Where an epoch's Spark job spends its time, read from Spark's own event log.

A benchmark that wants the breakdown builds its session with :func:`event_log_conf`
(a plain-JSON event log in a directory of its own), runs its job, stops the session (so
that the log is complete), then calls :func:`epoch_phases`. Spark writes, per job, when it
was submitted and ended, and per stage and task when it was submitted, launched and
finished and how long the task ran in its executor (``Executor Run Time``: the Python
worker's part included). The epochs' jobs are found by their description,
``streamstate epoch <n>`` (``spark/runner.py``).

The phases of one epoch's job (milliseconds, wall clock of the driver's JVM):

- ``submit_to_first_task``: job submitted -> its first task launched (DAG scheduling,
  task serialization);
- per stage, in the order they ran: ``stage <i> tasks`` (first task launched -> last
  task finished) and ``stage <i> task run`` (the median task's executor run time);
- ``stage <i-1> -> <i>``: the last task of a stage finished -> the first task of the next
  one launched (the stage boundary: map output registered, next stage submitted);
- ``last_task_to_job_end``: the last task finished -> the job ended.

What happens in the Python worker before and after our function (its start, reading the
task's command, handing its output to the JVM) is inside the task figures; what happens
in the driver's Python before submission and after the job (planning the epoch, absorbing
its acks) is not in the log: it is the epoch's wall time minus the job's.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EPOCH_JOBS", "EpochJob", "epoch_jobs", "epoch_phases", "event_log_conf", "read_events"]

#: an epoch's job is described ``streamstate epoch <n>`` (spark/runner.py)
EPOCH_JOBS = re.compile(r"^streamstate epoch (\d+)$")


def event_log_conf(directory: str) -> dict[str, str]:
    """Spark settings that write an uncompressed event log into ``directory``."""
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": f"file://{os.path.abspath(directory)}",
        "spark.eventLog.compress": "false",
    }


def read_events(directory: str) -> Iterator[dict[str, Any]]:
    """Every event of every (uncompressed) event log file under ``directory``."""
    for root, _dirs, files in os.walk(directory):
        for name in sorted(files):
            if name.startswith(".") or name.startswith("appstatus") or name.endswith(".crc"):
                continue
            with open(os.path.join(root, name)) as f:
                for line in f:
                    if line.strip():
                        yield json.loads(line)


@dataclass
class _Task:
    launch: int
    finish: int
    run: int


@dataclass
class _Stage:
    submitted: int = 0
    tasks: list[_Task] = field(default_factory=list)


@dataclass
class EpochJob:
    """One epoch's Spark job: its stages (in the order they were submitted) and times."""

    epoch: int
    submitted: int
    ended: int
    stages: list[_Stage]

    def phases(self) -> dict[str, float]:
        """This job's phases (see the module doc), in ms."""
        ran = [s for s in sorted(self.stages, key=lambda s: s.submitted) if s.tasks]
        out: dict[str, float] = {"job": float(self.ended - self.submitted)}
        if not ran:
            return out
        out["submit_to_first_task"] = float(min(t.launch for t in ran[0].tasks) - self.submitted)
        previous_end: int | None = None
        for i, stage in enumerate(ran):
            first = min(t.launch for t in stage.tasks)
            last = max(t.finish for t in stage.tasks)
            if previous_end is not None:
                out[f"stage {i - 1} -> {i}"] = float(first - previous_end)
            out[f"stage {i} tasks"] = float(last - first)
            out[f"stage {i} task run"] = float(statistics.median(t.run for t in stage.tasks))
            previous_end = last
        assert previous_end is not None
        out["last_task_to_job_end"] = float(self.ended - previous_end)
        return out


def epoch_jobs(
    events: Iterable[dict[str, Any]], described: re.Pattern[str] = EPOCH_JOBS
) -> list[EpochJob]:
    """The finished jobs among ``events`` whose description ``described`` matches (its
    group 1 is the epoch; other jobs are left out), by epoch."""
    jobs: dict[int, tuple[int, int, list[int]]] = {}  # job id -> (epoch, submitted, stages)
    ended: dict[int, int] = {}
    stages: dict[int, _Stage] = {}
    for e in events:
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            description = (e.get("Properties") or {}).get("spark.job.description") or ""
            m = described.match(description)
            if m:
                jobs[e["Job ID"]] = (int(m.group(1)), e["Submission Time"], e["Stage IDs"])
        elif kind == "SparkListenerJobEnd":
            ended[e["Job ID"]] = e["Completion Time"]
        elif kind == "SparkListenerStageSubmitted":
            info = e["Stage Info"]
            stages.setdefault(info["Stage ID"], _Stage()).submitted = info["Submission Time"]
        elif kind == "SparkListenerTaskEnd":
            info, metrics = e["Task Info"], e.get("Task Metrics") or {}
            stages.setdefault(e["Stage ID"], _Stage()).tasks.append(
                _Task(info["Launch Time"], info["Finish Time"], metrics.get("Executor Run Time", 0))
            )
    out = [
        EpochJob(epoch, submitted, ended[job], [stages[s] for s in ids if s in stages])
        for job, (epoch, submitted, ids) in jobs.items()
        if job in ended
    ]
    return sorted(out, key=lambda j: j.epoch)


def epoch_phases(
    directory: str, epochs: Iterable[int] | None = None, described: re.Pattern[str] = EPOCH_JOBS
) -> dict[str, float]:
    """The median of each phase over the epoch jobs logged under ``directory`` (only those
    of ``epochs``, when given; jobs described as ``described`` matches), in ms, with
    ``jobs``: how many were measured."""
    wanted = None if epochs is None else set(epochs)
    logged = epoch_jobs(read_events(directory), described)
    jobs = [j for j in logged if wanted is None or j.epoch in wanted]
    if not jobs:
        raise ValueError(f"no finished streamstate epoch job in the event log under {directory}")
    per_job = [j.phases() for j in jobs]
    keys = list(dict.fromkeys(k for p in per_job for k in p))
    medians = {k: round(statistics.median(p[k] for p in per_job if k in p), 1) for k in keys}
    return {"jobs": float(len(jobs)), **medians}
