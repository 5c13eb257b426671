"""A continuous file source picks up new files; a job started with execute_async is cancelled."""

from __future__ import annotations

import time
from datetime import timedelta

from streamstate.common import Configuration, JobStatus
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.datastream.connectors import CollectSink, FileSource, StreamFormat


def _wait_for(pred, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False


def test_continuous_file_source_picks_up_new_files(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.txt").write_text("a1\na2\n")
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.idle-wait-ms", "10")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(src))
        .monitor_continuously(timedelta(milliseconds=20))
        .build()
    )
    sink = CollectSink()
    env.from_source(source, None, "files").map(str.upper).sink_to(sink)
    client = env.execute_async("continuous")
    try:
        assert _wait_for(lambda: sorted(sink.get_results()) == ["A1", "A2"])
        assert client.get_job_status().result() is JobStatus.RUNNING
        (src / "b.txt").write_text("b1\nb2\nb3\n")
        assert _wait_for(lambda: len(sink.get_results()) == 5)
    finally:
        client.cancel()
    result = client.get_job_execution_result().result(30)
    assert client.get_job_status().result() is JobStatus.CANCELED
    assert sorted(sink.get_results()) == ["A1", "A2", "B1", "B2", "B3"]
    assert result.get_accumulator_result("epochs") >= 2
