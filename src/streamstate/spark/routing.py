"""Exact routing through a DataFrame exchange: which int value lands on which partition.

``DataFrame.repartition(p, col)`` is Spark's ``HashPartitioning``: a row goes to partition
``pmod(murmur3_x86_32(col, seed=42), p)``, and for an ``int`` column Murmur3 hashes the
value's four little-endian bytes (``Murmur3_x86_32.hashInt``). The DataFrame runner wants a
record on one exact partition (its target subtask), so each output row carries a *route*:
the smallest non-negative int whose hash lands on the target. :func:`route_values` finds
them per parallelism (a few hashes per target, computed once per process and cached);
``tests/integration/test_connect_runner.py`` checks them against Spark's own exchange for
every parallelism 1..64, and every downstream subtask checks that each row it received
was meant for it (:func:`streamstate.runtime.arrow_batches.decode_routed`).

Pure Python: the same table is computed on the driver and in every Python worker.
"""

from __future__ import annotations

import struct
from functools import lru_cache

import mmh3

__all__ = ["SPARK_HASH_SEED", "route_of", "route_values", "spark_int_partition"]

#: the seed of Spark's ``HashPartitioning`` (``Murmur3Hash(expressions, 42)``)
SPARK_HASH_SEED = 42
_INT = struct.Struct("<i")


def spark_int_partition(value: int, parallelism: int) -> int:
    """The partition Spark's ``repartition(parallelism, col)`` sends an ``int`` ``value`` to."""
    return mmh3.hash(_INT.pack(value), SPARK_HASH_SEED, signed=True) % parallelism


@lru_cache(maxsize=256)
def route_values(parallelism: int) -> tuple[int, ...]:
    """``routes[t]``: the smallest non-negative int that ``repartition(parallelism, col)``
    sends to partition ``t``, for every ``t`` in ``0..parallelism-1``."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be >= 1, got {parallelism}")
    routes: list[int | None] = [None] * parallelism
    missing = parallelism
    value = 0
    while missing:
        target = spark_int_partition(value, parallelism)
        if routes[target] is None:
            routes[target] = value
            missing -= 1
        value += 1
    return tuple(r for r in routes if r is not None)


def route_of(parallelism: int, target: int) -> int:
    """The int a row carries to reach partition ``target`` of ``parallelism``."""
    return route_values(parallelism)[target]
