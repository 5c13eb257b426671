"""A new user's first hour, as subprocesses on Spark: how much a short job prints on
success, failure and Ctrl-C (counted), a real SIGINT, a bad restore path, an exception
class of the job script across the worker boundary, a user's own SparkSession without
``PYSPARK_PYTHON``, and one whose Spark console progress bar is on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.job_scripts import (
    CLI,
    COUNT_PER_KEY,
    cli_env,
    job_script,
    retained_checkpoint_options,
)

pytestmark = pytest.mark.spark

COUNT_JOB = (
    "import sys\n"
    + COUNT_PER_KEY
    + """
env = StreamExecutionEnvironment.get_execution_environment()
words = env.from_collection(sys.argv[1:], Types.STRING())
words.key_by(lambda w: w).process(CountPerKey()).print()
env.execute("count-per-key")
"""
)

FAILING_JOB = """
import sys
from streamstate.common import Types
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import StreamExecutionEnvironment


class BadWord(ValueError):
    pass


def check(word):
    if word == "b":
        raise BadWord(f"bad word {word!r}")
    return word


env = StreamExecutionEnvironment.get_execution_environment()
env.set_restart_strategy(RestartStrategies.no_restart())
env.from_collection(["a", "b", "a"], Types.STRING()).map(check).print()
if sys.argv[1:] == ["catch"]:
    try:
        env.execute("fails")
    except ValueError as e:  # a subclass of ValueError defined here, raised by a worker
        print("caught", type(e.__cause__).__name__, isinstance(e, BadWord), flush=True)
else:
    env.execute("fails")
"""

# three records through a function that holds the epoch until the test lets it go
HELD_JOB = """
import os
import sys
import time
from streamstate.common import Types
from streamstate.datastream import StreamExecutionEnvironment

HOLD = sys.argv[1]


def held(word):
    open(HOLD + ".started", "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(HOLD + ".release") and time.monotonic() < deadline:
        time.sleep(0.05)
    return word


env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection(["a", "b", "a"], Types.STRING()).map(held).print()
env.execute("held")
"""


def _not_the_jobs(stdout: str, stderr: str, job_lines: set[str]) -> list[str]:
    """The lines streamstate (or Spark, or the JVM) printed, besides the job's output."""
    lines = [ln for ln in (stdout + "\n" + stderr).splitlines() if ln.strip()]
    return [ln for ln in lines if ln.strip() not in job_lines]


def test_a_three_record_job_prints_at_most_3_lines_besides_its_output(tmp_path):
    job = job_script(tmp_path, COUNT_JOB)
    proc = subprocess.run(
        [CLI, "run", job, "a", "b", "a"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=cli_env(),
    )
    assert proc.returncode == 0, proc.stderr
    output = {"1> ('b', 1)", "2> ('a', 1)", "2> ('a', 2)"}
    assert set(proc.stdout.split("\n")) >= output, proc.stdout
    extra = _not_the_jobs(proc.stdout, proc.stderr, output)
    assert len(extra) <= 3, "\n".join(extra)
    assert extra[0].startswith("streamstate: job 'count-per-key' (")
    assert extra[-1].startswith("count-per-key: FINISHED epoch ")
    for noise in ("log4j", "NativeCodeLoader", "WARNING: Using incubator", "Setting default log"):
        assert noise not in proc.stderr


def test_a_failing_job_prints_at_most_10_lines_naming_the_users_frame(tmp_path):
    job = job_script(tmp_path, FAILING_JOB)
    proc = subprocess.run(
        [CLI, "run", job], capture_output=True, text=True, timeout=600, env=cli_env()
    )
    assert proc.returncode == 2, proc.stderr
    extra = _not_the_jobs(proc.stdout, proc.stderr, {"1> a", "2> a", "1> 'a'", "2> 'a'"})
    assert len(extra) <= 10, "\n".join(extra)
    text = "\n".join(extra)
    assert f'File "{job}", line ' in text and 'raise BadWord(f"bad word {word!r}")' in text
    assert "BadWord: bad word 'b'" in text
    assert "host_process.py" not in text and "pyspark" not in text  # our frames: not shown
    assert extra[-1].startswith("streamstate run: JobExecutionError: job 'fails'")


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--from-checkpoint", "{missing}", "{job}", "a"], "CorruptCheckpointError: no valid"),
        (["{job}", "a", "--from-checkpoint", "{missing}"], "comes after the job file"),
    ],
)
def test_a_bad_restore_is_one_line_and_nothing_else(tmp_path, options, said):
    """`streamstate run --from-checkpoint /missing job.py`: the error line alone (no job
    address, no FAILED progress line); the option after the job file: refused, one line."""
    job = job_script(tmp_path, COUNT_JOB)
    missing = tmp_path / "missing"
    argv = [o.format(job=job, missing=missing) for o in options]
    proc = subprocess.run(
        [CLI, "run", *argv], capture_output=True, text=True, timeout=600, env=cli_env()
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("streamstate run: ") and said in line and str(missing) in line


def test_an_exception_class_of_the_job_script_keeps_its_type(tmp_path):
    job = job_script(tmp_path, FAILING_JOB)
    for command in ([sys.executable, job, "catch"], [CLI, "run", "-q", job, "catch"]):
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=cli_env())
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "caught BadWord True" in proc.stdout, proc.stdout


