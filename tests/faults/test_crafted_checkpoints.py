"""Crafted checkpoints (issue 27, item 4): a checkpoint that someone else wrote or changed
must not run code here, and a downgraded ``_metadata`` must not restore silently wrong.

The attacker runs ``pickled_state_job.py`` with their own checkpoint key and state values
whose unpickling creates a canary file, then strips the signature off ``_metadata``: a
plain-JSON format-1 file, or a format-2 header without ``hmac-sha256``. The victim (another
key) points ``streamstate state``, ``describe``, ``checkpoints``, ``run --from-checkpoint``
and the State Processor API at it: each refuses it with ``UnsignedCheckpointError``
naming the opt-in, and the canary never exists. The same downgrade of the victim's own
checkpoint with an edited source offset is refused too; the named opt-in
(``--allow-unsigned-checkpoints``) reads an unsigned checkpoint the user vouches for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from streamstate.errors import UnsignedCheckpointError
from tests.faults import pickled_state_job as job

JOB = str(Path(__file__).with_name("pickled_state_job.py"))
ROOT = str(Path(__file__).resolve().parents[2])
CLI = os.path.join(os.path.dirname(sys.executable), "streamstate")


def _env(key: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env["STREAMSTATE_CHECKPOINT_KEY"] = key
    env.pop("STREAMSTATE_ALLOW_UNSIGNED_CHECKPOINTS", None)
    return env


def sh(*cmd: str, key: str = "victim") -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=_env(key), capture_output=True, text=True, timeout=300)


def write_checkpoint(tmp: Path, key: str, canary: Path | None = None) -> Path:
    """Run the job with checkpoint key ``key``; its newest checkpoint directory."""
    args = [sys.executable, JOB, str(tmp / "out"), str(tmp / "chk")]
    p = sh(*args, *(["--canary", str(canary)] if canary else []), key=key)
    assert p.returncode == 0, p.stderr[-2000:]
    return max((tmp / "chk").glob("*/chk-*"), key=lambda d: int(d.name.split("-")[1]))


def downgrade(chk: Path, how: str, edit: bool = False) -> None:
    """Rewrite ``_metadata`` without its signature (``edit``: move a source back 40)."""
    meta = chk / "_metadata"
    data = meta.read_bytes()
    body = data[data.index(b"\n") + 1 :]
    if edit:
        doc = json.loads(body)
        ((uid, offsets),) = doc["source_offsets"].items()
        assert isinstance(offsets, dict) and offsets, offsets
        doc["source_offsets"][uid] = json.loads(json.dumps(offsets).replace("200", "160"))
        body = json.dumps(doc, sort_keys=True).encode()
    if how == "plain-json":
        meta.write_bytes(body)
    else:
        crc = zlib.crc32(body) & 0xFFFFFFFF
        meta.write_bytes(
            b"streamstate-metadata v2 crc32=%08x length=%d\n" % (crc, len(body)) + body
        )


@pytest.mark.parametrize("how", ["plain-json", "no-hmac", "other-key"])
def test_a_crafted_checkpoint_never_runs_code(tmp_path, how, spark):
    canary = tmp_path / "canary"
    chk = write_checkpoint(tmp_path / "attacker", "attacker-key", canary)
    canary.unlink(missing_ok=True)  # (the attacker's own run never unpickles its state)
    if how != "other-key":
        downgrade(chk, how)
    refused = "UnsignedCheckpointError" if how != "other-key" else "CorruptCheckpointError"

    state = sh(CLI, "state", str(chk), "--operator", job.UID, "--state", job.STATE)
    assert state.returncode == 2 and refused in state.stderr, state.stderr[-2000:]
    if how != "other-key":
        assert "--allow-unsigned-checkpoints" in state.stderr
    described = sh(CLI, "describe", str(chk))
    assert described.returncode == 2 and refused in described.stderr
    listed = sh(CLI, "checkpoints", str(tmp_path / "attacker" / "chk"), "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "valid" not in {c["status"] for c in json.loads(listed.stdout)}
    run = sh(CLI, "run", "--from-checkpoint", str(chk), JOB, "--",
             str(tmp_path / "out2"), str(tmp_path / "chk2"))  # fmt: skip
    assert run.returncode == 2 and refused in run.stderr, run.stderr[-2000:]

    from streamstate.errors import CorruptCheckpointError
    from streamstate.runtime.checkpoint import signing
    from streamstate.state_processor import SavepointReader

    key = os.environ.get(signing.KEY_ENV)
    os.environ[signing.KEY_ENV] = "victim"
    try:
        with pytest.raises(CorruptCheckpointError):
            SavepointReader.read(spark, str(chk))
    finally:
        if key is None:
            os.environ.pop(signing.KEY_ENV)
        else:
            os.environ[signing.KEY_ENV] = key
    assert not canary.exists()


def test_an_unsigned_checkpoint_with_an_edited_offset_is_refused(tmp_path):
    """The victim's own checkpoint, downgraded with a source moved back: restoring it
    silently would duplicate records; it is refused, naming the opt-in."""
    chk = write_checkpoint(tmp_path, "victim")
    downgrade(chk, "plain-json", edit=True)
    run = sh(CLI, "run", "--from-checkpoint", str(chk), JOB, "--",
             str(tmp_path / "out2"), str(tmp_path / "chk2"))  # fmt: skip
    assert run.returncode == 2 and "UnsignedCheckpointError" in run.stderr, run.stderr[-2000:]
    assert not (tmp_path / "out2").exists()


def test_the_named_opt_in_reads_an_unsigned_checkpoint(tmp_path):
    """A checkpoint the user vouches for (e.g. written by an older streamstate) is read
    with ``--allow-unsigned-checkpoints`` (a warning says what that means)."""
    chk = write_checkpoint(tmp_path, "victim")
    downgrade(chk, "no-hmac")
    state = sh(CLI, "state", str(chk), "--operator", job.UID, "--state", job.STATE,
               "--allow-unsigned-checkpoints")  # fmt: skip
    assert state.returncode == 0, state.stderr[-2000:]
    assert "'k0' -> ('seen', 196)" in state.stdout
    assert "origin cannot be checked" in state.stderr
    run = sh(CLI, "run", "--allow-unsigned-checkpoints", "--from-checkpoint", str(chk), JOB,
             "--", str(tmp_path / "out2"), str(tmp_path / "chk2"))  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    with pytest.raises(UnsignedCheckpointError, match="allow-unsigned-checkpoints"):
        from streamstate.runtime.checkpoint.storage import load_metadata_from_path

        load_metadata_from_path(str(chk))
