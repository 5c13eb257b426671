"""At INFO, streamstate logs at most one line per epoch (no per-record or per-subtask
lines): a job with many epochs, checkpoints, a restore and a restart."""

from __future__ import annotations

import logging

from streamstate.common import Types
from streamstate.datastream.connectors.collect import DiscardingSink
from streamstate.testing import FailOnce
from tests.support import envs


def _job(tmp_path, **conf):
    env = envs.make_env(2, max_records=5, restarts=2, conf=conf)
    envs.checkpoint_every_epoch(env, tmp_path / "chk", retain=True)
    stream = env.from_collection([f"k{i % 7}" for i in range(100)], Types.STRING())
    stream.key_by(lambda w: w).map(FailOnce(str(tmp_path), epoch=4, subtask=0)).uid("m").sink_to(
        DiscardingSink()
    )
    return env


def test_at_info_at_most_one_line_per_epoch(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="streamstate")
    result = _job(tmp_path).execute("log volume")
    epochs = result.get_accumulator_result("epochs") or 0
    infos = [r for r in caplog.records if r.name.startswith("streamstate")]
    assert epochs >= 20
    assert result.get_accumulator_result("restarts") == 1  # FailOnce failed epoch 4 once
    assert len(infos) <= epochs, "\n".join(r.getMessage() for r in infos)
    caplog.clear()
    # a restore says so once
    _job(tmp_path / "again", **{"execution.state-recovery.path": str(tmp_path / "chk")}).execute(
        "restored"
    )
    restored = [r for r in caplog.records if "restored from checkpoint" in r.getMessage()]
    assert len(restored) == 1
