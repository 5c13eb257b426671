"""The ``streamstate`` CLI: run, checkpoints, describe, state (local runner, no Spark)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from streamstate.cli.main import CONF_ENV_VAR, main
from streamstate.runtime.state_reader import list_checkpoints

JOB = textwrap.dedent(
    """
    import json
    import sys

    from streamstate.common import Types
    from streamstate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
    from streamstate.datastream.state import ValueStateDescriptor


    class CountPerKey(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, value, ctx):
            c = (self.count.value() or 0) + 1
            self.count.update(c)
            yield value[0], c


    if __name__ == "__main__":
        out_path = sys.argv[1]
        env = StreamExecutionEnvironment.get_execution_environment()
        records = [(k, i) for i in range(6) for k in "abc"]
        stream = env.from_collection(records).key_by(lambda v: v[0])
        out = list(stream.process(CountPerKey()).uid("counter").execute_and_collect())
        with open(out_path, "w") as f:
            json.dump({"out": out, "parallelism": env.get_parallelism(),
                       "argv": sys.argv[1:]}, f)
    """
)

FULL_OUTPUT = sorted([k, n] for n in range(1, 7) for k in "abc")


@pytest.fixture
def job(tmp_path):
    p = tmp_path / "job.py"
    p.write_text(JOB)
    return p


def _defines(chk_dir, *extra):
    args = [
        "-D",
        "execution.runner=local",
        "-D",
        "execution.epoch.max-records=3",
        "-D",
        "execution.checkpointing.interval=1",
        "-D",
        f"execution.checkpointing.dir={chk_dir}",
        "-D",
        "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION",
    ]
    for e in extra:
        args += ["-D", e]
    return args


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def checkpoint(tmp_path, job, capsys):
    chk = tmp_path / "chk"
    rc, _, err = _run(
        capsys, "run", *_defines(chk), "--parallelism", "2", str(job), str(tmp_path / "o.json")
    )
    assert rc == 0, err
    (info,) = list_checkpoints(str(chk))
    return chk, info


# -- run -----------------------------------------------------------------------------------------


def test_run_job_with_args_and_defaults(tmp_path, job, capsys, monkeypatch):
    monkeypatch.delenv(CONF_ENV_VAR, raising=False)
    out_file = tmp_path / "out.json"
    rc, _, err = _run(
        capsys, "run", "-D", "execution.runner=local", "-p", "3", str(job), str(out_file), "--x"
    )
    assert rc == 0, err
    res = json.loads(out_file.read_text())
    assert sorted(res["out"]) == FULL_OUTPUT
    assert res["parallelism"] == 3
    assert res["argv"] == [str(out_file), "--x"]
    assert CONF_ENV_VAR not in os.environ  # restored after the job


def test_run_job_explicit_settings_win(tmp_path, capsys):
    script = tmp_path / "p.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from streamstate.common import Configuration
            from streamstate.datastream import StreamExecutionEnvironment
            conf = Configuration(); conf.set_string("execution.runner", "spark")
            env = StreamExecutionEnvironment.get_execution_environment(conf)
            c = env.get_configuration()
            print(c.get_string("execution.runner"), c.get_string("spark.master"),
                  c.get_string("execution.state-recovery.path"), c.get_string("a.b"))
            """
        )
    )
    rc, out, err = _run(
        capsys,
        "run",
        "--master",
        "local[2]",
        "--from-checkpoint",
        "/x/chk-1",
        "-D",
        "execution.runner=local",
        "-Da.b=c=d",
        str(script),
    )
    assert rc == 0, err
    assert out.split() == ["spark", "local[2]", "/x/chk-1", "c=d"]


def test_run_stops_early_and_resumes_from_checkpoint(tmp_path, job, capsys):
    chk = tmp_path / "chk"
    first = tmp_path / "first.json"
    rc, _, err = _run(
        capsys,
        "run",
        *_defines(chk, "execution.epoch.max-epochs=2"),
        "-p",
        "2",
        str(job),
        str(first),
    )
    assert rc == 0, err
    out1 = json.loads(first.read_text())["out"]
    assert 0 < len(out1) < len(FULL_OUTPUT)  # stopped early

    infos = [i for i in list_checkpoints(str(chk)) if i.valid]
    assert infos, "the early stop retained no checkpoint"
    latest = max(infos, key=lambda i: i.checkpoint_id)
    second = tmp_path / "second.json"
    rc, _, err = _run(
        capsys,
        "run",
        *_defines(chk),
        "--from-checkpoint",
        latest.path,
        "-p",
        "2",
        str(job),
        str(second),
    )
    assert rc == 0, err
    out2 = json.loads(second.read_text())["out"]
    # exactly once across the stop: no record lost or repeated, counts continue
    assert sorted(out1 + out2) == FULL_OUTPUT


