"""Job upgrades through savepoints, end to end on Spark local[2]: a job stopped with a
savepoint is restored changed three times (parallelism 2 -> 3 -> 1, heap -> RocksDB ->
heap, an operator added then removed) and its committed output equals an uninterrupted
run's, every record once; the state read from the intermediate savepoint equals the sums
of the records before it."""

from __future__ import annotations

from typing import Any

from streamstate.common import Encoder, SavepointFormatType
from streamstate.datastream.connectors import FileSink
from streamstate.runtime.checkpoint.storage import load_restore_point
from streamstate.runtime.state_reader import read_keyed_state
from streamstate.testing import TickingClock
from tests.support import envs
from tests.support.backends import fast_local_dir
from tests.support.files import committed_lines
from tests.support.runners import on_both_runners
from tests.support.savepoints import stop_with_savepoint
from tests.unit.runtime.checkpoint import test_savepoints as S

spark = on_both_runners()

expected = S.expected  # the uninterrupted run (in-process runner: the same output)


def spark_job(spark: Any, out: Any, parallelism: int, backend: str, extra: bool, **conf: str):
    keys = {"state.backend.type": backend, **conf}
    if backend == "rocksdb":
        keys["state.backend.rocksdb.localdir"] = fast_local_dir()
    env = envs.make_env(parallelism, spark=spark, max_records=20, conf=keys)
    env.set_clock(TickingClock())
    ds = env.from_collection(S.DATA).key_by(lambda v: v[0]).process(S.RunningSum()).uid("sum")
    if extra:
        ds = ds.key_by(lambda s: s.split(",")[0]).process(S.RunningSum2()).uid("new-op")
    # the sink keeps in-progress parts in its state: a stable uid survives the added operator
    ds.sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid(
        "sink"
    )
    return env


def test_upgrade_chain_on_spark_writes_everything_once(spark, tmp_path, expected):
    out = tmp_path / "out"
    first = spark_job(spark, out, 2, "hashmap", False)
    sp1 = stop_with_savepoint(first, tmp_path / "sp1", at=4)
    n1 = len(committed_lines(out))
    assert 0 < n1 < len(expected)

    second = spark_job(spark, out, 3, "rocksdb", True)  # 2 -> 3, heap -> RocksDB, + new-op
    second.set_restore_path(sp1)
    md1, _ = load_restore_point(sp1)
    sp2 = stop_with_savepoint(
        second,
        tmp_path / "sp2",
        at=md1.properties["epoch"] + 5,
        format_type=SavepointFormatType.CANONICAL,
    )
    md2, _ = load_restore_point(sp2)
    assert set(md2.operator_states) >= {"sum", "new-op"}
    n2 = len(committed_lines(out))
    assert n1 < n2 < len(expected)
    # the savepoint's state is the sums of every record of the epochs it covers
    upto = S.DATA[: 20 * md2.properties["epoch"]]
    assert read_keyed_state(sp2, "sum", S.TOTAL) == {
        k: sum(v for kk, v in upto if kk == k) for k, _ in upto
    }

    third = spark_job(  # 3 -> 1, RocksDB -> heap, new-op removed (its state dropped)
        spark,
        out,
        1,
        "hashmap",
        False,
        **{"execution.state-recovery.ignore-unclaimed-state": "true"},
    )
    third.set_restore_path(sp2)
    third.execute("third")
    assert committed_lines(out) == expected
