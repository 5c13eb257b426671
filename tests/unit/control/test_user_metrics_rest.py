"""User metrics of a running job: JobClient.get_accumulators() and the REST /metrics
endpoint (Prometheus text), against a real job and a real HTTP server."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from streamstate.control.registry import list_jobs
from streamstate.datastream import KeyedProcessFunction
from streamstate.datastream.connectors.collect import DiscardingSink
from streamstate.testing import TickingClock
from tests.support import envs
from tests.support.control import Gate, http


class _Measure(KeyedProcessFunction):
    def open(self, runtime_context):
        group = runtime_context.get_metrics_group()
        self.seen = group.counter("seen")
        self.sizes = group.distribution("size")

    def process_element(self, value, ctx):
        self.seen.inc()
        self.sizes.update(value[1] % 7)
        yield value


def test_running_job_exposes_user_metrics():
    gate = Gate(2)
    env = envs.make_env(2, max_records=10)
    env.set_clock(TickingClock())
    env.add_job_observer(gate)
    data = [(f"k{i % 3}", i) for i in range(200)]
    env.from_collection(data).key_by(lambda v: v[0]).process(_Measure()).name("measure").sink_to(
        DiscardingSink()
    )
    client = env.execute_async("user-metrics")
    try:
        gate.wait()
        assert client.get_accumulators().result()["metrics.measure.seen"] == 20  # 2 epochs of 10
        (rec,) = [r for r in list_jobs() if r.job_id == client.get_job_id()]
        status, text = http(f"{rec.address}/metrics")
        assert status == 200
        samples = {
            s.labels["metric"]: s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name == "streamstate_user_metric" and s.labels.get("job_id") == rec.job_id
        }
        assert samples["metrics.measure.seen"] == 20
        assert samples["metrics.measure.size.count"] == 20
        assert samples["metrics.measure.size.max"] <= 6
    finally:
        gate.release()
        client.cancel()
        client.get_job_execution_result().result(60)
