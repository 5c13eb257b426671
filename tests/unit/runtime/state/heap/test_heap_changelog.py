"""Heap changelog checkpoints (``state.changelog.enabled``): a checkpoint names the last
materialized base again and adds only the deltas since; restores (after a failure, from a
retained checkpoint, at another parallelism) equal a failure-free run; a changelog that
outgrows its base is materialized; shared files no retained checkpoint names are deleted."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from streamstate.common import Types
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.checkpoint import changelog as cl
from streamstate.runtime.checkpoint.changelog import ChangelogStateHandle
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.checkpoint.storage import load_restore_point
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.protocol import EpochSpec, Lineage, SubtaskSpec
from streamstate.runtime.state.registry import create_keyed_backend
from streamstate.runtime.versions import commit_keyed_state
from streamstate.testing import FailOnce
from tests.support import backends as H
from tests.unit.runtime import test_recovery_local as R

clock = R.clock
baseline = R.baseline


def changelog_env(parallelism: int = 2, **kw: Any) -> Any:
    env = R.make_env(parallelism, **kw)
    env.enable_changelog_state_backend(True)
    assert env.is_changelog_state_backend_enabled()
    return env


def keyed_handles(checkpoint: str) -> list[Any]:
    md, _ = load_restore_point(checkpoint)
    return [h for s in md.operator_states["count"].subtasks for h in s.keyed]


def test_checkpoints_name_the_base_again_and_add_the_changes(
    tmp_path, clock, baseline, monkeypatch
):
    monkeypatch.setattr(cl, "MATERIALIZE_RATIO", 100.0)  # the state is tiny: keep its base
    env = changelog_env(max_epochs=4, conf={"execution.checkpointing.num-retained": "4"})
    R.fs_checkpointing(env, tmp_path, retain=True)
    first, result = R.run(env)
    job_dir = os.path.dirname(result.get_accumulator_result("latest-checkpoint"))
    chks = sorted(
        (d for d in os.listdir(job_dir.removeprefix("file://")) if d.startswith("chk-")),
        key=lambda d: int(d[4:]),
    )
    assert len(chks) == 4
    per_chk = [keyed_handles(f"{job_dir}/{c}") for c in chks]
    assert all(isinstance(h, ChangelogStateHandle) for hs in per_chk for h in hs)
    # one base per subtask, written by the first checkpoint and named by every later one
    for i in range(2):
        bases = {hs[i].base.stream.path for hs in per_chk}
        assert len(bases) == 1
        assert [len(hs[i].deltas) for hs in per_chk] == sorted(len(hs[i].deltas) for hs in per_chk)
        assert len(per_chk[-1][i].deltas) >= 1

    # resuming from the newest one continues exactly
    env2 = changelog_env()
    R.fs_checkpointing(env2, tmp_path)
    env2.set_restore_path(f"{job_dir}/{chks[-1]}")
    second, _ = R.run(env2)
    assert first + second == baseline


@pytest.mark.parametrize("interval, epoch", [(1, 3), (2500, 5)])
def test_exactly_once_after_a_failure(tmp_path, clock, baseline, interval, epoch, monkeypatch):
    monkeypatch.setattr(cl, "MATERIALIZE_RATIO", 100.0)  # restores read base + deltas
    env = changelog_env()
    R.fs_checkpointing(env, tmp_path, interval)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    fail = FailOnce(str(tmp_path), epoch=epoch, subtask=1, after_records=1)
    out, result = R.run(env, fail)
    assert fail.fired and result.get_accumulator_result("restarts") == 1
    assert out == baseline


def test_rescale_1_to_3_to_2(tmp_path, clock, baseline, monkeypatch):
    monkeypatch.setattr(cl, "MATERIALIZE_RATIO", 100.0)  # restores read base + deltas
    outputs, restore = [], None
    for parallelism, max_epochs in [(1, 2), (3, 5), (2, None)]:
        env = changelog_env(parallelism, max_records=4, max_epochs=max_epochs)
        R.fs_checkpointing(env, tmp_path, retain=True)
        if restore is not None:
            env.set_restore_path(restore)
        out, result = R.run(env)
        outputs.append(out)
        restore = result.get_accumulator_result("latest-checkpoint")
    merged = [r for out in outputs for r in out]
    assert Counter(merged) == Counter(baseline)


# -- the materialization rule, on one subtask -------------------------------------------------

V = ValueStateDescriptor("v", Types.LONG())


def heap() -> Any:
    return create_keyed_backend(
        "hashmap",
        operator_name="op",
        key_group_range=KeyGroupRange(0, H.MAX_P - 1),
        max_parallelism=H.MAX_P,
        key_serializer=H.KEY_SER,
        changelog=True,
    )


def put(b: Any, keys: range, value: int) -> None:
    s = b.get_partitioned_state(V)
    for k in keys:
        H.at(b, f"k{k}")
        s.update(value)


def checkpoint(storage: Any, b: Any, cid: int, base: Any) -> ChangelogStateHandle:
    lineage = Lineage((0, cid - 1), (base,) if base is not None else (), ())
    es = EpochSpec(cid, 0, cid, False, (SubtaskSpec(lineages={"op": lineage}),))
    _, handles = commit_keyed_state(storage, {"op": b}, 0, es, "job")
    h = handles["op"]
    assert isinstance(h, ChangelogStateHandle)
    return h


def test_a_changelog_that_outgrows_its_base_is_materialized(tmp_path, monkeypatch):
    storage = FileSystemCheckpointStorageAccess(str(tmp_path / "chk"))
    storage.initialize_job("job")
    b = heap()
    put(b, range(1000), 1)
    h1 = checkpoint(storage, b, 1, None)
    assert h1.deltas == ()
    put(b, range(10), 2)
    h2 = checkpoint(storage, b, 2, h1)
    assert h2.base == h1.base and len(h2.deltas) == 1
    assert h2.deltas[0].size < h1.base.stream.size / 20  # only the change is written
    monkeypatch.setattr(cl, "MATERIALIZE_RATIO", 0.001)
    put(b, range(10), 3)
    h3 = checkpoint(storage, b, 3, h2)
    assert h3.base != h1.base and h3.deltas == ()  # a new base
    r = heap()
    r.restore([h2])
    assert H.dump(r, (V,))["v"] == {
        **{f"k{k}": 1 for k in range(1000)},
        **{f"k{k}": 2 for k in range(10)},
    }
    r3 = heap()
    r3.restore([h3])
    assert H.dump(r3, (V,))["v"] == H.dump(b, (V,))["v"]
