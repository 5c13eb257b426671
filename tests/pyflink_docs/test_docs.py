"""The Python examples of Flink's DataStream documentation pages (keyed state, state
TTL, checkpointing, state backends, broadcast state, windows, process functions, side
outputs), re-expressed, not copied: the pages' text is not distributed on PyPI (the
example programs are, and ``test_examples.py`` reads those from the wheel), and code
copied from Flink's sources stays out of this repository. Each module in ``pages/`` is
our own program that makes the same API calls in the same shape (class hierarchy,
generics, descriptors, ``yield``-ed side outputs, context methods) and shows the same
behaviour; what it should print is computed here in plain Python."""

from __future__ import annotations

from typing import Any

import pytest

from tests.pyflink_docs.broadcast_model import Item, Rule
from tests.pyflink_docs.conftest import Run
from tests.pyflink_docs.pages import (
    broadcast_rule_matcher,
    checkpointing_settings,
    count_with_timeout,
    custom_window_assigner,
    keyed_state_average,
    side_output_split,
    state_backend_settings,
    state_ttl_settings,
)
from tests.support.envs import make_env

QUIET = {"execution.progress": "none"}


def test_keyed_state_pair_mean(run_program: Run) -> None:
    # per key, the (truncated) mean of each complete pair; an odd reading out waits
    pending: dict[str, list[int]] = {}
    expected = []
    for key, v in keyed_state_average.READINGS:
        pending.setdefault(key, []).append(v)
        if len(pending[key]) == 2:
            expected.append(str((key, int(sum(pending.pop(key)) / 2))))
    out = run_program("pages.keyed_state_average")
    assert sorted(out) == sorted(expected)
    for key in ("pump", "fan"):  # per key, in input order
        assert [x for x in out if key in x] == [x for x in expected if key in x]


def test_checkpointing_settings() -> None:
    from streamstate.datastream import CheckpointingMode

    env = checkpointing_settings.configured_environment()
    cc = env.get_checkpoint_config()
    assert env.get_checkpoint_interval() == checkpointing_settings.INTERVAL_MS
    assert cc.get_checkpointing_mode() == CheckpointingMode.EXACTLY_ONCE
    assert cc.get_min_pause_between_checkpoints() == checkpointing_settings.MIN_PAUSE_MS
    assert cc.get_checkpoint_timeout() == checkpointing_settings.TIMEOUT_MS
    tolerated = checkpointing_settings.TOLERATED_FAILURES
    assert cc.get_tolerable_checkpoint_failure_number() == tolerated
    assert cc.get_max_concurrent_checkpoints() == 1
    assert cc.is_externalized_checkpoints_enabled()
    assert cc.is_unaligned_checkpoints_enabled()


@pytest.mark.parametrize(
    ("backend", "kind"),
    [("hashmap", "HashMapStateBackend"), ("rocksdb", "EmbeddedRocksDBStateBackend")],
)
def test_state_backend_by_configuration_key(backend: str, kind: str) -> None:
    env = state_backend_settings.environment_with_backend(backend)
    assert type(env.get_state_backend()).__name__ == kind


def test_state_ttl_settings_on_a_descriptor() -> None:
    from streamstate.datastream.state import StateTtlConfig

    ttl = state_ttl_settings.session_token_descriptor(3).get_ttl_config()
    assert ttl is not None
    assert ttl.get_ttl().to_milliseconds() == 3000
    assert ttl.get_update_type() == StateTtlConfig.UpdateType.OnCreateAndWrite
    visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
    assert ttl.get_state_visibility() == visibility


def test_side_output_of_a_process_function() -> None:
    from streamstate.common import Types
    from streamstate.datastream.connectors import CollectSink

    env = make_env(1, conf=QUIET)
    numbers = env.from_collection([1, 2, 3, 4, 5], type_info=Types.INT())
    main = numbers.process(side_output_split.LabelOdds(), Types.INT())
    main_sink, side_sink = CollectSink(), CollectSink()
    main.sink_to(main_sink)
    main.get_side_output(side_output_split.odd_labels).sink_to(side_sink)
    env.execute()
    assert main_sink.get_results() == [1, 2, 3, 4, 5]
    assert side_sink.get_results() == ["odd:1", "odd:3", "odd:5"]


def _run_custom_assigner(base_ms: int, function: str, event_time: bool) -> list[Any]:
    from streamstate.common import Types, WatermarkStrategy
    from streamstate.common.watermark_strategy import TimestampAssigner
    from streamstate.datastream.connectors import CollectSink

    class Ts(TimestampAssigner):
        def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
            return base_ms + value[0]  # 1..6 ms after base

    env = make_env(2, conf=QUIET)
    data_stream = env.from_collection(
        [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello")],
        type_info=Types.TUPLE([Types.INT(), Types.STRING()]),
    )
    windowed = (
        data_stream.assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Ts())
        )
        .key_by(lambda x: x[1], key_type=Types.STRING())
        .window(custom_window_assigner.FixedBuckets(5, 0, event_time))
    )
    out_type = Types.TUPLE([Types.STRING(), Types.INT()])
    if function == "process":
        ds = windowed.process(custom_window_assigner.TotalPerWindow(), out_type)
    else:
        ds = windowed.apply(custom_window_assigner.TotalPerWindowApply(), out_type)
    sink = CollectSink()
    ds.sink_to(sink)
    env.execute()
    return sorted(sink.get_results())


