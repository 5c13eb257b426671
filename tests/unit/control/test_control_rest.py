"""The driver's REST API against real running jobs (in-process runner; real uvicorn server,
real HTTP, the CLI in another process)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streamstate.common import JobStatus
from streamstate.control.registry import list_jobs, registry_dir
from streamstate.datastream.connectors.collect import DiscardingSink
from streamstate.errors import ConfigurationError
from streamstate.testing import TickingClock
from tests.support import envs
from tests.support.control import Gate, cli, http, record_of, running_job, start_job


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Any, Gate, Any]]:
    with running_job(tmp_path) as job:
        yield job


def test_jobs_details_and_checkpoint_history_grow(running):
    client, gate, rec = running
    base = rec.address
    status, jobs = http(f"{base}/jobs")
    assert status == 200 and {"id": rec.job_id, "status": "RUNNING"} in jobs["jobs"]
    status, job = http(f"{base}/jobs/{rec.job_id}")
    assert status == 200 and job["name"] == "rest-test" and job["state"] == "RUNNING"
    ops = {o["uid"]: o for v in job["vertices"] for o in v["operators"]}
    assert "sum" in ops and ops["sum"]["keyed"] and ops["sum"]["records"] == 3 * 20
    assert [e["epoch"] for e in job["epochs"]] == [1, 2, 3]
    assert all(v["parallelism"] == 2 for v in job["vertices"][1:])
    # per subtask-epoch: in place (cache hit) or rebuilt (each subtask's first epoch here);
    # the in-process runner has no Spark executors to place subtasks on
    subtasks = sum(v["parallelism"] for v in job["vertices"])
    placement = job["placement"]
    assert placement["rebuilt"] == subtasks and placement["in-place"] == 2 * subtasks
    assert placement["in-place-ratio"] == round(2 / 3, 4)
    assert placement["subtask-executors"] == {} and placement["moved"] == 0
    _, cps = http(f"{base}/jobs/{rec.job_id}/checkpoints")
    n = cps["counts"]["completed"]
    assert n >= 2 and len(cps["history"]) == cps["counts"]["total"]
    gate.step()
    gate.step()
    _, cps2 = http(f"{base}/jobs/{rec.job_id}/checkpoints")
    assert cps2["counts"]["completed"] == n + 2
    latest = cps2["latest"]["completed"]
    assert latest["status"] == "COMPLETED" and latest["state_size"] > 0
    assert latest["id"] == cps2["history"][0]["id"]
    _, details = http(f"{base}/jobs/{rec.job_id}/checkpoints/details/{latest['id']}")
    assert details["tasks"]["sum"]["subtasks"] and len(details["tasks"]["sum"]["subtasks"]) == 2
    assert sum(details["tasks"]["sum"]["subtasks"]) == details["tasks"]["sum"]["state_size"]
    status, _ = http(f"{base}/jobs/{rec.job_id}/checkpoints/details/99999")
    assert status == 404
    status, _ = http(f"{base}/jobs/nosuchjob")
    assert status == 404
    _, conf = http(f"{base}/jobs/{rec.job_id}/config")
    assert conf["execution-config"]["user-config"]["execution.runner"] == "local"
    _, server_conf = http(f"{base}/config")
    assert "streamstate-version" in server_conf


def test_reading_the_api_does_not_read_the_job_clock(tmp_path):
    gate = Gate(2)
    clock = TickingClock()
    client = start_job(tmp_path, gate, clock=clock)
    try:
        gate.wait()
        rec = record_of(client.get_job_id())
        before = repr(clock)
        for path in ("/jobs/overview", f"/jobs/{rec.job_id}", "/metrics"):
            assert http(rec.address + path)[0] == 200
        assert repr(clock) == before  # a TickingClock advances at every reading
    finally:
        gate.release()
        client.cancel()
        client.get_job_execution_result().result(60)


def test_registry_file_is_private_and_goes_with_the_job(running):
    client, gate, rec = running
    path = registry_dir() / f"{rec.job_id}.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert rec.pid == os.getpid() and rec.token
    gate.release()
    client.cancel()
    client.get_job_execution_result().result(60)
    assert not path.exists()
    # the server still shows the job that ended
    _, job = http(f"{rec.address}/jobs/{rec.job_id}")
    assert job["state"] == "CANCELED"


def _dead_address() -> str:
    """A local URL nothing listens on (a port bound, then let go)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_killed_drivers_record_goes_even_when_its_pid_is_reused():
    """A driver killed without removing its file leaves a pid that the kernel hands out
    again: the new process with that pid (here this one) is not the job."""
    from streamstate.control.registry import JobRecord
    from streamstate.runtime.host_owner import start_time

    me = start_time(os.getpid())
    assert me
    reused = JobRecord("0" * 32, "gone", _dead_address(), "t", os.getpid(), 1, pid_start=me - 1)
    path = reused.write()
    assert reused.job_id not in {r.job_id for r in list_jobs()}
    assert not path.exists()


