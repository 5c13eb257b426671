"""PyFlink's example programs (``pyflink/examples/datastream`` in the pinned
``apache-flink`` wheel, read by ``tests/support/pyflink_examples.py``; nothing of them is
committed here), unchanged but for the imports, against what Flink prints
(``expected.py``, computed without streamstate). Each runs on the in-process runner and on
a Spark Connect session (``sc://127.0.0.1``, the test server); two on Spark local[2] too."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.pyflink_docs.conftest import Run, program_globals
from tests.pyflink_docs.expected import f32, java_tuple, running, sessions, sliding, tumbling

HINT = "Printing result to stdout. Use --output to specify output path."
HI = [1, 2, 3, 4, 5, 8, 9, 15]  # the timestamps of the windowing examples' ('hi', t)
#: each example runs in process and on the test session's Spark Connect server (the
#: DataFrame runner): the same output expected from both
BOTH_RUNNERS = pytest.mark.parametrize("runner", ["local", "connect"])


def _float_state_sums(pairs: list[tuple[str, float]]) -> dict[str, float]:
    """Sum per key with every input and every state value a float32 (Types.FLOAT())."""
    sums: dict[str, float] = {}
    for k, v in pairs:
        sums[k] = f32(sums.get(k, 0) + f32(v))
    return sums


EVENTS = [
    (1000, "Alice", 110.1),
    (4000, "Bob", 30.2),
    (3000, "Alice", 20.0),
    (2000, "Bob", 53.1),
    (5000, "Alice", 13.1),
    (3000, "Bob", 3.1),
    (7000, "Bob", 16.1),
    (10000, "Alice", 20.1),
]


def _event_time_timer_expected() -> list[str]:
    # the bounded job reads all 8 records before the watermark moves: every timer
    # (2 s after each record, one per key and timestamp) reads the key's final sum: the
    # 1 s state TTL (OnReadAndWrite) does not expire state before the job's timers fire
    sums = _float_state_sums([(k, v) for _, k, v in EVENTS])
    timers = {(k, t + 2000) for t, k, _ in EVENTS}
    return sorted(str((k, sums[k])) for k, _ in timers)


def test_event_time_timer_with_ttl(run_program: Run) -> None:
    out = run_program("event_time_timer")
    assert sorted(out) == _event_time_timer_expected()


@pytest.mark.parametrize("runner", ["spark", "connect"])
def test_event_time_timer_with_ttl_on_spark(run_program: Run, runner: str) -> None:
    # on Spark an epoch takes seconds: the TTL state must not expire between the
    # records and the timers of the same (small, bounded) job
    out = run_program("event_time_timer", runner=runner)
    assert sorted(out) == _event_time_timer_expected()


@BOTH_RUNNERS
def test_state_access(run_program: Run, runner: str) -> None:
    # Types.FLOAT() input and state (float32), a 1 s TTL; the function yields the sum of
    # the float32 state and the float32 input before the state rounds it
    data = [
        ("Alice", 110.1),
        ("Bob", 30.2),
        ("Alice", 20.0),
        ("Bob", 53.1),
        ("Alice", 13.1),
        ("Bob", 3.1),
        ("Bob", 16.1),
        ("Alice", 20.1),
    ]
    state: dict[str, float] = {}
    expected = []
    for k, v in data:
        current = state.get(k, 0) + f32(v)
        state[k] = f32(current)
        expected.append(str((k, current)))
    out = run_program("state_access", runner=runner)
    assert sorted(out) == sorted(expected)
    for key in ("Alice", "Bob"):  # per key, in input order
        assert [x for x in out if key in x] == [x for x in expected if key in x]


@BOTH_RUNNERS
def test_basic_operations(run_program: Run, runner: str) -> None:
    infos = {
        1: {"name": "Flink", "tel": 123, "addr": {"country": "Germany", "city": "Berlin"}},
        2: {"name": "hello", "tel": 135, "addr": {"country": "China", "city": "Shanghai"}},
        3: {"name": "world", "tel": 124, "addr": {"country": "USA", "city": "NewYork"}},
        4: {"name": "PyFlink", "tel": 32, "addr": {"country": "China", "city": "Hangzhou"}},
    }

    def bumped(i: int) -> str:
        return str((i, json.dumps({**infos[i], "tel": infos[i]["tel"] + 1})))

    by_country = [(d["addr"]["country"], d["tel"]) for d in infos.values()]
    expected = [
        *(bumped(i) for i in infos),
        bumped(1),
        *(str(p) for p in running(by_country, lambda a, b: a + b)),
    ]
    assert run_program("basic_operations", runner=runner) == expected


@BOTH_RUNNERS
def test_process_json_data(run_program: Run, runner: str) -> None:
    out = run_program("process_json_data", runner=runner)
    assert sorted(out) == sorted(
        [
            str(
                (2, {"name": "hello", "tel": 136, "addr": {"country": "China", "city": "Shanghai"}})
            ),
            str(
                (
                    4,
                    {
                        "name": "PyFlink",
                        "tel": 33,
                        "addr": {"country": "China", "city": "Hangzhou"},
                    },
                )
            ),
        ]
    )


def test_word_count_in_batch_mode_prints_final_counts(run_program: Run) -> None:
    word_count_data = program_globals("word_count")["word_count_data"]
    out = run_program("word_count")
    assert out[:3] == [
        "Executing word_count example with default input data set.",
        "Use --input to specify file input.",
        HINT,
    ]
    counts = Counter(w for line in word_count_data for w in line.split())
    assert sorted(out[3:]) == sorted(java_tuple(w, n) for w, n in counts.items())


@pytest.mark.parametrize("runner", ["spark", "connect"])
def test_word_count_in_batch_mode_on_spark(run_program: Run, runner: str) -> None:
    word_count_data = program_globals("word_count")["word_count_data"]
    out = run_program("word_count", runner=runner)
    counts = Counter(w for line in word_count_data for w in line.split())
    assert sorted(out[3:]) == sorted(java_tuple(w, n) for w, n in counts.items())


@BOTH_RUNNERS
def test_word_count_with_input_and_output_files(
    run_program: Run, tmp_path: Path, runner: str
) -> None:
    # --input/--output: a bounded FileSource and a row-format FileSink (simple string
    # encoder: Java's toString of the Tuple2) into Flink's default dated bucket directory
    lines = ["to be or not", "to be", "that is the question"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    out = run_program(
        "word_count",
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(tmp_path / "out"),
        runner=runner,
    )
    assert out == []
    parts = sorted((tmp_path / "out").rglob("prefix-*.ext"))
    assert parts and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}--\d{2}", p.parent.name) for p in parts)
    written = [line for p in parts for line in p.read_text().splitlines()]
    counts = Counter(w for line in lines for w in line.split())
    assert sorted(written) == sorted(java_tuple(w, n) for w, n in counts.items())


def _windows(rows: list[tuple[int, int, int]]) -> list[str]:
    return [java_tuple("hi", s, e, n) for s, e, n in rows]


@BOTH_RUNNERS
def test_tumbling_time_window(run_program: Run, runner: str) -> None:
    out = run_program("windowing.tumbling_time_window", runner=runner)
    assert out == [HINT, *_windows(tumbling(HI, 5))]


@BOTH_RUNNERS
def test_sliding_time_window(run_program: Run, runner: str) -> None:
    out = run_program("windowing.sliding_time_window", runner=runner)
    assert out == [HINT, *_windows(sliding(HI, 5, 2))]


@BOTH_RUNNERS
def test_session_with_gap_window(run_program: Run, runner: str) -> None:
    out = run_program("windowing.session_with_gap_window", runner=runner)
    assert out == [HINT, *_windows(sessions([1, 2, 3, 4, 8, 9, 15], lambda t: 5))]


@BOTH_RUNNERS
def test_session_with_dynamic_gap_window(run_program: Run, runner: str) -> None:
    out = run_program("windowing.session_with_dynamic_gap_window", runner=runner)
    # the gap of an element is its own timestamp value (element[1])
    assert out == [HINT, *_windows(sessions([1, 2, 3, 4, 8, 9, 15], lambda t: t))]


@BOTH_RUNNERS
def test_tumbling_count_window(run_program: Run, runner: str) -> None:
    data = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")]
    per_key: dict[str, list[int]] = {}
    for v, k in data:
        per_key.setdefault(k, []).append(v)
    # a count window of 2 fires at every 2nd element of its key; the rest never fires
    expected = [
        java_tuple(k, sum(vs[i : i + 2]))
        for k, vs in per_key.items()
        for i in range(0, len(vs) - len(vs) % 2, 2)
    ]
    out = run_program("windowing.tumbling_count_window", runner=runner)
    assert out[0] == HINT and sorted(out[1:]) == sorted(expected)


def test_print_prefix_is_stripped_only_when_present(run_program: Run) -> None:
    out = run_program("state_access", strip=False)
    assert all(re.match(r"^\d+> \(", line) for line in out)  # parallelism > 1: "n> "
