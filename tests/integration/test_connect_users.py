"""Two users' jobs on one Spark Connect server stay apart (issue 30).

Alice and Bob each run the same job (same name, same operator uid and state name, the same
keys, different words) with ``streamstate run --remote "sc://...;user_id=NAME"`` at the
same time, as two processes with a job registry (``STREAMSTATE_HOME``) and a checkpoint
directory of their own, on the test session's one server (each job a Connect session of
its own under its user id). Each sees exactly its own counts, in its output and in its
last checkpoint's keyed state: nothing of the other's records or state, though the
server's Python workers and subtask hosts serve both; and one user's checkpoint key does
not open the other's checkpoints.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from streamstate.common import Types
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.errors import CorruptCheckpointError
from streamstate.runtime.state_reader import read_keyed_state
from tests.support.job_scripts import CLI, COUNT_PER_KEY

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

JOB = (
    COUNT_PER_KEY
    + """
import sys

from streamstate.common import Configuration
from streamstate.datastream.checkpoint_config import ExternalizedCheckpointRetention

conf = Configuration().set_string("execution.epoch.max-records", "40")
env = StreamExecutionEnvironment.get_execution_environment(conf)
env.set_parallelism(2)
env.enable_checkpointing(1)
config = env.get_checkpoint_config()
config.set_checkpoint_storage_dir(sys.argv[1])
config.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
words = env.from_collection(sys.argv[2:], Types.STRING())
words.key_by(lambda w: w).process(CountPerKey()).uid("counter").print()
env.execute("count-per-key")
"""
)

WORDS = {
    "alice": [f"k{i % 5}" for i in range(170)],
    "bob": [f"k{(i * 7) % 6}" for i in range(230)] + ["only-bob"] * 3,
}


def _start(user: str, url: str, tmp_path: Path) -> subprocess.Popen[str]:
    home = tmp_path / user
    home.mkdir()
    (home / "job.py").write_text(JOB)
    env = {**os.environ, "STREAMSTATE_HOME": str(home / "registry"), "PYTHONPATH": str(ROOT)}
    env.pop("SPARK_REMOTE", None)
    return subprocess.Popen(
        [
            CLI,
            "run",
            "--quiet",
            "--remote",
            f"{url}/;user_id={user}",
            str(home / "job.py"),
            "--",
            str(home / "checkpoints"),
            *WORDS[user],
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _last_checkpoint(root: Path) -> Path:
    done = [p.parent for p in root.glob("*/chk-*/_metadata")]
    return max(done, key=lambda p: int(p.name.split("-")[1]))


def _counts(checkpoint: Path) -> dict[str, int]:
    return read_keyed_state(str(checkpoint), "counter", ValueStateDescriptor("count", Types.LONG()))


def test_two_users_jobs_on_one_server_see_only_their_own_records_and_state(
    connect_server, tmp_path, monkeypatch
):
    runs = {user: _start(user, connect_server.url, tmp_path) for user in WORDS}
    outputs = {user: run.communicate(timeout=600) for user, run in runs.items()}
    job_ids = {}
    for user, (out, err) in outputs.items():
        assert runs[user].returncode == 0, err
        expected = Counter(WORDS[user])
        printed = [re.sub(r"^\d+> ", "", line) for line in out.splitlines() if line.strip()]
        # every record of its own once (exactly-once, one epoch after another), none else
        assert sorted(printed) == sorted(
            str((w, n)) for w, c in expected.items() for n in range(1, c + 1)
        )
        # read as the user: checkpoints are signed with the key of the user's home
        monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / user / "registry"))
        assert _counts(_last_checkpoint(tmp_path / user / "checkpoints")) == dict(expected)
        job_ids[user] = _last_checkpoint(tmp_path / user / "checkpoints").parent.name
    assert job_ids["alice"] != job_ids["bob"]
    # Bob's key does not open Alice's checkpoint (it could load pickled state)
    with pytest.raises(CorruptCheckpointError, match="does not verify"):
        _counts(_last_checkpoint(tmp_path / "alice" / "checkpoints"))