def test_list_names_and_skips_a_registered_server_that_does_not_answer(running):
    from streamstate.control.registry import JobRecord
    from streamstate.runtime.host_owner import start_time

    client, gate, rec = running
    silent = JobRecord(
        "f" * 32,
        "silent",
        _dead_address(),
        "t",
        os.getpid(),
        1,
        pid_start=start_time(os.getpid()) or 0,
    )
    silent.write()
    try:
        out = cli("list")
        assert out.returncode == 0, out.stderr
        assert "rest-test (RUNNING)" in out.stdout and "silent" not in out.stdout
        assert (
            f"skipped a registered job server: no streamstate REST server answers at {silent.address}"
            in out.stderr
        )
        out = cli("list", "--address", silent.address)
        assert out.returncode == 2 and silent.address in out.stderr
    finally:
        silent.remove()


def test_mutating_calls_need_the_job_token(running):
    client, gate, rec = running
    url = f"{rec.address}/jobs/{rec.job_id}"
    status, body = http(url, "PATCH")
    assert status == 401 and "Bearer" in body["errors"][0]
    status, _ = http(url, "PATCH", token="wrong")
    assert status == 403
    status, _ = http(f"{url}/savepoints", "POST", token="wrong", body={})
    assert status == 403
    status, _ = http(f"{url}/stop", "POST", body={})
    assert status == 401
    assert client.get_job_status().result() is JobStatus.RUNNING
    status, _ = http(url, "PATCH", token=rec.token)
    assert status == 202
    gate.release()
    client.get_job_execution_result().result(60)
    assert client.get_job_status().result() is JobStatus.CANCELED


def test_cli_list_info_cancel_in_another_process(running):
    client, gate, rec = running
    out = cli("list")
    assert out.returncode == 0, out.stderr
    assert rec.job_id in out.stdout and "rest-test (RUNNING)" in out.stdout
    out = cli("info", rec.job_id[:8])
    assert out.returncode == 0, out.stderr
    assert "RUNNING" in out.stdout and "sum:" in out.stdout and "checkpoints:" in out.stdout
    out = cli("cancel", rec.job_id, "--token", "wrong")
    assert out.returncode == 2 and "403" in out.stderr
    out = cli("cancel", rec.job_id)
    assert out.returncode == 0, out.stderr
    gate.release()
    client.get_job_execution_result().result(60)
    assert client.get_job_status().result() is JobStatus.CANCELED
    out = cli("cancel", rec.job_id)
    assert out.returncode == 2 and "no running job" in out.stderr


def test_cli_savepoint_and_stop(running, tmp_path):
    client, gate, rec = running
    gate.pace = 0.2
    gate.release()  # the job goes on while the CLI waits for the savepoint
    out = cli("savepoint", rec.job_id, str(tmp_path / "manual"))
    assert out.returncode == 0, out.stderr
    path = out.stdout.split("Path: ")[1].strip()
    assert path.startswith(str(tmp_path / "manual")) and Path(path, "_metadata").exists()
    out = cli("stop", rec.job_id, "--address", rec.address)  # default savepoint dir
    assert out.returncode == 0, out.stderr
    stopped = out.stdout.split("Path: ")[1].strip()
    assert Path(stopped, "_metadata").exists() and stopped.startswith(str(tmp_path / "sp"))
    client.get_job_execution_result().result(60)
    assert client.get_job_status().result() is JobStatus.FINISHED
    _, cps = http(f"{rec.address}/jobs/{rec.job_id}/checkpoints")
    assert cps["latest"]["savepoint"]["external_path"] == stopped


def test_exceptions_after_an_injected_failure(tmp_path):
    gate = Gate(6)
    client = start_job(tmp_path, gate, fail_at=50)
    try:
        gate.wait()
        rec = record_of(client.get_job_id())
        _, exc = http(f"{rec.address}/jobs/{rec.job_id}/exceptions")
        (entry,) = exc["exceptionHistory"]["entries"]
        assert entry["exceptionName"] == "ValueError" and "record 50" in entry["message"]
        assert entry["will_restart"] and "in __call__" in entry["stacktrace"]
        assert exc["root-exception"].startswith("ValueError: injected failure")
        _, job = http(f"{rec.address}/jobs/{rec.job_id}")
        assert job["stats"]["restarts"] == 1
    finally:
        gate.release()
        client.cancel()
        client.get_job_execution_result().result(60)


