"""Reading keyed state back from real checkpoints (State Processor API), local runner."""

from __future__ import annotations

import os

import pytest

from streamstate.common import Types
from streamstate.datastream import KeyedProcessFunction
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from streamstate.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    StateMigrationError,
)
from streamstate.runtime.checkpoint.metadata import CheckpointMetadata
from streamstate.runtime.state_reader import (
    describe_checkpoint,
    list_checkpoints,
    list_keyed_states,
    load_checkpoint,
    passthrough_descriptor,
    read_keyed_state,
)
from tests.support.envs import checkpoint_every_epoch, make_env

RECORDS = [("a", 1), ("b", 1), ("a", 1), ("c", 5), ("a", 2), ("b", 3), ("d", 7)]


class SumAgg:
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class AllKinds(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", Types.LONG()))
        self.by_n = ctx.get_map_state(MapStateDescriptor("by_n", Types.STRING(), Types.LONG()))
        self.total = ctx.get_reducing_state(
            ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG())
        )
        self.avg = ctx.get_aggregating_state(AggregatingStateDescriptor("avg", SumAgg()))

    def process_element(self, value, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        self.seen.add(value[1])
        self.by_n.put(f"n{c}", value[1])
        self.total.add(value[1])
        self.avg.add(value[1])
        yield value[0], c


def run_job(tmp_path, records=RECORDS, parallelism=2):
    env = checkpoint_every_epoch(
        make_env(parallelism, max_records=3), tmp_path / "chk", retain=True
    )
    sink = CollectSink()
    env.from_collection(records).key_by(lambda v: v[0]).process(AllKinds()).uid("counter").sink_to(
        sink
    )
    result = env.execute("all-kinds")
    return result, sink.get_results()


@pytest.fixture
def checkpoint(tmp_path):
    result, out = run_job(tmp_path)
    assert sorted(out) == sorted(
        [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("a", 3), ("b", 2), ("d", 1)]
    )
    path = result.get_accumulator_result("latest-checkpoint")
    assert path is not None
    return path


def test_read_every_state_kind(checkpoint):
    assert read_keyed_state(checkpoint, "counter", ValueStateDescriptor("count", Types.LONG())) == {
        "a": 3,
        "b": 2,
        "c": 1,
        "d": 1,
    }
    assert read_keyed_state(checkpoint, "counter", ListStateDescriptor("seen")) == {
        "a": [1, 1, 2],
        "b": [1, 3],
        "c": [5],
        "d": [7],
    }
    assert read_keyed_state(checkpoint, "counter", MapStateDescriptor("by_n"))["a"] == {
        "n1": 1,
        "n2": 1,
        "n3": 2,
    }
    total = ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG())
    assert read_keyed_state(checkpoint, "counter", total) == {"a": 4, "b": 4, "c": 5, "d": 7}
    # with the job's aggregate function: its result; pass-through: the accumulator
    avg = read_keyed_state(checkpoint, "counter", AggregatingStateDescriptor("avg", SumAgg()))
    assert avg == {"a": 4 / 3, "b": 2.0, "c": 5.0, "d": 7.0}
    raw = read_keyed_state(checkpoint, "counter", passthrough_descriptor("avg", "aggregating"))
    assert raw["a"] == (4, 3)


def test_paths_metadata_file_and_loaded_metadata(checkpoint):
    d = ValueStateDescriptor("count")
    by_dir = read_keyed_state(checkpoint, "counter", d)
    by_file = read_keyed_state(checkpoint.rstrip("/") + "/_metadata", "counter", d)
    md = load_checkpoint(checkpoint)
    assert isinstance(md, CheckpointMetadata)
    assert by_dir == by_file == read_keyed_state(md, "counter", d)
    local = checkpoint.removeprefix("file://")
    assert read_keyed_state(local, "counter", d) == by_dir


def test_list_keyed_states(checkpoint):
    assert list_keyed_states(checkpoint, "counter") == {
        "avg": "aggregating",
        "by_n": "map",
        "count": "value",
        "seen": "list",
        "total": "reducing",
    }


def test_unknown_operator_names_known_ones(checkpoint):
    with pytest.raises(ConfigurationError, match=r"'nope'.*'counter'"):
        read_keyed_state(checkpoint, "nope", ValueStateDescriptor("count"))


