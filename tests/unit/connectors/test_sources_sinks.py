"""Replayable sources (exactly-once reads, rescaling) and transactional sink committers."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamstate.common import Configuration, Types
from streamstate.common.serialization import Encoder
from streamstate.connectors.collection import CollectionSource
from streamstate.connectors.file_sink import FileCommitter
from streamstate.connectors.files import TextLineFileSource
from streamstate.connectors.sequence import SequenceSource
from streamstate.connectors.sinks import CollectCommitter
from streamstate.datastream import MapFunction, StreamExecutionEnvironment
from streamstate.datastream.connectors import BucketAssigner, CollectSink, FileSink, RollingPolicy
from streamstate.errors import ConfigurationError

# -- a driver loop over a source, as the executor runs it -----------------------------------


def run_epochs(
    src: Any,
    state: Any,
    parallelism: int,
    budgets: list[int],
    reads: list[list[Any]],
    max_epochs: int | None = None,
) -> Any:
    """Plan/read/apply epochs until finished (or ``max_epochs``); appends to ``reads[i]``.

    The state is JSON round-tripped every epoch: that is what a checkpoint stores.
    """
    epoch = 0
    while not src.is_finished(state):
        if max_epochs is not None and epoch >= max_epochs:
            break
        budget = budgets[epoch % len(budgets)]
        assignments = src.plan_epoch(state, parallelism)
        assert len(assignments) == parallelism
        progress = []
        for i, a in enumerate(assignments):
            records, prog = src.read(a, budget)
            assert len(records) <= budget
            reads[i].extend(records)
            progress.append(prog)
        state = json.loads(json.dumps(src.apply_progress(state, progress)))
        epoch += 1
        assert epoch < 10_000, "source makes no progress"
    return state


budgets_st = st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=5)
parallelism_st = st.integers(min_value=1, max_value=4)


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.integers(), max_size=40),
    budgets=budgets_st,
    p=parallelism_st,
    chunk=st.integers(min_value=1, max_value=9),
    shipped=st.booleans(),
)
def test_collection_source_reads_everything_once_in_order(data, budgets, p, chunk, shipped):
    """At any parallelism the readers of an epoch read adjacent stripes: the records in
    (epoch, reader) order are the list, each once, also from a worker's (pickled) copy
    that unpickles only the chunks it reads."""
    import streamstate.connectors.collection as collection

    real = collection._CHUNK
    collection._CHUNK = chunk
    try:
        src = CollectionSource(data)
        if shipped:
            src = pickle.loads(pickle.dumps(src))
        state = src.create_enumerator_state(p)
        in_order: list[Any] = []
        epoch = 0
        while not src.is_finished(state):
            budget = budgets[epoch % len(budgets)]
            assignments = src.plan_epoch(state, p)
            finishes = src.finishes_within(state, p, budget)
            progress = []
            for a in assignments:
                records, prog = src.read(a, budget)
                assert len(records) <= budget
                in_order.extend(records)
                progress.append(prog)
            state = json.loads(json.dumps(src.apply_progress(state, progress)))
            assert finishes == src.is_finished(state)
            epoch += 1
            assert epoch < 10_000, "source makes no progress"
    finally:
        collection._CHUNK = real
    assert in_order == data


def test_collection_source_serializes_elements_when_defined():
    """As Flink's fromCollection, the elements are serialized when the source is made:
    changing the list or an element afterwards changes nothing that is read, and the
    source holds no list of the elements (bytes only)."""
    data = [[1], [2], [3]]
    src = CollectionSource(data)
    data[0].append(99)
    data.append([4])
    assert src.read([0, 0], 10)[0] == [[1], [2], [3]]
    lists = [name for name, value in vars(src).items() if isinstance(value, list)]
    assert lists == ["_packed"] and all(type(blob) is bytes for blob in src._packed)


def test_collection_source_ships_shared_elements_as_copies():
    """Elements are pickled without a memo (each one on its own, as Flink serializes
    them): one object twice in the list arrives as two equal objects; a cyclic element
    still ships (its chunk with the memo)."""
    shared = {"a": [1, 2]}
    src = pickle.loads(pickle.dumps(CollectionSource([shared, shared])))
    (a, b), _ = src.read([0, 0], 10)
    assert a == b == shared and a is not b
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    src = pickle.loads(pickle.dumps(CollectionSource([cyclic])))
    (c,), _ = src.read([0, 0], 10)
    assert c[1] is c


@settings(max_examples=60, deadline=None)
@given(
    start=st.integers(min_value=-50, max_value=50),
    n=st.integers(min_value=1, max_value=60),
    budgets=budgets_st,
    p=parallelism_st,
)
def test_sequence_source_reads_everything_once_in_order_per_split(start, n, budgets, p):
    end = start + n - 1
    src = SequenceSource(start, end)
    reads: list[list[Any]] = [[] for _ in range(p)]
    run_epochs(src, src.create_enumerator_state(p), p, budgets, reads)
    flat = [v for r in reads for v in r]
    assert sorted(flat) == list(range(start, end + 1))
    assert len(flat) == len(set(flat))
    for r in reads:  # each reader owns contiguous, increasing ranges
        assert r == sorted(r)


def test_sequence_source_rejects_an_empty_range():
    with pytest.raises(ConfigurationError):
        SequenceSource(5, 4)


FILES = {
    "a.txt": "a1\na2\na3\n",
    "b.txt": "b1\r\nb2\n\nb4",  # CRLF, an empty line, no trailing newline
    "c/d.txt": "d1\nü2\n",
    "empty.txt": "",
    ".hidden": "never\n",
    "_SUCCESS": "never\n",
}


def expected_lines(files: dict[str, str]) -> dict[str, list[str]]:
    out = {}
    for name, text in files.items():
        if os.path.basename(name).startswith((".", "_")):
            continue
        out[name] = [line.rstrip("\r") for line in text.split("\n")]
        if text.endswith("\n") or text == "":
            out[name] = out[name][:-1]
    return out


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("text")
    for name, text in FILES.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(text.encode("utf-8"))
    return d


def check_file_reads(reads: list[list[str]]) -> None:
    exp = expected_lines(FILES)
    flat = [v for r in reads for v in r]
    assert sorted(flat) == sorted(v for lines in exp.values() for v in lines)
    # per split (file) the lines come in file order, within whichever reader read them
    for lines in exp.values():
        unique = [v for v in lines if v]
        for r in reads:
            mine = [v for v in r if v in unique]
            assert mine == [v for v in unique if v in mine]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(budgets=budgets_st, p=parallelism_st)
def test_text_file_source_reads_every_line_once(text_dir, budgets, p):
    src = TextLineFileSource([str(text_dir)])
    state = src.create_enumerator_state(p)
    assert len(state["files"]) == 4  # hidden files are skipped
    reads: list[list[Any]] = [[] for _ in range(p)]
    run_epochs(src, state, p, budgets, reads)
    check_file_reads(reads)


def test_text_file_source_missing_path_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        TextLineFileSource([str(tmp_path / "nope")]).create_enumerator_state(1)


def make_source(kind: str, text_dir: Path) -> tuple[Any, Any]:
    """(source, checker of the concatenated reads of all readers)."""
    if kind == "collection":
        data = list(range(23))
        # each element once (the order across epochs: test_collection_source_reads_...)
        return CollectionSource(data), lambda flat: sorted(flat) == data
    if kind == "sequence":
        return SequenceSource(0, 40), lambda flat: sorted(flat) == list(range(41))

    def check(flat: list[str]) -> bool:
        exp = expected_lines(FILES)
        return sorted(flat) == sorted(v for lines in exp.values() for v in lines)

    return TextLineFileSource([str(text_dir)]), check


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(["collection", "sequence", "files"]),
    p1=parallelism_st,
    p2=parallelism_st,
    before=st.integers(min_value=0, max_value=4),
    budgets=budgets_st,
)
def test_restore_at_another_parallelism_reads_the_rest_once(
    text_dir, kind, p1, p2, before, budgets
):
    src, check = make_source(kind, text_dir)
    reads1: list[list[Any]] = [[] for _ in range(p1)]
    state = run_epochs(src, src.create_enumerator_state(p1), p1, budgets, reads1, before)
    restored = src.restore_enumerator_state(json.loads(json.dumps(state)), p2)
    reads2: list[list[Any]] = [[] for _ in range(p2)]
    run_epochs(src, restored, p2, budgets, reads2)
    flat = [v for r in reads1 for v in r] + [v for r in reads2 for v in r]
    assert check(flat)


def test_file_source_discovers_new_files(tmp_path):
    (tmp_path / "1.txt").write_text("x1\nx2\n")
    src = TextLineFileSource([str(tmp_path)], monitor_interval_ms=1000)
    assert not src.bounded
    state = src.create_enumerator_state(1)
    state = src.discover(state, now_ms=10_000)
    assert [os.path.basename(f[0]) for f in state["files"]] == ["1.txt"]
    reads: list[list[Any]] = [[]]
    # an unbounded source never finishes: read the current files to their end
    for _ in range(3):
        state = run_epochs(src, state, 1, [5], reads, max_epochs=1)
    assert reads == [["x1", "x2"]]
    assert not src.is_finished(state)

    (tmp_path / "2.txt").write_text("y1\n")
    (tmp_path / ".3.txt.inprogress").write_text("hidden\n")
    assert src.discover(state, now_ms=10_500) == state  # interval not elapsed yet
    state = src.discover(state, now_ms=11_000)
    assert [os.path.basename(f[0]) for f in state["files"]] == ["1.txt", "2.txt"]
    assert state["last_scan_ms"] == 11_000
    state = run_epochs(src, state, 1, [5], reads, max_epochs=1)
    assert reads == [["x1", "x2", "y1"]]
    # a known file is not re-added; nothing new -> state's files unchanged
    again = src.discover(state, now_ms=20_000)
    assert again["files"] == state["files"]


def test_bounded_file_source_ignores_discovery(tmp_path):
    (tmp_path / "1.txt").write_text("x1\n")
    src = TextLineFileSource([str(tmp_path)])
    state = src.create_enumerator_state(1)
    (tmp_path / "2.txt").write_text("y1\n")
    assert src.discover(state, now_ms=10**12) == state


# -- committers ------------------------------------------------------------------------------


def test_collect_committer_exactly_once():
    c = CollectCommitter(exactly_once=True)
    c.prepare(1, [["a"], None, ["b", "c"]])
    assert c.committed == []  # not visible before a checkpoint covers epoch 1
    c.commit(1)
    assert c.committed == ["a", "b", "c"]
    c.prepare(2, [["d"]])
    c.prepare(3, [["e"]])
    c.abort(2)  # roll back to the checkpoint of epoch 2: epoch 3 is dropped
    c.commit(3)
    assert c.committed == ["a", "b", "c", "d"]
    c.commit(3)  # a second commit publishes nothing new
    assert c.committed == ["a", "b", "c", "d"]


def test_collect_committer_publishes_a_replayed_epoch_once():
    # recovery fell back to an older checkpoint (epoch 1) although epoch 2 was committed
    c = CollectCommitter(exactly_once=True)
    c.prepare(1, [["a"]])
    c.prepare(2, [["b"]])
    c.commit(2)
    c.abort(1)
    c.prepare(2, [["b"]])  # the deterministic replay of epoch 2
    c.prepare(3, [["c"]])
    c.commit(3)
    assert c.committed == ["a", "b", "c"]


def test_collect_committer_at_least_once():
    c = CollectCommitter(exactly_once=False)
    c.prepare(1, [["a"], ["b"]])
    assert c.committed == ["a", "b"]  # visible when the epoch completed
    c.abort(0)  # a rollback cannot take them back
    c.prepare(1, [["a"], ["b"]])  # the replay duplicates them
    c.commit(1)
    assert c.committed == ["a", "b", "a", "b"]


def _tmp_part(d: Path, name: str, content: str) -> list[str]:
    tmp = d / f".{name}.x.inprogress"
    tmp.write_text(content)
    return [str(tmp), str(d / name)]


def test_file_committer_commit_renames_and_is_idempotent(tmp_path):
    c = FileCommitter()
    p1 = _tmp_part(tmp_path, "part-0-1", "one\n")
    p2 = _tmp_part(tmp_path, "part-1-1", "two\n")
    c.prepare(1, [[p1], None, [p2]])  # results of earlier versions: [tmp, final] pairs
    assert c.snapshot(1) == [[*p1, []], [*p2, []]]
    assert not os.path.exists(p1[1])
    c.commit(1)
    assert Path(p1[1]).read_text() == "one\n" and Path(p2[1]).read_text() == "two\n"
    assert not os.path.exists(p1[0]) and not os.path.exists(p2[0])
    c.commit(1)  # nothing pending: no error
    c.restore([p1, p2])  # re-committing what a checkpoint recorded: tmp files are gone, no-op
    assert Path(p1[1]).read_text() == "one\n"
    assert c.snapshot(10) == []


def test_file_committer_restore_commits_pending_parts(tmp_path):
    p = _tmp_part(tmp_path, "part-0-4", "four\n")
    fresh = FileCommitter()  # e.g. after a driver restart
    fresh.restore([p])
    assert Path(p[1]).read_text() == "four\n" and not os.path.exists(p[0])


def test_file_committer_abort_deletes_later_epochs(tmp_path):
    c = FileCommitter()
    p1 = _tmp_part(tmp_path, "part-0-1", "one\n")
    p2 = _tmp_part(tmp_path, "part-0-2", "two\n")
    c.prepare(1, [[p1]])
    c.prepare(2, [[p2]])
    assert c.snapshot(1) == [[*p1, []]]
    c.abort(1)
    assert not os.path.exists(p2[0]) and not os.path.exists(p2[1])
    c.commit(5)
    assert sorted(os.listdir(tmp_path)) == ["part-0-1"]


# -- FileSink end to end -------------------------------------------------------------------------


class VisibleParts(MapFunction):
    """Records, per record, which committed part files exist in ``out`` (a side channel)."""

    def __init__(self, out: str, log: str) -> None:
        self.out, self.log = out, log

    def map(self, value):
        visible = (
            sorted(f for f in os.listdir(self.out) if f.startswith("part-"))
            if os.path.isdir(self.out)
            else []
        )
        with open(self.log, "a") as f:
            f.write(json.dumps(visible) + "\n")
        return value


def read_parts(out: Path) -> list[str]:
    lines = []
    for f in sorted(out.iterdir()):
        if f.name.startswith("part-"):
            lines.extend(f.read_text().splitlines())
    return lines


@pytest.mark.parametrize("checkpointing", [True, False])
def test_file_sink_end_to_end(tmp_path, checkpointing):
    out = tmp_path / "out"
    log = tmp_path / "visible.log"
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", "4")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    if checkpointing:
        # the first periodic checkpoint is an hour away: only the final one commits
        env.enable_checkpointing(3_600_000)
        env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    builder = FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
    builder = builder.with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
    if not checkpointing:
        # parts of 2 records: they roll within the epochs and are committed at the epoch ends
        policy = RollingPolicy.default_rolling_policy(part_size=5)
        builder = builder.with_rolling_policy(policy)
    env.from_sequence(1, 30).map(VisibleParts(str(out), str(log))).sink_to(builder.build())
    result = env.execute("file-sink")

    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(seen) == 30
    if checkpointing:
        # nothing is visible while the job runs: parts appear with the final checkpoint
        assert all(v == [] for v in seen)
        assert result.get_accumulator_result("checkpoints") >= 1
    else:
        # without checkpointing an epoch's rolled parts are committed at its end
        assert seen[0] == [] and any(v for v in seen)
    names = sorted(f.name for f in out.iterdir())
    assert names and all(n.startswith("part-") for n in names), names  # no in-progress leftovers
    assert sorted(read_parts(out), key=int) == [str(i) for i in range(1, 31)]


class _RunningList(MapFunction):
    """Per key, the list of values seen so far (order-sensitive keyed state)."""

    def open(self, ctx: Any) -> None:
        from streamstate.datastream.state import ValueStateDescriptor

        self.seen = ctx.get_state(ValueStateDescriptor("seen", Types.PICKLED_BYTE_ARRAY()))

    def map(self, value: Any) -> Any:
        seen = (self.seen.value() or []) + [value[1]]
        self.seen.update(seen)
        return value[0], tuple(seen)


@pytest.mark.parametrize("readers", [2, 3])
def test_collection_read_by_several_subtasks_keeps_the_order_of_each_key(readers):
    """Readers of adjacent stripes feed a keyed operator the records of every key in the
    list's order, as one reader does; an epoch interval does not cut a striped reader."""
    from tests.support.envs import make_env

    data = [(f"k{i % 7}", i) for i in range(200)]

    def run(p: int) -> tuple[dict[str, list[Any]], int]:
        env = make_env(2, max_records=9, conf={"execution.epoch.interval": "1ms"})
        sink = CollectSink()
        env.from_collection(data).set_parallelism(p).key_by(lambda v: v[0]).map(
            _RunningList()
        ).sink_to(sink)
        result = env.execute()
        out: dict[str, list[Any]] = {}
        for k, seen in sink.get_results():
            out.setdefault(k, []).append(seen)
        return out, result.get_all_accumulator_results()["epochs"]

    one, epochs_one = run(1)
    several, epochs_several = run(readers)
    assert several == one
    assert all(v[-1] == tuple(i for kk, i in data if kk == k) for k, v in one.items())
    assert epochs_several < epochs_one  # readers * 9 records an epoch, not 9
