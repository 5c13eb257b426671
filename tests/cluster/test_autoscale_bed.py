"""Issue 31's autoscaling scenario on the bed (tests/cluster/bed.py): the job's driver on a
machine of its own, its executors on the worker machines, its checkpoints in S3. A rate
stepping 10k -> 50k -> 10k records/s makes the autoscaler scale ``enrich`` out, the median
record latency comes back under its 5 s target, the step down scales it in and releases
executors; every decision read from the REST view the dashboard draws
(tests/integration/autoscale_job.py runs it, waiting on events only; the same checks as
on the standalone cluster: tests/integration/test_autoscale_cluster.py).

The bed's three worker machines offer one core each, so ``enrich`` is bounded at 3
subtasks (75k records/s at 25k/s a subtask, more than the step needs)."""

from __future__ import annotations

import os

import pytest

from tests.cluster.bed import PYTHON, ROOT, Bed
from tests.integration.test_autoscale_cluster import check_report

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.cluster]

JOB = os.path.join(ROOT, "tests", "integration", "autoscale_job.py")


def test_a_rate_step_scales_out_and_back_in_on_the_bed(bed: Bed) -> None:
    proc = bed.run(
        "driver",
        [PYTHON, JOB, bed.spark_master, bed.s3_url("autoscale/chk"), "--bed"]
        + ["--low", "10000", "--high", "50000", "--capacity", "25000", "--target-ms", "5000"]
        + ["--max-parallelism", str(len(bed.workers))],
        timeout=1500,
    )
    check_report(proc)