def test_prometheus_metrics_parse(running):
    client, gate, rec = running
    status, text = http(f"{rec.address}/metrics")
    assert status == 200
    samples = {
        (s.name, s.labels.get("operator", "")): s
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.labels.get("job_id") == rec.job_id
    }
    assert samples[("streamstate_job_epochs_total", "")].value == 3
    assert samples[("streamstate_operator_records_total", "sum")].value == 60
    assert samples[("streamstate_job_running", "")].value == 1
    assert samples[("streamstate_job_last_checkpoint_size_bytes", "")].value > 0


def test_rest_disabled_and_bad_settings(tmp_path):
    env = envs.make_env(1, conf={"rest.enabled": "false"})
    env.from_collection([1, 2]).sink_to(DiscardingSink())
    before = {r.job_id for r in list_jobs()}
    env.execute("no-rest")
    assert {r.job_id for r in list_jobs()} == before
    env = envs.make_env(1, conf={"rest.bind-address": "0.0.0.0"})
    env.from_collection([1, 2]).sink_to(DiscardingSink())
    with pytest.raises(ConfigurationError, match="rest.token"):
        env.execute("open-bind")
    env = envs.make_env(1, conf={"rest.port": "-1"})
    env.from_collection([1]).sink_to(DiscardingSink())
    with pytest.raises(ConfigurationError, match="rest.port"):
        env.execute("bad-port")


def test_cli_version_bare_help_and_empty_list():
    out = cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("streamstate ")
    out = cli()
    assert out.returncode == 0 and "usage: streamstate" in out.stdout and "cancel" in out.stdout
    out = cli("info", "no-such-job")
    assert out.returncode == 2 and "streamstate list" in out.stderr


def test_a_finished_job_serves_its_stop_outcome_until_it_is_read():
    """`streamstate stop` polls for the savepoint's path while the stopped job ends: the
    job's end (detach) waits until that outcome was read, so the process and its REST
    server do not go away under the polling client."""
    import concurrent.futures
    import threading

    from streamstate.control.server import JobHandle

    handle = JobHandle(executor=None, configuration={}, token="t")
    future: concurrent.futures.Future[str] = concurrent.futures.Future()
    tid = handle.add_trigger(future)
    handle.wait_outcomes_read(3600)  # not finished yet: nothing to wait for
    future.set_result("file:///sp/savepoint-1")
    ended = threading.Event()
    waiter = threading.Thread(target=lambda: (handle.wait_outcomes_read(3600), ended.set()))
    waiter.start()
    assert not ended.wait(0.5), "the job ended before its stop outcome was read"
    handle.outcome_read(tid)
    waiter.join(60)
    assert ended.is_set()


def test_a_wildcard_bind_advertises_a_routable_address_and_guards_every_read(tmp_path, capfd):
    """``rest.bind-address: 0.0.0.0``: the job prints and registers an address another
    machine can use (this host's name's address, never 0.0.0.0), says it is reachable
    from other machines, and every read needs the token except the data-free dashboard
    page; ``rest.address`` overrides what is advertised."""
    import socket

    gate = Gate(2)
    client = start_job(
        tmp_path,
        gate,
        **{
            "rest.bind-address": "0.0.0.0",
            "rest.token": "s3cret",
            "queryable-state.enable": "false",
        },
    )
    try:
        gate.wait()
        rec = record_of(client.get_job_id())
        host = socket.gethostbyname(socket.gethostname())
        assert rec.address.startswith(f"http://{host}:") and "0.0.0.0" not in rec.address
        assert f"{rec.address}/ (bound to 0.0.0.0, reachable from other machines" in (
            capfd.readouterr().err
        )
        assert http(f"{rec.address}/jobs/overview")[0] == 401
        assert http(f"{rec.address}/jobs/overview", token="s3cret")[0] == 200
        _, conf = http(f"{rec.address}/jobs/{rec.job_id}/config", token="s3cret")
        # the token is never shown (reads of a loopback bind are open to the machine)
        assert conf["execution-config"]["user-config"]["rest.token"] == "******"
        status, page = http(f"{rec.address}/?token=s3cret")
        assert status == 200 and "dashboard.js" in page
    finally:
        gate.release()
        client.cancel()
        client.get_job_execution_result().result(60)
    from streamstate.control.addresses import advertised_host

    assert advertised_host("0.0.0.0", "driver.example") == "driver.example"
    assert advertised_host("10.1.2.3") == "10.1.2.3"