def test_unknown_state_and_wrong_kind(checkpoint):
    with pytest.raises(ConfigurationError, match=r"no keyed state named 'missing'.*'count'"):
        read_keyed_state(checkpoint, "counter", ValueStateDescriptor("missing"))
    with pytest.raises(ConfigurationError, match="list state"):
        read_keyed_state(checkpoint, "counter", ValueStateDescriptor("seen"))
    with pytest.raises(ConfigurationError, match="state descriptor"):
        read_keyed_state(checkpoint, "counter", "count")  # type: ignore[arg-type]


def test_incompatible_type_info(checkpoint):
    with pytest.raises(StateMigrationError, match="count"):
        read_keyed_state(checkpoint, "counter", ValueStateDescriptor("count", Types.STRING()))


def test_missing_and_damaged_checkpoints(tmp_path, checkpoint):
    with pytest.raises(CorruptCheckpointError, match="no _metadata"):
        load_checkpoint(str(tmp_path))
    local = checkpoint.removeprefix("file://")
    state_file = next(os.path.join(local, f) for f in os.listdir(local) if f != "_metadata")
    with open(state_file, "r+b") as f:
        f.truncate(5)
    with pytest.raises(CorruptCheckpointError, match="damaged"):
        read_keyed_state(checkpoint, "counter", ValueStateDescriptor("count"))
    # describe reads only the metadata
    assert describe_checkpoint(checkpoint)["checkpoint_id"] >= 1


def test_describe(checkpoint):
    info = describe_checkpoint(checkpoint)
    md = load_checkpoint(checkpoint)
    assert info["checkpoint_id"] == md.checkpoint_id
    assert info["job_id"] == md.job_id
    assert info["timestamp_ms"] == md.timestamp_ms
    assert info["job_name"] == "all-kinds"
    assert info["is_savepoint"] is False
    op = info["operators"]["counter"]
    assert op["parallelism"] == 2
    assert op["max_parallelism"] == 128
    assert 1 <= op["key_groups_with_state"] <= 4
    assert op["state_bytes"] > 0
    assert op["keyed_states"]["count"] == "value"
    ((_, pos),) = info["source_offsets"].items()
    assert pos == {"offset": len(RECORDS)}
    import json

    json.dumps(info)  # JSON-compatible


def test_list_checkpoints(tmp_path, checkpoint):
    infos = list_checkpoints(str(tmp_path / "chk"))
    assert [i.path for i in infos] == [checkpoint]
    (info,) = infos
    assert info.valid and info.timestamp_ms is not None
    assert list_checkpoints(str(tmp_path / "chk"), job_id="other") == []
    # the job directory itself is accepted too
    job_dir = tmp_path / "chk" / info.job_id
    assert [i.checkpoint_id for i in list_checkpoints(str(job_dir))] == [info.checkpoint_id]
    # an incomplete checkpoint is skipped unless asked for
    (job_dir / "chk-999").mkdir()
    assert len(list_checkpoints(str(tmp_path / "chk"))) == 1
    statuses = [i.status for i in list_checkpoints(str(tmp_path / "chk"), include_incomplete=True)]
    assert statuses == ["valid", "incomplete"]
    # a damaged metadata file shows as corrupt
    (job_dir / "chk-1000").mkdir()
    (job_dir / "chk-1000" / "_metadata").write_text("{not json")
    bad = [i for i in list_checkpoints(str(tmp_path / "chk")) if not i.valid]
    assert [(i.checkpoint_id, i.status) for i in bad] == [(1000, "corrupt")]
    assert "not valid JSON" in (bad[0].error or "")
    with pytest.raises(ConfigurationError, match="does not exist"):
        list_checkpoints(str(tmp_path / "nothing"))


def test_rescaled_job_reads_the_same(tmp_path):
    r1, _ = run_job(tmp_path / "p1", parallelism=1)
    r3, _ = run_job(tmp_path / "p3", parallelism=3)
    d = ValueStateDescriptor("count")
    a = read_keyed_state(r1.get_accumulator_result("latest-checkpoint"), "counter", d)
    b = read_keyed_state(r3.get_accumulator_result("latest-checkpoint"), "counter", d)
    assert a == b == {"a": 3, "b": 2, "c": 1, "d": 1}


def test_passthrough_descriptor_rejects_unknown_kind():
    with pytest.raises(ConfigurationError, match="unknown state kind"):
        passthrough_descriptor("x", "window")
