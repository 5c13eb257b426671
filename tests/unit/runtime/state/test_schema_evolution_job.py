"""Schema evolution of whole jobs on the local runner (the task code Spark runs): a job's
keyed state (dataclass values, Row lists) and operator state (Rows) change their classes
between a checkpoint and a restore; the restored job migrates them once, counts the
entries in its metrics, logs what changed, and `streamstate describe` shows the recorded
schemas. A migration that cannot succeed fails the job without restarts and leaves the
checkpoint byte for byte as it was."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path
from typing import Any

import pytest

from streamstate.cli.main import main
from streamstate.common import Row, Types
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import (
    CheckpointedFunction,
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
)
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.datastream.state import ListStateDescriptor, ValueStateDescriptor
from streamstate.errors import JobExecutionError, StateMigrationError
from streamstate.runtime.state.registry import registered_keyed_backends
from streamstate.runtime.state_reader import describe_checkpoint, read_keyed_state
from streamstate.testing import TickingClock, use_default_clock
from tests.support import envs


@dataclasses.dataclass
class Reading:
    sensor: str
    total: int


@dataclasses.dataclass
class ReadingV2:  # 'total' kept, 'unit' added with a default, 'sensor' removed
    total: int
    unit: str = "C"


OP_V1 = Types.ROW_NAMED(["n", "note"], [Types.LONG(), Types.STRING()])
OP_V2 = Types.ROW_NAMED(["note", "n", "seen"], [Types.STRING(), Types.LONG(), Types.BOOLEAN()])
HIST_V1 = Types.ROW([Types.LONG()])
HIST_V2 = Types.ROW([Types.LONG(), Types.STRING()])
ROWS = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5), ("a", 6)]


class Summing(KeyedProcessFunction, CheckpointedFunction):
    def __init__(self, v2: bool, bad: bool = False) -> None:
        self.v2, self.bad = v2, bad

    def initialize_state(self, context: Any) -> None:
        t = OP_V2 if self.v2 else OP_V1
        if self.bad:
            t = Types.ROW_NAMED(["n", "note"], [Types.STRING(), Types.STRING()])
        self.seen = context.get_operator_state_store().get_list_state(
            ListStateDescriptor("seen", t)
        )

    def snapshot_state(self, context: Any) -> None:
        pass

    def open(self, ctx: Any) -> None:
        cls = ReadingV2 if self.v2 else Reading
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.DATACLASS(cls)))
        self.hist = ctx.get_list_state(ListStateDescriptor("hist", HIST_V2 if self.v2 else HIST_V1))

    def process_element(self, value: Any, ctx: Any) -> Any:
        cur = self.total.value()
        n = (cur.total if cur is not None else 0) + value[1]
        self.total.update(ReadingV2(n) if self.v2 else Reading(value[0], n))
        self.hist.add(Row(value[1], "new") if self.v2 else Row(value[1]))
        if not self.v2:
            self.seen.add(Row(n, value[0]))
        yield value[0], n


@pytest.fixture(autouse=True)
def checkpoint_every_epoch() -> Any:
    with use_default_clock(TickingClock()) as clock:
        yield clock


def make_env(tmp_path: Path, name: str, backend: str) -> Any:
    env = envs.make_env(max_records=2, conf={"state.backend.type": backend})
    env.enable_checkpointing(1)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(tmp_path / name))
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    return env


def run(env: Any, data: list[Any], fn: Any) -> tuple[list[Any], Any]:
    sink = CollectSink()
    env.from_collection(data).set_parallelism(1).key_by(lambda v: v[0]).process(fn).uid(
        "sum"
    ).sink_to(sink)
    result = env.execute("schema-job")
    return sink.get_results(), result


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("backend", registered_keyed_backends())
def test_restored_job_migrates_counts_logs_and_describes(
    tmp_path: Path, backend: str, caplog: Any, capsys: Any
) -> None:
    _, first = run(make_env(tmp_path, "one", backend), ROWS, Summing(v2=False))
    chk = first.get_accumulator_result("latest-checkpoint")
    op = describe_checkpoint(chk)["operators"]["sum"]
    assert "Reading(sensor: string, total: long)" in op["serializers"]["total"]["value"]["schema"]
    assert op["serializers"]["total"]["value"]["snapshot"]["name"] == "dataclass"
    assert op["operator_serializers"]["seen"][0]["schema"] == "row(n: long, note: string)"
    assert main(["describe", chk]) == 0
    out = capsys.readouterr().out
    assert "total: " in out and "Reading(sensor: string, total: long)" in out
    assert "seen: row(n: long, note: string)" in out

    env = make_env(tmp_path, "two", backend)
    env.set_restore_path(chk)
    with caplog.at_level(logging.INFO, logger="streamstate.migration"):
        out2, second = run(env, [*ROWS, ("a", 10), ("d", 1)], Summing(v2=True))
    assert sorted(out2) == [("a", 20), ("d", 1)]
    acc = second.get_all_accumulator_results()
    assert acc["state_migrated_entries.sum.total"] == 3  # keys a, b, c
    assert acc["state_migrated_entries.sum.hist"] == 3
    assert acc["state_migrated_entries.sum.seen"] == len(ROWS)
    assert acc["state_migrated_entries"] == 3 + 3 + len(ROWS)
    assert acc["restarts"] == 0
    assert "state 'total' migrated" in caplog.text  # one line per subtask
    assert "ReadingV2(total: long, unit: string)" in caplog.text

    chk2 = second.get_accumulator_result("latest-checkpoint")
    totals = read_keyed_state(
        chk2, "sum", ValueStateDescriptor("total", Types.DATACLASS(ReadingV2))
    )
    assert totals == {
        "a": ReadingV2(20),
        "b": ReadingV2(7),
        "c": ReadingV2(4),
        "d": ReadingV2(1),
    }
    hist = read_keyed_state(chk2, "sum", ListStateDescriptor("hist", HIST_V2))
    assert [tuple(r) for r in hist["a"]] == [(1, None), (3, None), (6, None), (10, "new")]


def test_a_migration_that_cannot_succeed_fails_the_job_without_restarts(
    tmp_path: Path, caplog: Any
) -> None:
    _, first = run(make_env(tmp_path, "one", "hashmap"), ROWS, Summing(v2=False))
    chk = first.get_accumulator_result("latest-checkpoint")
    before = digest(tmp_path / "one")
    env = make_env(tmp_path, "two", "hashmap")
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(5, 0))
    env.set_restore_path(chk)
    with pytest.raises(JobExecutionError) as info, caplog.at_level(logging.WARNING):
        run(env, ROWS, Summing(v2=False, bad=True))
    assert "restarting in" not in caplog.text  # StateMigrationError suppresses restarts
    chain: list[BaseException] = []
    e: BaseException | None = info.value
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    text = " ".join(str(x) for x in chain)
    assert any(isinstance(x, StateMigrationError) for x in chain) or "StateMigrationError" in text
    assert "'seen'" in text and "field 'n'" in text
    assert digest(tmp_path / "one") == before  # the checkpoint is untouched


@pytest.mark.parametrize(
    "fmt,first,second",
    [("CANONICAL", "rocksdb", "hashmap"), ("NATIVE", "rocksdb", "rocksdb")],
)
def test_a_savepoint_restores_into_changed_state_classes(
    tmp_path: Path, fmt: str, first: str, second: str
) -> None:
    from streamstate.common.savepoint import SavepointFormatType
    from tests.support.savepoints import stop_with_savepoint

    env = make_env(tmp_path, "one", first)
    sink = CollectSink()
    env.from_collection(ROWS).set_parallelism(1).key_by(lambda v: v[0]).process(
        Summing(v2=False)
    ).uid("sum").sink_to(sink)
    sp = stop_with_savepoint(
        env, tmp_path / "sp", at=1, format_type=getattr(SavepointFormatType, fmt)
    )
    env2 = make_env(tmp_path, "two", second)
    env2.set_restore_path(sp)
    _, result = run(env2, [*ROWS, ("a", 10)], Summing(v2=True))
    assert result.get_accumulator_result("state_migrated_entries.sum.total") >= 1
    chk = result.get_accumulator_result("latest-checkpoint")
    totals = read_keyed_state(chk, "sum", ValueStateDescriptor("total", Types.DATACLASS(ReadingV2)))
    want: dict[str, int] = {}
    for k, v in [*ROWS, ("a", 10)]:
        want[k] = want.get(k, 0) + v
    assert totals == {k: ReadingV2(v) for k, v in want.items()}
