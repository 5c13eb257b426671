"""The dashboard in a real headless Chromium: a running job's page draws its checkpoint
history and charts, with no JavaScript error (screenshot under the test's tmp dir)."""

from __future__ import annotations

import os

import pytest

from streamstate.control.registry import list_jobs
from streamstate.datastream.connectors.collect import DiscardingSink
from streamstate.testing import TickingClock
from tests.support import envs
from tests.support.browser import Browser, find_chromium
from tests.support.control import Gate

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="no chromium on this machine (.ci/run installs the Debian package)",
)

ROWS = 6


def test_job_page_shows_checkpoints_charts_and_no_js_error(tmp_path):
    assert CHROMIUM is not None, "CI must have chromium (.ci/run installs it)"
    env = envs.make_env(2, max_records=20, restarts=0)
    env.set_clock(TickingClock())
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    env.from_collection([(f"k{i % 5}", i) for i in range(4000)]).key_by(lambda v: v[0]).reduce(
        lambda a, b: (a[0], a[1] + b[1])
    ).uid("sum").map(lambda v: v).uid("after").sink_to(DiscardingSink())
    gate = Gate(ROWS + 1)
    env.add_job_observer(gate)
    client = env.execute_async("dashboard-job")
    try:
        gate.wait()
        (rec,) = [r for r in list_jobs() if r.job_id == client.get_job_id()]
        with Browser(CHROMIUM) as b:
            b.goto(f"{rec.address}/")
            b.wait_for(f"!!document.querySelector('#jobs-table tr[data-jid=\"{rec.job_id}\"]')")
            b.goto(f"{rec.address}/#/job/{rec.job_id}")
            rows = b.wait_for(
                "document.querySelectorAll('#checkpoint-table tbody tr').length >= "
                f"{ROWS} && document.querySelectorAll('#checkpoint-table tbody tr').length"
            )
            assert rows >= ROWS
            points = b.wait_for(
                "document.querySelector('#throughput-chart path.series') && "
                "Number(document.querySelector('#throughput-chart').dataset.points)"
            )
            assert points == ROWS + 1  # one point per epoch
            assert b.evaluate("document.querySelectorAll('#operator-graph g.vertex').length") >= 2
            assert b.wait_for("document.querySelectorAll('#checkpoint-detail tbody tr').length")
            text = b.evaluate("document.body.innerText")
            assert "dashboard-job" in text and "RUNNING" in text and "sum" in text
            shot = b.screenshot(tmp_path / "dashboard.png")
            assert shot.stat().st_size > 10_000
            assert b.errors == [], b.errors
    finally:
        gate.release()
        client.cancel()
        client.get_job_execution_result().result(60)


def test_the_autoscalers_decisions_are_traced_with_their_reasons(tmp_path):
    """A job whose sequence source has a backlog the keyed stage cannot catch up with: the
    autoscaler rescales it in place, and the job page lists the decision (operator,
    parallelism before and after, the reason)."""
    assert CHROMIUM is not None, "CI must have chromium (.ci/run installs it)"
    env = envs.make_env(
        1,
        max_records=20,
        restarts=0,
        conf={
            "job.autoscaler.enabled": "true",
            "job.autoscaler.stabilization.interval": "3 s",
            "job.autoscaler.metrics.window": "2 s",
            "job.autoscaler.catch-up.duration": "1 ms",
            "job.autoscaler.vertex.max-parallelism": "3",
        },
    )
    env.set_clock(TickingClock())
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    env.from_sequence(0, 10**9).key_by(lambda v: v % 5).reduce(lambda a, b: a + b).uid(
        "sum"
    ).sink_to(DiscardingSink())
    client = env.execute_async("scaling-job")
    try:
        (rec,) = [r for r in list_jobs() if r.job_id == client.get_job_id()]
        with Browser(CHROMIUM) as b:
            b.goto(f"{rec.address}/#/job/{rec.job_id}")
            reason = b.wait_for(
                "[...document.querySelectorAll('#scaling-table tbody tr')]"
                ".map(r => r.innerText).find(t => t.includes('sum') && t.includes('1 → 3'))"
            )
            assert "busy: true processing rate" in reason and "yes" in reason
            assert b.errors == [], b.errors
    finally:
        client.cancel()
        client.get_job_execution_result().result(60)