def _start_held(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    job = job_script(tmp_path, HELD_JOB)
    hold = tmp_path / "hold"
    proc = subprocess.Popen(
        [CLI, "run", job, str(hold)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    started = Path(str(hold) + ".started")
    while not started.exists():  # the epoch is running, held in the user's function
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    return proc, hold


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_stops_the_job_in_a_few_lines(tmp_path, presses):
    """A real SIGINT: once, the job stops at the end of its epoch; twice, at once (its
    Spark job cancelled). Either way a few lines and no py4j traceback."""
    proc, hold = _start_held(tmp_path)
    try:
        for _ in range(presses):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.5)
        if presses == 1:
            Path(str(hold) + ".release").touch()  # the epoch ends; the job stops after it
        out, err = proc.communicate(timeout=300)
    finally:
        Path(str(hold) + ".release").touch()  # a cancelled task lets go too
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    extra = _not_the_jobs(out, err, {"1> a", "2> a", "1> b", "2> b"})
    assert len(extra) <= 10, "\n".join(extra)
    text = "\n".join(extra)
    assert "stops at the end of its epoch" in text
    assert ("stopping job 'held' now" in text) == (presses == 2)
    assert "held: CANCELED epoch" in extra[-1]
    for noise in ("Traceback", "Py4J", "reentrant", "ERROR"):
        assert noise not in text


OWN_SESSION_JOB = """
import sys
from pyspark.sql import SparkSession
from streamstate.common import Types
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.errors import WorkerEnvironmentError

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
env = StreamExecutionEnvironment.get_execution_environment(spark=spark)
env.from_collection(["a", "b"], Types.STRING()).map(str.upper).print()
try:
    env.execute("own session")
except WorkerEnvironmentError as e:
    print("JOB:", e, flush=True)
if len(sys.argv) > 1:
    from streamstate.state_processor import SavepointReader
    try:
        SavepointReader.read(spark, sys.argv[1])
    except WorkerEnvironmentError as e:
        print("READER:", e, flush=True)
"""


def test_a_users_own_session_without_pyspark_python_says_what_to_set(tmp_path):
    """The job's own SparkSession, built by `.venv/bin/python job.py` with PYSPARK_PYTHON
    unset and the virtualenv not on the PATH: PySpark's workers would run the system's
    `python3`. Both the job and the State Processor API stop with one paragraph."""
    probe = subprocess.run(["python3", "-c", "import streamstate"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("the PATH's python3 has streamstate: no interpreter without it here")
    job = job_script(tmp_path, OWN_SESSION_JOB)
    path = os.pathsep.join(
        p
        for p in os.environ["PATH"].split(os.pathsep)
        if Path(p).resolve() != Path(CLI).parent.resolve()
    )
    env = cli_env(PATH=path)
    for var in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV"):
        env.pop(var, None)
    savepoint = _a_checkpoint(tmp_path)
    proc = subprocess.run(
        [sys.executable, job, savepoint], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = {ln.split(":", 1)[0]: ln for ln in proc.stdout.splitlines() if ":" in ln}
    assert set(said) == {"JOB", "READER"}, proc.stdout
    for line in said.values():
        assert "cannot import streamstate" in line and "python3" in line
        assert f"Set PYSPARK_PYTHON={sys.executable} before the SparkSession" in line
    # with PYSPARK_PYTHON named, the same job runs
    ok = subprocess.run(
        [sys.executable, job],
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "PYSPARK_PYTHON": sys.executable},
    )
    assert ok.returncode == 0 and "JOB:" not in ok.stdout, ok.stderr[-3000:]
    # print() prefixes the subtask ("1> ", "2> ") when the job runs at parallelism > 1
    printed = {ln.split("> ", 1)[-1] for ln in ok.stdout.splitlines() if "> " in ln}
    assert {"A", "B"} <= printed, ok.stdout


def _a_checkpoint(tmp_path: Path) -> str:
    """A retained checkpoint, written by the in-process runner."""
    chk = tmp_path / "chk"
    job = job_script(tmp_path, COUNT_JOB, "count.py")
    proc = subprocess.run(
        [
            CLI,
            "run",
            "-q",
            *retained_checkpoint_options(chk),
            job,
            "a",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=cli_env(),
    )
    assert proc.returncode == 0, proc.stderr
    (chk_dir,) = chk.glob("*/chk-*")
    return str(chk_dir)


CONSOLE_PROGRESS_JOB = """
import os
import sys
import time
from pyspark.sql import SparkSession
from streamstate.common import Types
from streamstate.datastream import StreamExecutionEnvironment

os.environ["PYSPARK_PYTHON"] = sys.executable
# the pyspark shell's default: Spark draws '[Stage 1:>  (0 + 2) / 2]' on stderr
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "true")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")


def slow(word):
    time.sleep(1.5)  # an epoch's stage runs past the bar's first 0.5 s
    return word.upper()


env = StreamExecutionEnvironment.get_execution_environment(spark=spark)
env.get_configuration().set_string("execution.progress", "lines")
env.from_collection(["a", "b"], Types.STRING()).map(slow).print()
env.execute("slow")
print("JOB ENDED", file=sys.stderr, flush=True)
spark.sparkContext.parallelize(["c", "d"], 2).map(slow).collect()  # the session's own job
"""


def test_sparks_console_progress_is_off_while_the_jobs_progress_shows(tmp_path):
    """A user's own session with Spark's console progress bar on: no Spark bar while the
    job runs (its own progress line shows), and the session's bar is back after it."""
    job = job_script(tmp_path, CONSOLE_PROGRESS_JOB)
    proc = subprocess.run(
        [sys.executable, job], capture_output=True, text=True, timeout=600, env=cli_env()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    during, after = proc.stderr.split("JOB ENDED\n")
    assert "slow: FINISHED epoch " in during
    assert "[Stage " not in during, during
    assert "[Stage " in after, after  # the session's own Spark job: its bar again
