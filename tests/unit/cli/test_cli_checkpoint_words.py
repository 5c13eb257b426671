"""What ``streamstate checkpoints / describe / state`` say when a checkpoint is not there:
a finished job's empty directory goes, an empty listing says why, a subsumed ``chk-N``
names what subsumed it and the newest (in-process runner, no Spark)."""

from __future__ import annotations

import shutil

from streamstate.cli.main import main
from streamstate.common import Types
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.datastream.checkpoint_config import ExternalizedCheckpointRetention
from streamstate.datastream.connectors.collect import DiscardingSink


def _run_job(chk, retain: bool) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.get_configuration().set_string("execution.runner", "local")
    env.get_configuration().set_string("execution.epoch.max-records", "1")
    env.get_configuration().set_string("execution.progress", "none")
    env.get_configuration().set_string("rest.enabled", "false")
    env.enable_checkpointing(1)
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage_dir(f"file://{chk}")
    if retain:
        config.set_externalized_checkpoint_retention(
            ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
        )
    env.from_collection(["a", "b", "a"], Types.STRING()).key_by(lambda w: w).reduce(
        lambda a, b: a + b
    ).uid("r").sink_to(DiscardingSink())
    env.execute("words")


def _cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_job_without_retained_checkpoints_leaves_no_directory_and_the_cli_says_why(
    tmp_path, capsys
):
    chk = tmp_path / "chk"
    _run_job(chk, retain=False)
    assert list(chk.iterdir()) == []  # no empty <dir>/<job-id>/ left behind
    rc, out, _ = _cli(capsys, "checkpoints", chk)
    assert rc == 0
    assert f"no checkpoints under {chk}" in out
    assert "RETAIN_ON_CANCELLATION" in out


def test_a_subsumed_checkpoint_names_what_subsumed_it_and_the_newest(tmp_path, capsys):
    chk = tmp_path / "chk"
    _run_job(chk, retain=True)
    (job_dir,) = chk.iterdir()
    (newest,) = job_dir.glob("chk-*")
    n = int(newest.name.split("-")[1])
    assert n >= 2
    # what a listing saw a moment before the job completed its newest checkpoint
    shutil.copytree(newest, job_dir / "chk-1", dirs_exist_ok=True)
    rc, out, _ = _cli(capsys, "checkpoints", chk)
    assert rc == 0 and "chk-1" in out
    shutil.rmtree(job_dir / "chk-1")  # ... and then subsumed (deleted)
    for command in (["describe", job_dir / "chk-1"], ["state", job_dir / "chk-1", "-o", "r", "-n", "x"]):
        rc, _, err = _cli(capsys, *command)
        assert rc == 2
        (line,) = err.strip().splitlines()
        assert f"checkpoint chk-1 of job {job_dir.name} is gone: it was subsumed by chk-" in line
        assert f"The newest is chk-{n}: file://{newest}" in line
    rc, out, _ = _cli(capsys, "describe", newest)
    assert rc == 0 and f"Checkpoint {n}" in out