@pytest.mark.parametrize("event_time", [False, True], ids=["processing", "event"])
@pytest.mark.parametrize("function", ["process", "apply"])
@pytest.mark.parametrize("base", [0, 4_102_444_800_000], ids=["1970", "2100"])
def test_custom_assigner_with_an_event_time_trigger(
    function: str, base: int, event_time: bool
) -> None:
    # with is_event_time() False (as in Flink's WindowOperator) a window's cleanup timer
    # is a processing-time timer at its max timestamp, while the EventTimeTrigger fires
    # at the watermark. The final watermark fires every window with all its elements;
    # a cleanup time already past (1970) fires after it, as in PyFlink, where a watermark
    # fires event-time timers at once and a due processing-time timer asynchronously
    # after the bundle. Windows ending in the future (2100) are never cleaned up here.
    windows: dict[tuple[str, int], int] = {}
    for v, k in [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello")]:
        windows[(k, v - v % 5)] = windows.get((k, v - v % 5), 0) + v
    expected = sorted((k, s) for (k, _), s in windows.items())
    assert _run_custom_assigner(base, function, event_time) == expected


def _broadcast_job(items: list[Item], rules: list[Rule], declared: str, read: str) -> Any:
    from streamstate.datastream.connectors import CollectSink

    env = make_env(2, conf=QUIET)
    broadcast = env.from_collection(rules).broadcast(
        broadcast_rule_matcher.rules_descriptor(declared)
    )
    by_colour = env.from_collection(items).key_by(lambda item: item.color)
    sink = CollectSink()
    by_colour.connect(broadcast).process(broadcast_rule_matcher.PairByRule(read)).sink_to(sink)
    env.execute()
    return sink


def test_reading_an_undeclared_broadcast_state_fails_as_in_flink() -> None:
    # Flink's broadcast operator refuses a broadcast state the stream was not broadcast
    # with (the page itself declares one name and reads another), as streamstate does
    from streamstate.errors import JobExecutionError

    with pytest.raises(JobExecutionError, match="rule-book.*not declared"):
        _broadcast_job(
            [Item("red", "square")], [Rule("r", "square", "triangle")], "rules", "rule-book"
        )


def test_broadcast_rules_pair_items_per_colour() -> None:
    items = [Item("red", "square"), Item("blue", "square"), Item("red", "triangle")]
    items += [Item("blue", "circle"), Item("blue", "triangle"), Item("red", "triangle")]
    rules = [Rule("square-then-triangle", "square", "triangle")]
    sink = _broadcast_job(items, rules, "rules", "rules")
    # per colour, a square waits for the next triangle (the rules arrive first)
    expected, waiting = [], {}
    for item in items:
        if item.shape == "triangle" and waiting.get(item.color):
            expected += [f"square-then-triangle: {i} -> {item}" for i in waiting.pop(item.color)]
        if item.shape == "square":
            waiting.setdefault(item.color, []).append(item)
    assert sorted(sink.get_results()) == sorted(expected)


def test_the_pages_table_api_source_is_unsupported() -> None:
    # the page's program reads a Table API datagen table: named in docs/limitations.md
    from streamstate.errors import UnsupportedFeatureError

    with pytest.raises(UnsupportedFeatureError, match="Table API"):
        count_with_timeout.table_source_job()


def test_count_with_timeout_on_a_datastream_source(capfd: pytest.CaptureFixture[str]) -> None:
    # the page's job on a collection of the Table API source's rows (TIMESTAMP(3),
    # VARCHAR, VARCHAR)
    import datetime

    from streamstate.common import Types, WatermarkStrategy

    t0 = datetime.datetime(2024, 1, 1)
    events = [(0, "a"), (10, "a"), (20, "b"), (200, "a"), (230, "b"), (235, "b")]
    rows = [(t0 + datetime.timedelta(seconds=s), k, "x") for s, k in events]
    env = make_env(2, conf=QUIET)
    stream = env.from_collection(
        rows, Types.ROW([Types.SQL_TIMESTAMP(), Types.STRING(), Types.STRING()])
    )
    stream.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
            count_with_timeout.FirstFieldMillis()
        )
    ).key_by(lambda value: value[1]).process(count_with_timeout.EmitWhenQuiet()).print()
    capfd.readouterr()
    env.execute()
    out = [line.split("> ", 1)[-1] for line in capfd.readouterr().out.splitlines()]
    # every record sets its key's latest time and a timer 60 s later; only the timer of
    # a key's latest record emits (key, count). One bounded epoch: every timer fires at
    # the final watermark with each key's final state
    counts: dict[str, int] = {}
    for _, k in events:
        counts[k] = counts.get(k, 0) + 1
    assert sorted(out) == sorted(str((k, n)) for k, n in counts.items())
