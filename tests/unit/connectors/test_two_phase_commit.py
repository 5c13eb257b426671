"""TwoPhaseCommitSinkFunction: the protocol proven with a real file-system transaction."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from typing import Any

import pytest

from streamstate.common.restart_strategy import RestartStrategies
from streamstate.connectors.two_phase_commit import (
    TransactionHolder,
    TransactionState,
    TwoPhaseCommitCommitter,
)
from streamstate.datastream import ExternalizedCheckpointCleanup
from streamstate.datastream.functions import TwoPhaseCommitSinkFunction
from streamstate.errors import IllegalLifecycleTransition
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.support import envs

N = 40


class FileTransactionSink(TwoPhaseCommitSinkFunction):
    """One hidden file per transaction, renamed to ``part-<uuid>`` on commit."""

    def __init__(self, out: str) -> None:
        self.out = out

    def _log(self, what: str, txn: Any) -> None:
        with open(os.path.join(self.out, "..", "hooks.log"), "a") as f:
            f.write(f"{what} {os.path.basename(txn[0])}\n")

    def begin_transaction(self) -> tuple[str, str]:
        os.makedirs(self.out, exist_ok=True)
        name = uuid.uuid4().hex
        txn = (os.path.join(self.out, f".txn-{name}"), os.path.join(self.out, f"part-{name}"))
        open(txn[0], "w").close()
        self._log("begin", txn)
        return txn

    def invoke(self, transaction, value, context):
        with open(transaction[0], "a") as f:
            f.write(f"{value}\n")

    def pre_commit(self, transaction):
        with open(transaction[0], "a") as f:
            os.fsync(f.fileno())
        self._log("pre_commit", transaction)

    def commit(self, transaction):
        if os.path.exists(transaction[0]):
            os.replace(transaction[0], transaction[1])  # idempotent: a retry finds nothing
        self._log("commit", transaction)

    def abort(self, transaction):
        if os.path.exists(transaction[0]):
            os.remove(transaction[0])
        self._log("abort", transaction)

    def recover_and_abort_orphans(self, keep):
        kept = {t[0] for t in keep}
        for f in os.listdir(self.out) if os.path.isdir(self.out) else []:
            p = os.path.join(self.out, f)
            if f.startswith(".txn-") and p not in kept:
                os.remove(p)


class Observe:
    """Logs, per record, how many records are committed (a side channel)."""

    def __init__(self, out: str, log: str) -> None:
        self.out, self.log = out, log

    def __call__(self, v: int) -> int:
        n = len(committed(self.out)) if os.path.isdir(self.out) else 0
        with open(self.log, "a") as f:
            f.write(f"{n}\n")
        return v


def committed(out: str) -> list[int]:
    rows: list[int] = []
    for f in sorted(os.listdir(out)):
        if f.startswith("part-"):
            with open(os.path.join(out, f)) as fh:
                rows.extend(int(line) for line in fh.read().splitlines())
    return rows


def leftovers(out: str) -> list[str]:
    return [f for f in os.listdir(out) if f.startswith(".txn-")]


@pytest.fixture
def clock():
    with use_default_clock(TickingClock()) as c:
        yield c


def make_env(tmp_path, interval: int = 1, **kw: Any):
    env = envs.make_env(max_records=5, **kw)
    env.enable_checkpointing(interval)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    return env


def test_failure_free_run_commits_every_record_once(tmp_path, clock):
    out = str(tmp_path / "out")
    env = make_env(tmp_path)
    env.from_sequence(1, N).add_sink(FileTransactionSink(out))
    env.execute("2pc")
    assert sorted(committed(out)) == list(range(1, N + 1))
    assert leftovers(out) == []
    hooks = (tmp_path / "hooks.log").read_text().split()
    assert hooks.count("pre_commit") == hooks.count("commit") == hooks.count("begin") > 1


def test_nothing_is_visible_before_the_checkpoint_completes(tmp_path, clock):
    out = str(tmp_path / "out")
    env = make_env(tmp_path, interval=3_600_000)  # only the final checkpoint
    log = str(tmp_path / "seen.log")
    env.from_sequence(1, N).map(Observe(out, log)).add_sink(FileTransactionSink(out))
    env.execute("2pc")
    with open(log) as f:
        seen = [int(x) for x in f.read().split()]
    assert len(seen) == N and set(seen) == {0}
    assert sorted(committed(out)) == list(range(1, N + 1))


@pytest.mark.parametrize("epoch, interval", [(3, 1), (4, 2500), (2, 10**9)])
def test_exactly_once_after_a_failure(tmp_path, clock, epoch, interval):
    out = str(tmp_path / "out")
    env = make_env(tmp_path, interval)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    fail = FailOnce(str(tmp_path), epoch=epoch, subtask=1, after_records=1)
    env.from_sequence(1, N).map(fail).add_sink(FileTransactionSink(out))
    result = env.execute("2pc")
    assert fail.fired and result.get_accumulator_result("restarts") == 1
    assert Counter(committed(out)) == Counter(range(1, N + 1))  # no loss, no duplicate
    assert leftovers(out) == []


def test_resume_from_a_retained_checkpoint(tmp_path, clock):
    out = str(tmp_path / "out")
    env = make_env(tmp_path, max_epochs=3)
    env.from_sequence(1, N).add_sink(FileTransactionSink(out))
    first = env.execute("2pc")
    latest = first.get_accumulator_result("latest-checkpoint")
    part = committed(out)
    assert 0 < len(part) < N
    env2 = make_env(tmp_path)
    env2.set_restore_path(latest)
    env2.from_sequence(1, N).add_sink(FileTransactionSink(out))
    env2.execute("2pc")
    assert Counter(committed(out)) == Counter(range(1, N + 1))
    assert leftovers(out) == []


def test_restore_recommits_pending_and_drops_orphans(tmp_path):
    """A driver dying between the checkpoint's _metadata and the commit: the pending
    transactions are in the checkpoint; the restored committer commits them, and an
    orphan (pre-committed after the checkpoint, never acknowledged) is dropped."""
    out = str(tmp_path / "out")
    sink = FileTransactionSink(out)
    from streamstate.connectors.two_phase_commit import _encode

    txns = []
    for i in range(3):
        t = sink.begin_transaction()
        sink.invoke(t, i, None)
        sink.pre_commit(t)
        txns.append(t)
    c1 = TwoPhaseCommitCommitter(sink)
    c1.prepare(1, [_encode(txns[0]), None])
    c1.prepare(2, [_encode(txns[1])])
    state = c1.snapshot(2)  # checkpoint at epoch 2: its _metadata holds this; then the crash
    assert committed(out) == []
    c2 = TwoPhaseCommitCommitter(sink)  # the restarted driver
    c2.abort(2)
    c2.restore(state)
    c2.restore(state)  # a second restore (crash during the first recommit) is harmless
    assert sorted(committed(out)) == [0, 1]
    assert leftovers(out) == []  # txns[2] was an orphan


def test_transaction_lifecycle_is_guarded():
    h = TransactionHolder("t")
    with pytest.raises(IllegalLifecycleTransition, match="open to committed"):
        h.move_to(TransactionState.COMMITTED)
    h.move_to(TransactionState.PRE_COMMITTED)
    h.move_to(TransactionState.COMMITTED)
    with pytest.raises(IllegalLifecycleTransition, match="committed to aborted"):
        h.move_to(TransactionState.ABORTED)
