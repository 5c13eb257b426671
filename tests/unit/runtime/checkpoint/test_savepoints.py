"""Savepoints: trigger one while the job runs, stop with one, restore a changed job from it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from streamstate.common import Encoder, SavepointFormatType, Types
from streamstate.datastream import KeyedProcessFunction
from streamstate.datastream.connectors import FileSink
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.errors import CorruptCheckpointError, StateMigrationError
from streamstate.runtime.checkpoint.storage import load_restore_point
from streamstate.runtime.state_reader import read_keyed_state
from streamstate.testing import TickingClock
from tests.support import envs
from tests.support.backends import fast_local_dir
from tests.support.files import committed_lines
from tests.support.savepoints import PauseAt, stop_with_savepoint

DATA = [(f"k{i % 9}", i) for i in range(360)]  # 18 epochs of 20
TOTAL = ValueStateDescriptor("total", Types.LONG())


class RunningSum(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(TOTAL)

    def process_element(self, value: Any, ctx: Any) -> Any:
        t = (self.total.value() or 0) + value[1]
        self.total.update(t)
        yield f"{value[0]},{value[1]},{t}"


def job(
    out: Path,
    parallelism: int = 2,
    backend: str = "hashmap",
    extra_operator: bool = False,
    stateful: bool = True,
    **conf: str,
) -> Any:
    keys = {"state.backend.type": backend, **conf}
    if backend == "rocksdb":
        keys["state.backend.rocksdb.localdir"] = fast_local_dir()
    env = envs.make_env(parallelism, max_records=20, conf=keys)
    env.set_clock(TickingClock())
    ds = env.from_collection(DATA).key_by(lambda v: v[0])
    if stateful:
        ds = ds.process(RunningSum()).uid("sum")
    else:
        ds = ds.map(lambda v: f"{v[0]},{v[1]},-")
    if extra_operator:
        ds = ds.key_by(lambda s: s.split(",")[0]).process(RunningSum2()).uid("new-op")
    # the FileSink keeps its open parts in operator state: a stable uid, as in Flink
    ds.sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid(
        "files"
    )
    return env


class RunningSum2(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.n = ctx.get_state(ValueStateDescriptor("n", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.n.update((self.n.value() or 0) + 1)
        yield value


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    job(out).execute("uninterrupted")
    return committed_lines(out)


def test_trigger_savepoint_while_the_job_runs(tmp_path, expected):
    env = job(tmp_path / "out")
    pause = PauseAt(4)
    env.add_job_observer(pause)
    client = env.execute_async("running")
    assert pause.reached.wait(30)
    future = client.trigger_savepoint(str(tmp_path / "sp"))
    pause.go.set()
    path = Path(future.result(timeout=60))
    result = client.get_job_execution_result().result(60)
    assert result.get_accumulator_result("savepoints") == 1
    assert committed_lines(tmp_path / "out") == expected  # the job went on to the end
    assert path.parent == tmp_path / "sp" and (path / "_metadata").exists()
    md, _ = load_restore_point(str(path))
    assert md.is_savepoint and md.properties["epoch"] == 5
    # relocatable: file handles are relative to the savepoint's directory
    text = (path / "_metadata").read_text()
    assert '"path": "sum-0-keyed"' in text and str(path) not in text
    state = read_keyed_state(str(path), "sum", TOTAL)
    upto = DATA[:100]  # epochs 1..5
    assert state == {k: sum(v for kk, v in upto if kk == k) for k, _ in upto}


@pytest.mark.parametrize(
    ("parallelism", "backend", "fmt"),
    [
        (2, "hashmap", SavepointFormatType.CANONICAL),
        (3, "rocksdb", SavepointFormatType.CANONICAL),  # heap -> RocksDB, 2 -> 3
        (1, "hashmap", SavepointFormatType.CANONICAL),  # 2 -> 1
    ],
)
def test_stop_with_savepoint_then_restore_a_changed_job_writes_everything_once(
    tmp_path, expected, parallelism, backend, fmt
):
    out = tmp_path / "out"
    sp = stop_with_savepoint(job(out), tmp_path / "sp", at=6, format_type=fmt)
    before = committed_lines(out)
    assert 0 < len(before) < len(expected)  # stopped half way, what it covered committed
    moved = tmp_path / "moved" / Path(sp).name
    shutil.copytree(sp, moved)  # relocated
    shutil.rmtree(sp)
    restored = job(out, parallelism=parallelism, backend=backend)
    restored.set_restore_path(str(moved))
    restored.execute("restored")
    assert committed_lines(out) == expected


def test_native_rocksdb_savepoint_restores(tmp_path, expected):
    out = tmp_path / "out"
    sp = stop_with_savepoint(
        job(out, backend="rocksdb"), tmp_path / "sp", at=5, format_type=SavepointFormatType.NATIVE
    )
    assert any(p.name.startswith("sst-") for p in Path(sp).iterdir())
    restored = job(out, backend="rocksdb")
    restored.set_restore_path(sp)
    restored.execute("restored-native")
    assert committed_lines(out) == expected


def test_a_new_operator_starts_empty_and_a_removed_one_needs_allow(tmp_path):
    sp = stop_with_savepoint(job(tmp_path / "out"), tmp_path / "sp", at=3)
    with_new = job(tmp_path / "out2", extra_operator=True)
    with_new.set_restore_path(sp)
    with_new.execute("with-a-new-operator")  # "new-op" has no state in the savepoint: empty
    without = job(tmp_path / "out3", stateful=False)
    without.set_restore_path(sp)
    with pytest.raises(StateMigrationError, match=r"'sum'.*allow-non-restored-state"):
        without.execute("without-sum")
    allowed = job(
        tmp_path / "out4",
        stateful=False,
        **{"execution.state-recovery.ignore-unclaimed-state": "true"},
    )
    allowed.set_restore_path(sp)
    allowed.execute("allowed")


def test_a_directory_without_metadata_or_damaged_is_not_a_savepoint(tmp_path):
    sp = Path(stop_with_savepoint(job(tmp_path / "out"), tmp_path / "sp", at=3))
    incomplete = tmp_path / "incomplete"
    shutil.copytree(sp, incomplete)
    (incomplete / "_metadata").unlink()
    env = job(tmp_path / "o2")
    env.set_restore_path(str(incomplete))
    with pytest.raises(CorruptCheckpointError, match="no valid completed checkpoint"):
        env.execute("incomplete")
    victim = next(p for p in sp.iterdir() if p.name.endswith("-keyed"))
    victim.write_bytes(victim.read_bytes()[:-3])
    env = job(tmp_path / "o3")
    env.set_restore_path(str(sp))
    with pytest.raises(CorruptCheckpointError, match=victim.name):
        env.execute("damaged")


def test_a_savepoint_request_of_a_finished_job_fails(tmp_path):
    env = job(tmp_path / "out")
    client = env.execute_async("short")
    client.get_job_execution_result().result(60)
    with pytest.raises(Exception, match="not running|ended"):
        client.trigger_savepoint(str(tmp_path / "sp")).result(timeout=10)
