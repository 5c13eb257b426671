"""The REST API and the CLI job verbs against a real job on Spark ``local[2]``."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from streamstate.common import JobStatus
from streamstate.control.registry import list_jobs
from streamstate.datastream.connectors.collect import DiscardingSink
from tests.support import envs
from tests.support.control import FailOnce, Gate, cli, http


def test_spark_job_list_checkpoints_metrics_and_cancel_from_the_cli(spark, tmp_path):
    env = envs.make_env(2, spark=spark, max_records=50, restarts=0)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    data = [(f"k{i % 7}", i) for i in range(5000)]
    env.from_collection(data).key_by(lambda v: v[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid(
        "sum"
    ).sink_to(DiscardingSink())
    gate = Gate(2)
    env.add_job_observer(gate)
    client = env.execute_async("spark-rest")
    try:
        gate.wait(180)
        (rec,) = [r for r in list_jobs() if r.job_id == client.get_job_id()]
        out = cli("list")
        assert out.returncode == 0 and f"{rec.job_id} : spark-rest (RUNNING)" in out.stdout
        _, job = http(f"{rec.address}/jobs/{rec.job_id}")
        assert job["runner"].startswith("Spark") and job["state"] == "RUNNING"
        _, first = http(f"{rec.address}/jobs/{rec.job_id}/checkpoints")
        gate.step()
        _, second = http(f"{rec.address}/jobs/{rec.job_id}/checkpoints")
        assert second["counts"]["completed"] == first["counts"]["completed"] + 1
        assert len(second["history"]) == len(first["history"]) + 1
        sizes = second["latest"]["completed"]["tasks"]["sum"]["subtasks"]
        assert len(sizes) == 2 and all(s > 0 for s in sizes)
        _, text = http(f"{rec.address}/metrics")
        epochs = [
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "streamstate_job_epochs_total" and s.labels["job_id"] == rec.job_id
        ]
        assert epochs == [3]
        out = cli("cancel", rec.job_id)
        assert out.returncode == 0, out.stderr
    finally:
        gate.release()
    client.get_job_execution_result().result(180)
    assert client.get_job_status().result() is JobStatus.CANCELED
    assert rec.job_id not in {r.job_id for r in list_jobs()}


def test_spark_job_exceptions_carry_the_worker_traceback_and_mutations_need_the_token(
    spark, tmp_path
):
    env = envs.make_env(2, spark=spark, max_records=50, restarts=1)
    data = [(f"k{i % 7}", i) for i in range(2000)]
    env.from_collection(data).map(FailOnce(tmp_path / "failed", 120)).uid("fail-once").key_by(
        lambda v: v[0]
    ).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("sum").sink_to(DiscardingSink())
    gate = Gate(5)
    env.add_job_observer(gate)
    client = env.execute_async("spark-failing")
    try:
        gate.wait(180)
        (rec,) = [r for r in list_jobs() if r.job_id == client.get_job_id()]
        _, exc = http(f"{rec.address}/jobs/{rec.job_id}/exceptions")
        (entry,) = exc["exceptionHistory"]["entries"]
        assert entry["exceptionName"] == "ValueError" and "record 120" in entry["message"]
        assert entry["will_restart"] and "in __call__" in entry["stacktrace"]
        url = f"{rec.address}/jobs/{rec.job_id}"
        assert http(url, "PATCH")[0] == 401
        assert http(url, "PATCH", token="not-the-token")[0] == 403
        assert client.get_job_status().result() is JobStatus.RUNNING
        assert http(url, "PATCH", token=rec.token)[0] == 202
    finally:
        gate.release()
    client.get_job_execution_result().result(180)
    assert client.get_job_status().result() is JobStatus.CANCELED