def test_run_usage_and_typed_errors(tmp_path, capsys):
    rc, _, err = _run(capsys, "run", str(tmp_path / "missing.py"))
    assert rc == 2 and "does not exist" in err
    rc, _, err = _run(capsys, "run", "-D", "novalue", str(tmp_path / "x.py"))
    assert rc == 2
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from streamstate.errors import ConfigurationError\n"
        "raise ConfigurationError('bad\\nsetting')\n"
    )
    rc, _, err = _run(capsys, "run", str(bad))
    assert rc == 2
    assert err.strip() == "streamstate run: ConfigurationError: bad setting"
    assert "Traceback" not in err
    boom = tmp_path / "boom.py"
    boom.write_text("raise RuntimeError('boom')\n")
    rc, _, err = _run(capsys, "run", str(boom))
    assert rc == 1 and "Traceback" in err and "RuntimeError: boom" in err
    ex = tmp_path / "exit.py"
    ex.write_text("import sys\nsys.exit(7)\n")
    assert _run(capsys, "run", str(ex))[0] == 7
    rc, _, err = _run(capsys, "run")
    assert rc == 2 and "required" in err


# -- inspection ----------------------------------------------------------------------------------


def test_checkpoints_lists_jobs_and_status(checkpoint, capsys):
    chk, info = checkpoint
    rc, out, _ = _run(capsys, "checkpoints", str(chk))
    assert rc == 0
    header, row = out.strip().splitlines()
    assert header.split()[:2] == ["JOB", "CHECKPOINT"]
    assert row.split()[:2] == [info.job_id, str(info.checkpoint_id)]
    assert "valid" in row and info.path in row
    rc, out, _ = _run(capsys, "checkpoints", str(chk), "--job", "nope")
    assert rc == 0 and "no checkpoints of job nope" in out
    rc, out, _ = _run(capsys, "checkpoints", str(chk), "--json")
    (doc,) = json.loads(out)
    assert doc["status"] == "valid" and doc["checkpoint_id"] == info.checkpoint_id
    # damage a state file: the listing says corrupt
    local = info.path.removeprefix("file://")
    f = next(os.path.join(local, n) for n in os.listdir(local) if n != "_metadata")
    with open(f, "ab") as fh:
        fh.write(b"x")
    rc, out, _ = _run(capsys, "checkpoints", str(chk))
    assert rc == 0 and "corrupt" in out
    rc, _, err = _run(capsys, "checkpoints", str(chk / "missing"))
    assert rc == 2 and "does not exist" in err


def test_describe_text_and_json(checkpoint, capsys):
    _, info = checkpoint
    rc, out, _ = _run(capsys, "describe", info.path)
    assert rc == 0
    assert f"Checkpoint {info.checkpoint_id}" in out
    assert info.job_id in out
    assert "counter: parallelism 2, max parallelism 128" in out
    assert "count (value)" in out
    assert "Source positions (1)" in out
    rc, out, _ = _run(capsys, "describe", info.path, "--json")
    doc = json.loads(out)
    assert doc["operators"]["counter"]["parallelism"] == 2
    assert doc["job_id"] == info.job_id
    rc, _, err = _run(capsys, "describe", str(checkpoint[0]))
    assert rc == 2 and "CorruptCheckpointError" in err and "\n" == err[-1] and err.count("\n") == 1


def test_state_prints_key_value_lines(checkpoint, capsys):
    _, info = checkpoint
    rc, out, _ = _run(capsys, "state", info.path, "--operator", "counter", "--state", "count")
    assert rc == 0
    assert out.splitlines() == ["'a' -> 6", "'b' -> 6", "'c' -> 6"]
    rc, out, _ = _run(
        capsys, "state", info.path, "-o", "counter", "-n", "count", "--kind", "value", "--json"
    )
    assert [json.loads(line) for line in out.splitlines()] == [["a", 6], ["b", 6], ["c", 6]]
    rc, out, err = _run(capsys, "state", info.path, "-o", "counter", "-n", "count", "--limit", "1")
    assert rc == 0 and out.splitlines() == ["'a' -> 6"] and "2 more keys" in err


