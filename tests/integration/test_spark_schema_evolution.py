"""Schema evolution end to end on Spark: a job runs on the heap backend at parallelism 2
and checkpoints; its next version changes every state class (a dataclass, a named row
in list state, a row in operator state) and restores that checkpoint at parallelism 3
into RocksDB (the column families are rewritten at restore). The restored state equals
the expected migration of the first run's state, field by field, and the run counts
every migrated entry."""

from __future__ import annotations

from typing import Any

import pytest

from streamstate.common import Types
from streamstate.datastream import ExternalizedCheckpointCleanup
from streamstate.datastream.state import ListStateDescriptor, ValueStateDescriptor
from streamstate.runtime.state_reader import read_keyed_state, read_operator_state
from streamstate.testing import TickingClock, use_default_clock
from tests.integration.jobs import make_env
from tests.integration.schema_jobs import HIST_V2, Reading, ReadingV2, Tracker

pytestmark = pytest.mark.spark

KEYS = [f"k{i}" for i in range(12)]
FIRST = [(k, i * 10 + j) for j in range(2) for i, k in enumerate(KEYS)]
SECOND = [(k, 1000 + i) for i, k in enumerate(KEYS[:4])]


def run(spark: Any, tmp_path: Any, name: str, data: Any, version: int, **conf: Any) -> Any:
    parallelism = conf.pop("parallelism")
    restore = conf.pop("restore", None)
    with use_default_clock(TickingClock(start_ms=1000)):
        env = make_env(spark, epoch_records=100, **conf)
        env.set_parallelism(parallelism)
        env.enable_checkpointing(1)
        cc = env.get_checkpoint_config()
        cc.set_checkpoint_storage_dir(str(tmp_path / name))
        cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
        if restore is not None:
            env.set_restore_path(restore)
        env.from_collection(data).set_parallelism(1).key_by(lambda v: v[0]).process(
            Tracker(version)
        ).uid("tracker").print()
        return env.execute(f"schema-{name}")


def test_state_classes_change_across_a_restore_at_another_parallelism(
    spark: Any, tmp_path: Any
) -> None:
    first = run(spark, tmp_path, "v1", FIRST, 1, parallelism=2, **{"state.backend.type": "hashmap"})
    chk = first.get_accumulator_result("latest-checkpoint")
    before = read_keyed_state(
        chk, "tracker", ValueStateDescriptor("reading", Types.DATACLASS(Reading))
    )
    assert set(before) == set(KEYS)

    second = run(
        spark,
        tmp_path,
        "v2",
        FIRST + SECOND,
        2,
        parallelism=3,
        restore=chk,
        **{"state.backend.type": "rocksdb"},
    )
    acc = second.get_all_accumulator_results()
    assert acc["state_migrated_entries.tracker.reading"] == len(KEYS)
    assert acc["state_migrated_entries.tracker.hist"] == len(KEYS)
    assert acc["state_migrated_entries.tracker.seen"] == len(FIRST)
    assert acc["restarts"] == 0

    chk2 = second.get_accumulator_result("latest-checkpoint")
    after = read_keyed_state(
        chk2, "tracker", ValueStateDescriptor("reading", Types.DATACLASS(ReadingV2))
    )
    extra = dict(SECOND)
    want = {
        k: ReadingV2(r.count + (k in extra), r.total + extra.get(k, 0), "C")
        for k, r in before.items()
    }
    assert after == want
    hist = read_keyed_state(chk2, "tracker", ListStateDescriptor("hist", HIST_V2))
    for i, k in enumerate(KEYS):
        expect = [(i * 10, None), (i * 10 + 1, None)] + ([(extra[k], "v2")] if k in extra else [])
        assert [(r.v, r.source) for r in hist[k]] == expect
    seen = read_operator_state(chk2, "tracker")["seen"]["subtasks"]
    rows = [r for part in seen for r in (part or [])]
    old = sorted((r.key, r.v) for r in rows if r.ok is None)
    assert old == sorted(FIRST)
    assert sorted((r.key, r.v) for r in rows if r.ok) == sorted(SECOND)
