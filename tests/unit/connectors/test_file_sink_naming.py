"""FileSink part files as in Flink: ``<prefix>-<uuid>-<n><suffix>`` (``n``: the number of the
part's last record in its subtask, not a part counter), rolling policies."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from streamstate.common import Configuration
from streamstate.common.serialization import Encoder
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.datastream.connectors import (
    BucketAssigner,
    FileSink,
    OutputFileConfig,
    RollingPolicy,
)
from streamstate.errors import ConfigurationError


def _run(out: Path, n: int, chk: Path, builder_fn=None, parallelism: int = 2) -> None:
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", "100")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(3_600_000)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(chk))
    builder = FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
    builder = builder.with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
    if builder_fn is not None:
        builder = builder_fn(builder)
    env.from_sequence(1, n).sink_to(builder.build())
    env.execute("file-sink-naming")


def _lines(out: Path) -> list[str]:
    return [
        line
        for f in sorted(out.iterdir())
        if not f.name.startswith(".")
        for line in f.read_text().splitlines()
    ]


def test_two_jobs_into_one_directory_keep_all_records(tmp_path):
    out = tmp_path / "out"
    _run(out, 2000, tmp_path / "chk1")
    _run(out, 2000, tmp_path / "chk2")
    lines = _lines(out)
    assert len(lines) == 4000
    assert sorted(lines, key=int) == sorted([str(i) for i in range(1, 2001)] * 2, key=int)
    pattern = re.compile(r"^part-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-\d+$")
    names = [f.name for f in out.iterdir()]
    assert all(pattern.match(n) for n in names), names
    # one uuid per subtask instance: 2 subtasks x 2 jobs
    assert len({n[5:41] for n in names}) == 4


def test_output_file_config_prefix_and_suffix(tmp_path):
    out = tmp_path / "out"
    cfg = OutputFileConfig.builder().with_part_prefix("pre").with_part_suffix(".txt").build()
    _run(out, 50, tmp_path / "chk", lambda b: b.with_output_file_config(cfg))
    names = [f.name for f in out.iterdir()]
    assert names and all(n.startswith("pre-") and n.endswith(".txt") for n in names), names
    assert sorted(_lines(out), key=int) == [str(i) for i in range(1, 51)]
    assert cfg.get_part_prefix() == "pre" and cfg.get_part_suffix() == ".txt"


def test_default_rolling_policy_part_size_rolls_files(tmp_path):
    out = tmp_path / "out"
    policy = RollingPolicy.default_rolling_policy(
        part_size=20, rollover_interval=timedelta(minutes=1), inactivity_interval=30_000
    )
    _run(out, 100, tmp_path / "chk", lambda b: b.with_rolling_policy(policy), parallelism=1)
    files = sorted(out.iterdir(), key=lambda f: int(f.name.rsplit("-", 1)[1]))
    assert all(f.stat().st_size <= 20 for f in files)
    assert len(files) > 10
    # the number is the subtask's count of records up to the part's last one (minus one):
    # the name says which records the part holds, so a replay rewrites no part
    ends, seen = [], 0
    for f in files:
        seen += len(f.read_text().splitlines())
        ends.append(seen - 1)
    assert [int(f.name.rsplit("-", 1)[1]) for f in files] == ends
    assert sorted(_lines(out), key=int) == [str(i) for i in range(1, 101)]
    assert policy.rollover_interval_ms == 60_000 and policy.inactivity_interval_ms == 30_000


def test_on_checkpoint_rolling_policy_one_file_per_checkpoint(tmp_path):
    out = tmp_path / "out"
    policy = RollingPolicy.on_checkpoint_rolling_policy()
    _run(out, 250, tmp_path / "chk", lambda b: b.with_rolling_policy(policy), parallelism=1)
    # the only checkpoint is the final one: epochs of 100, 100 and 50 records, one part
    assert len(list(out.iterdir())) == 1
    assert sorted(_lines(out), key=int) == [str(i) for i in range(1, 251)]


def test_bad_arguments_raise_typed_errors(tmp_path):
    b = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder())
    with pytest.raises(ConfigurationError, match="RollingPolicy"):
        b.with_rolling_policy("daily")
    with pytest.raises(ConfigurationError, match="OutputFileConfig"):
        b.with_output_file_config({"prefix": "x"})
    with pytest.raises(ConfigurationError, match="contain '/'"):
        OutputFileConfig("a/b", "")
    with pytest.raises(ConfigurationError, match="part_size"):
        RollingPolicy.default_rolling_policy(part_size=0)
