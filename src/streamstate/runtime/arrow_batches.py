"""A subtask's outputs as Arrow record batches, and back: the exchange format of the
DataFrame runner (``spark/dataframe_runner.py``), reusable by any runner that moves
epochs between stages as Arrow data.

A subtask yields ``(dest_stage, target_subtask, payload)`` (``task.run_stage_partition``);
the encoding is one row per output with the columns of :data:`ROUTED_FIELDS`:

* ``dest`` (int32): the downstream stage, or ``DRIVER`` (-1) for acks;
* ``target`` (int32): the subtask of ``dest`` the row is for;
* ``route`` (int32): the value an exchange partitions on to land the row on ``target``
  (the runner's routing function; e.g. a value whose Spark hash lands on ``target``);
* ``payload`` (binary): the payload, pickled (protocol 5). Data chunks are already
  pickled blobs; the tuple around them costs a few bytes.

Batches are cut at :data:`BATCH_ROWS` rows or :data:`BATCH_BYTES` payload bytes, so a
large epoch streams instead of building one huge batch. A row with an empty payload is a
**tick**: it carries nothing but its target, so that a receiver learns which subtask it is
even when no record came for it (an engine's partition number need not be the subtask's:
e.g. Spark numbers a union's partitions across its inputs). The senders of a stage send
its ticks (:func:`tick_targets`: every receiver gets one from exactly one sender), so the
exchange needs no input of its own for them.
Decoding checks that every row of one receiver has the same target (and, when asked, the
receiver's stage as its ``dest``): rows of two targets in one partition are a
:class:`MisroutedRecordError` naming both, never a record processed by the wrong subtask.
pyarrow only, no pyspark.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any

from streamstate.errors import StreamStateError

__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "ROUTED_DDL",
    "ROUTED_FIELDS",
    "MisroutedRecordError",
    "decode_routed",
    "encode_routed",
    "routed_schema",
    "tick_targets",
]

#: the columns, in order, as (name, Spark SQL type)
ROUTED_FIELDS = (("dest", "int"), ("target", "int"), ("route", "int"), ("payload", "binary"))
#: the same as a Spark DDL schema string (what ``mapInArrow`` is declared to return)
ROUTED_DDL = ", ".join(f"{name} {kind}" for name, kind in ROUTED_FIELDS)
BATCH_ROWS = 4096
BATCH_BYTES = 8 * 1024 * 1024


class MisroutedRecordError(StreamStateError, RuntimeError):
    """A row reached a subtask it was not routed to: the exchange did not partition as the
    routing function assumed (e.g. a Spark version whose hash partitioning differs)."""


def routed_schema(large_binary: bool = False) -> Any:
    """The pyarrow schema of the batches (``large_binary``: the payload as ``large_binary``,
    for engines that exchange Arrow with 64-bit offsets)."""
    import pyarrow as pa

    binary = pa.large_binary() if large_binary else pa.binary()
    return pa.schema(
        [("dest", pa.int32()), ("target", pa.int32()), ("route", pa.int32()), ("payload", binary)]
    )


def encode_routed(
    outputs: Iterable[tuple[int, int, Any]],
    route: Callable[[int, int], int],
    large_binary: bool = False,
    ticks: Iterable[tuple[int, int]] = (),
) -> Iterator[Any]:
    """Record batches of ``outputs``, then a tick row for every ``(dest, target)`` of
    ``ticks``; ``route(dest, target)`` gives each row's route."""
    import pyarrow as pa

    schema = routed_schema(large_binary)
    dests: list[int] = []
    targets: list[int] = []
    routes: list[int] = []
    payloads: list[bytes] = []
    size = 0

    def batch() -> Any:
        return pa.RecordBatch.from_arrays(
            [
                pa.array(dests, pa.int32()),
                pa.array(targets, pa.int32()),
                pa.array(routes, pa.int32()),
                pa.array(payloads, schema.field("payload").type),
            ],
            schema=schema,
        )

    rows = ((dest, target, pickle.dumps(payload, protocol=5)) for dest, target, payload in outputs)
    for dest, target, blob in chain(rows, ((dest, target, b"") for dest, target in ticks)):
        dests.append(dest)
        targets.append(target)
        routes.append(route(dest, target))
        payloads.append(blob)
        size += len(blob)
        if len(payloads) >= BATCH_ROWS or size >= BATCH_BYTES:
            yield batch()
            dests, targets, routes, payloads, size = [], [], [], [], 0
    if payloads:
        yield batch()


def tick_targets(
    sender: int, senders: int, receivers: Iterable[tuple[int, int]]
) -> Iterator[tuple[int, int]]:
    """The ticks subtask ``sender`` of ``senders`` sends: ``(dest, target)`` for each
    ``(dest, parallelism)`` of ``receivers`` and each of its subtasks ``target`` with
    ``target % senders == sender``, so that the senders together tick every receiver once."""
    for dest, parallelism in receivers:
        for target in range(sender, parallelism, senders):
            yield dest, target


def decode_routed(
    batches: Iterable[Any], dest: int | None = None
) -> tuple[int | None, list[tuple[int, Any]]]:
    """The receiving subtask and the ``(target, payload)`` items of ``batches`` (what
    ``run_stage_partition`` reads), ticks left out; the subtask is None when no row came.

    Rows for two targets, or (``dest`` given) a row for another stage than ``dest``, raise
    :class:`MisroutedRecordError`. Columns are found by name."""
    subtask: int | None = None
    items: list[tuple[int, Any]] = []
    for b in batches:
        if b.num_rows == 0:
            continue
        if dest is not None:
            stray = set(b.column(b.schema.get_field_index("dest")).to_pylist()) - {dest}
            if stray:
                raise MisroutedRecordError(
                    f"rows for stages {sorted(stray)} reached a task of stage {dest}: the "
                    f"epoch's plan did not select the stage's input as computed"
                )
        targets = b.column(b.schema.get_field_index("target")).to_pylist()
        payloads = b.column(b.schema.get_field_index("payload")).to_pylist()
        for target, payload in zip(targets, payloads, strict=True):
            if target != subtask:
                if subtask is not None:
                    raise MisroutedRecordError(
                        f"rows for subtasks {subtask} and {target} reached the same partition: "
                        f"the exchange did not route as computed"
                    )
                subtask = target
            if payload:
                items.append((target, pickle.loads(payload)))
    return subtask, items