def test_state_exports_csv_json_and_parquet(checkpoint, capsys, tmp_path):
    import csv

    import pyarrow.parquet as pq

    _, info = checkpoint
    base = ("state", info.path, "-o", "counter", "-n", "count")
    rc, out, _ = _run(capsys, *base, "--format", "csv")
    assert rc == 0
    assert list(csv.reader(out.splitlines())) == [
        ["key", "value"],
        ["a", "6"],
        ["b", "6"],
        ["c", "6"],
    ]
    rc, out, _ = _run(capsys, *base, "--format", "json", "--output", str(tmp_path / "s.json"))
    assert rc == 0 and out == ""
    lines = (tmp_path / "s.json").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [["a", 6], ["b", 6], ["c", 6]]
    parquet = tmp_path / "s.parquet"
    rc, _, _ = _run(capsys, *base, "--format", "parquet", "--output", str(parquet))
    table = pq.read_table(parquet)
    assert rc == 0 and table.to_pylist() == [
        {"key": "a", "value": 6},
        {"key": "b", "value": 6},
        {"key": "c", "value": 6},
    ]
    assert str(table.schema.field("value").type) == "int64"  # a scalar column keeps its type
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".inprogress")] == []
    rc, _, err = _run(capsys, *base, "--format", "parquet")
    assert rc == 2 and "--output" in err
    rc, _, err = _run(capsys, *base, "--format", "csv", "--json")
    assert rc == 2 and "contradict" in err


def test_state_errors(checkpoint, capsys):
    _, info = checkpoint
    rc, _, err = _run(capsys, "state", info.path, "--operator", "nope", "--state", "count")
    assert rc == 2 and "'nope'" in err and "'counter'" in err and "Traceback" not in err
    rc, _, err = _run(capsys, "state", info.path, "-o", "counter", "-n", "missing")
    assert rc == 2 and "count (value)" in err
    rc, _, err = _run(capsys, "state", info.path, "-o", "counter", "-n", "count", "--kind", "map")
    assert rc == 2 and "value state" in err
    rc, _, err = _run(capsys, "state", info.path, "-o", "counter", "-n", "count", "--kind", "x")
    assert rc == 2 and "invalid choice" in err
    rc, _, err = _run(capsys, "state", info.path, "-n", "count")
    assert rc == 2 and "--operator" in err


def test_state_of_reducing_and_aggregating_state_shows_the_stored_value(tmp_path, capsys):
    from streamstate.common import Configuration
    from streamstate.datastream import (
        ExternalizedCheckpointCleanup,
        KeyedProcessFunction,
        StreamExecutionEnvironment,
    )
    from streamstate.datastream.state import (
        AggregatingStateDescriptor,
        ReducingStateDescriptor,
    )

    class Avg:
        def create_accumulator(self):
            return [0, 0]

        def add(self, v, acc):
            return [acc[0] + v, acc[1] + 1]

        def get_result(self, acc):
            return acc[0] / acc[1]

        def merge(self, a, b):
            return [a[0] + b[0], a[1] + b[1]]

    class F(KeyedProcessFunction):
        def open(self, ctx):
            self.total = ctx.get_reducing_state(ReducingStateDescriptor("total", max))
            self.avg = ctx.get_aggregating_state(AggregatingStateDescriptor("avg", Avg()))

        def process_element(self, value, ctx):
            self.total.add(value[1])
            self.avg.add(value[1])
            yield value

    conf = Configuration()
    conf.set_string("execution.runner", "local")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.enable_checkpointing(1)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    data = [("a", 1), ("a", 5), ("b", 2), ("a", 3)]
    list(
        env.from_collection(data).key_by(lambda v: v[0]).process(F()).uid("f").execute_and_collect()
    )
    (info,) = list_checkpoints(str(tmp_path / "chk"))
    rc, out, _ = _run(capsys, "state", info.path, "-o", "f", "-n", "total")
    assert rc == 0 and out.splitlines() == ["'a' -> 5", "'b' -> 2"]
    rc, out, _ = _run(capsys, "state", info.path, "-o", "f", "-n", "avg", "--kind", "aggregating")
    assert rc == 0 and out.splitlines() == ["'a' -> [9, 3]", "'b' -> [2, 1]"]


def test_help_and_unknown_command(capsys):
    rc, out, _ = _run(capsys, "--help")
    assert rc == 0 and "checkpoints" in out and "describe" in out
    rc, _, err = _run(capsys, "frobnicate")
    assert rc == 2 and "invalid choice" in err
