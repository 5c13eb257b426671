"""``streamstate run``: its options after the job file are refused with the right order, a
restore says so, and a bad restore path is one line (in-process runner, no Spark)."""

from __future__ import annotations

import json

import pytest

from streamstate.cli.main import main
from tests.support.job_scripts import COUNT_PER_KEY, job_script, retained_checkpoint_options

JOB = (
    "import json\nimport sys\n"
    + COUNT_PER_KEY
    + """
env = StreamExecutionEnvironment.get_execution_environment()
words = env.from_collection(sys.argv[2:], Types.STRING())
out = list(words.key_by(lambda w: w).process(CountPerKey()).uid("c").execute_and_collect())
with open(sys.argv[1], "w") as f:
    json.dump(sorted(out), f)
"""
)


@pytest.fixture
def job(tmp_path):
    return job_script(tmp_path, JOB)


def _conf(chk):
    return retained_checkpoint_options(chk)


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    ("after", "shown"),
    [
        (["--from-checkpoint", "/x/chk-1"], "--from-checkpoint /x/chk-1"),
        (["-s", "/x/chk-1"], "-s /x/chk-1"),
        (["--from-savepoint=/x/sp"], "--from-savepoint=/x/sp"),
        (["-Dparallelism.default=2"], "-Dparallelism.default=2"),
        (["--quiet"], "--quiet"),
        (["-p", "2"], "-p 2"),
    ],
)
def test_run_options_after_the_job_file_are_refused_with_the_right_order(
    tmp_path, job, capsys, after, shown
):
    out = tmp_path / "o.json"
    rc, _, err = _run(capsys, "run", job, out, "a", *after)
    assert rc == 2
    (line,) = err.strip().splitlines()  # one line, no traceback
    assert f"'{shown}' comes after the job file" in line
    assert f"`streamstate run {shown} {job} {out} a`" in line  # the right order, to copy
    assert f"`streamstate run {job} -- {out} a {' '.join(after)}`" in line
    assert not out.exists()  # the job did not run without its option


def test_after_a_double_dash_the_arguments_are_the_jobs(tmp_path, job, capsys):
    out = tmp_path / "o.json"
    rc, _, err = _run(capsys, "run", "-D", "execution.runner=local", job, "--", out, "-s", "a")
    assert rc == 0, err
    assert json.loads(out.read_text()) == [["-s", 1], ["a", 1]]


def test_a_restored_job_says_so_and_its_state_goes_on(tmp_path, job, capsys):
    chk = tmp_path / "chk"
    rc, _, err = _run(capsys, "run", *_conf(chk), job, tmp_path / "1.json", "a", "b", "a")
    assert rc == 0, err
    assert "restored" not in err
    assert json.loads((tmp_path / "1.json").read_text()) == [["a", 1], ["a", 2], ["b", 1]]
    first_job = next(p.name for p in chk.iterdir())
    # the collection's position is in the checkpoint: the restored job reads on after it
    rc, _, err = _run(
        capsys,
        "run",
        *_conf(chk),
        "--from-checkpoint",
        chk,
        job,
        tmp_path / "2.json",
        "a",
        "b",
        "a",
        "c",
        "a",
    )
    assert rc == 0, err
    assert json.loads((tmp_path / "2.json").read_text()) == [["a", 3], ["c", 1]]
    restored = [ln for ln in err.splitlines() if "restored from" in ln]
    assert len(restored) == 1, err
    assert (
        f"restored from checkpoint 1 of job {first_job} (file://{chk}/{first_job}" in (restored[0])
    )


def test_a_missing_restore_path_is_one_line_before_anything_else(tmp_path, job, capsys):
    rc, out, err = _run(
        capsys,
        "run",
        *_conf(tmp_path / "chk"),
        "--from-checkpoint",
        tmp_path / "missing",
        job,
        tmp_path / "o.json",
        "a",
    )
    assert rc == 2
    assert out == ""
    (line,) = err.strip().splitlines()  # no job address, no FAILED progress line first
    assert line.startswith("streamstate run: CorruptCheckpointError: no valid completed ")
    assert str(tmp_path / "missing") in line
    assert not (tmp_path / "chk").exists() or not any((tmp_path / "chk").iterdir())
