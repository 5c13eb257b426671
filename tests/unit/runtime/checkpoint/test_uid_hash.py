"""``set_uid_hash``: a job that set no uids is upgraded (an operator added in front of its
keyed operator shifts that operator's generated id) and restored from its retained
checkpoint by naming the keyed operator's old generated id; without it the restore
refuses the unclaimed state (as Flink without ``--allow-non-restored-state``)."""

from __future__ import annotations

from collections import Counter

import pytest

from streamstate.errors import ConfigurationError, JobExecutionError, StreamStateError
from streamstate.runtime.checkpoint.storage import load_restore_point
from tests.unit.runtime import test_recovery_local as R

clock = R.clock
baseline = R.baseline


def old_job(env):
    # no uids anywhere: every id is generated from the operator's position
    counts = env.from_sequence(0, R.N - 1).map(R.to_record).key_by(lambda r: r[0])
    sink = R.CollectSink()
    counts.process(R.CountPerKey()).sink_to(sink)
    return sink


def new_job(env, uid_hash: str | None):
    # the upgrade: a filter in front of the keyed operator (every generated id after it moves)
    ds = env.from_sequence(0, R.N - 1).filter(lambda i: True).map(R.to_record)
    keyed = ds.key_by(lambda r: r[0]).process(R.CountPerKey())
    if uid_hash is not None:
        keyed = keyed.set_uid_hash(uid_hash)
    sink = R.CollectSink()
    keyed.sink_to(sink)
    return sink


def test_set_uid_hash_matches_the_state_of_a_job_without_uids(tmp_path, clock, baseline):
    env = R.make_env(max_epochs=3)
    R.fs_checkpointing(env, tmp_path, retain=True)
    first_sink = old_job(env)
    result = env.execute()
    first = first_sink.get_results()
    latest = result.get_accumulator_result("latest-checkpoint")
    md, _ = load_restore_point(latest)
    (keyed_id,) = [u for u in md.operator_states if "process" in u.lower()]

    env2 = R.make_env()
    R.fs_checkpointing(env2, tmp_path)
    env2.set_restore_path(latest)
    new_job(env2, None)
    with pytest.raises((JobExecutionError, StreamStateError)) as e:
        env2.execute()
    assert keyed_id in str(e.value)  # its state would be lost: refused, naming it

    env3 = R.make_env()
    R.fs_checkpointing(env3, tmp_path)
    env3.set_restore_path(latest)
    sink = new_job(env3, keyed_id)
    env3.execute()
    # the source kept its generated id (position 1): it continues where the checkpoint was,
    # and the counts continue from the restored keyed state, exactly once
    second = sink.get_results()
    assert 0 < len(first) < R.N
    assert Counter(first) + Counter(second) == Counter(baseline)
    assert R.final_counts(second) == R.EXPECTED_COUNTS


def test_set_uid_hash_needs_an_id():
    env = R.make_env()
    with pytest.raises(ConfigurationError):
        env.from_sequence(0, 1).set_uid_hash("")
