"""The DataFrame runner's exchange format (runtime/arrow_batches.py) and routes
(spark/routing.py), without Spark; the routes against Spark's own exchange are checked in
tests/integration/test_connect_runner.py."""

from __future__ import annotations

import pickle

import pytest

from streamstate.runtime import arrow_batches
from streamstate.runtime.arrow_batches import (
    MisroutedRecordError,
    decode_routed,
    encode_routed,
    routed_schema,
    tick_targets,
)
from streamstate.runtime.protocol import DRIVER
from streamstate.runtime.shuffle import ACK, DATA
from streamstate.spark.routing import route_of, route_values, spark_int_partition


@pytest.mark.parametrize("parallelism", range(1, 129))
def test_every_target_has_a_route_that_hashes_to_it(parallelism):
    routes = route_values(parallelism)
    assert len(routes) == parallelism
    assert [spark_int_partition(r, parallelism) for r in routes] == list(range(parallelism))
    assert len(set(routes)) == parallelism and min(routes) >= 0


def test_spark_hash_of_known_ints():
    # F.hash(lit(v)) on Spark 4.3 for these ints (Murmur3_x86_32.hashInt, seed 42)
    known = {0: 933211791, 1: -559580957, 2: 1765031574, -1: -1604776387}
    for value, spark_hash in known.items():
        for p in (1, 2, 7, 200):
            assert spark_int_partition(value, p) == spark_hash % p


def _outputs(n: int) -> list[tuple[int, int, object]]:
    out: list[tuple[int, int, object]] = [
        (3, 0, (DATA, 1, 0, i, pickle.dumps(list(range(i))), 0)) for i in range(n)
    ]
    out.append((DRIVER, 0, (ACK, b"ack")))
    return out


def test_round_trip_keeps_every_output_in_order():
    outputs = [(3, 2, (DATA, 1, 0, i, pickle.dumps(list(range(i))), 0)) for i in range(50)]
    batches = list(encode_routed(outputs, lambda dest, target: route_of(4, target)))
    assert all(b.schema == routed_schema() for b in batches)
    subtask, decoded = decode_routed(batches)
    assert subtask == 2
    assert decoded == [(target, payload) for _dest, target, payload in outputs]
    routes = [r for b in batches for r in b.column(2).to_pylist()]
    assert routes == [route_of(4, 2)] * 50


def test_a_tick_names_the_subtask_and_carries_nothing():
    outputs = [(3, 1, (DATA, 1, 0, 0, b"x", 0))]
    (batch,) = encode_routed(
        outputs, lambda dest, target: route_of(4, target), ticks=[(3, 1), (5, 0)]
    )
    assert batch.column(0).to_pylist() == [3, 3, 5]
    assert batch.column(2).to_pylist() == [route_of(4, 1)] * 2 + [route_of(4, 0)]
    assert batch.column(3).to_pylist()[1:] == [b"", b""]
    assert decode_routed([batch.slice(0, 2)]) == (1, [(1, outputs[0][2])])
    assert decode_routed([batch.slice(1, 1)]) == (1, [])
    assert decode_routed([]) == (None, [])


@pytest.mark.parametrize("senders", [1, 2, 3, 5])
def test_the_senders_tick_every_receiver_once(senders):
    receivers = [(3, 4), (7, 1), (9, 6)]
    sent = [t for sender in range(senders) for t in tick_targets(sender, senders, receivers)]
    assert sorted(sent) == sorted((d, t) for d, p in receivers for t in range(p))


def test_batches_are_cut_by_rows_and_bytes(monkeypatch):
    monkeypatch.setattr(arrow_batches, "BATCH_ROWS", 8)
    batches = list(encode_routed(_outputs(20), lambda d, t: 0))
    assert [b.num_rows for b in batches] == [8, 8, 5]
    monkeypatch.setattr(arrow_batches, "BATCH_ROWS", 10_000)
    monkeypatch.setattr(arrow_batches, "BATCH_BYTES", 1)
    assert all(b.num_rows == 1 for b in encode_routed(_outputs(5), lambda d, t: 0))


def test_large_binary_schema():
    (batch,) = encode_routed(_outputs(2), lambda d, t: 0, large_binary=True)
    assert batch.schema == routed_schema(large_binary=True)
    assert decode_routed([batch])[0] == 0


def test_rows_of_two_subtasks_in_one_partition_are_refused():
    rows = [(3, 1, (DATA, 1, 0, 0, b"", 0)), (3, 0, (DATA, 1, 0, 1, b"", 0))]
    batches = list(encode_routed(rows, lambda d, t: 0))
    assert decode_routed(batches[:1] if len(batches) > 1 else [batches[0].slice(0, 1)])[0] == 1
    with pytest.raises(MisroutedRecordError, match="subtasks 1 and 0"):
        decode_routed(batches)
