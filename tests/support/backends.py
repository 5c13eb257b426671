"""Keyed backends for tests: a factory per registered backend (disposed at teardown) and
the helpers the keyed-state contract suite shares (descriptors, key placement, dumps).

A test that takes the ``made`` fixture (``tests/unit/conftest.py``) runs once per
backend in the registry, so a new backend gets the whole contract suite by registering.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from streamstate.datastream.state import (
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from streamstate.runtime.checkpoint.handles import (
    ByteStreamStateHandle,
    KeyGroupsStateHandle,
    handle_from_dict,
)
from streamstate.runtime.keygroups import (
    compute_key_group_for_serialized_key,
    compute_key_group_range_for_operator_index,
)
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.state.base import KeyedSnapshot, KeyedStateBackend
from streamstate.runtime.state.registry import create_keyed_backend

MAX_P = 128
KEY_SER = PickleSerializer()


class SumReduce:
    def reduce(self, a: Any, b: Any) -> Any:
        return a + b


class AvgAgg:
    """Average: accumulator (sum, count)."""

    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: int, acc: tuple[int, int]) -> tuple[int, int]:
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc: tuple[int, int]) -> float:
        return acc[0] / acc[1]

    def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return (a[0] + b[0], a[1] + b[1])


V = ValueStateDescriptor("v")
L = ListStateDescriptor("l")
M = MapStateDescriptor("m")
R = ReducingStateDescriptor("r", SumReduce())
A = AggregatingStateDescriptor("a", AvgAgg())
ALL = (V, L, M, R, A)


def kg_of(key: Any, max_p: int = MAX_P) -> int:
    return compute_key_group_for_serialized_key(KEY_SER.serialize(key), max_p)


def at(b: KeyedStateBackend, key: Any) -> None:
    b.set_current_key(key, kg_of(key, b.max_parallelism))


def handle_of(b: KeyedStateBackend, snap: KeyedSnapshot) -> KeyGroupsStateHandle:
    h = KeyGroupsStateHandle(
        ByteStreamStateHandle.of(snap.data), b.key_group_range, snap.offsets, snap.meta
    )
    # the handle must survive checkpoint metadata (JSON)
    return handle_from_dict(json.loads(json.dumps(h.to_dict())))


def dump(b: KeyedStateBackend, descriptors: tuple[Any, ...] = ALL) -> dict[str, dict[Any, Any]]:
    """Every state's content per key, read through the public handles."""
    out: dict[str, dict[Any, Any]] = {}
    for d in descriptors:
        s = b.get_partitioned_state(d)
        per_key: dict[Any, Any] = {}
        for key in b.get_keys(d.name):
            at(b, key)
            if isinstance(s, ValueState):
                per_key[key] = s.value()
            elif isinstance(s, ListState):
                per_key[key] = list(s.get())
            elif isinstance(s, MapState):
                per_key[key] = dict(s.items())
            else:
                per_key[key] = s.get()
        out[d.name] = per_key
    return out


def fill(b: KeyedStateBackend, keys: list[Any]) -> None:
    states = [b.get_partitioned_state(d) for d in ALL]
    for i, key in enumerate(keys):
        at(b, key)
        v, lst, m, r, a = states
        v.update({"i": i})  # type: ignore[attr-defined]
        lst.add_all([i, i + 1])  # type: ignore[attr-defined]
        m.put(f"u{i}", i)  # type: ignore[attr-defined]
        m.put(("t", i), [i])  # type: ignore[attr-defined]
        r.add(i)  # type: ignore[attr-defined]
        a.add(i)  # type: ignore[attr-defined]


KEYS = [f"key-{i}" for i in range(200)] + [("tuple", 1), 42, None, b"bytes"]


def fast_local_dir() -> str:
    """A fresh directory for RocksDB databases, on tmpfs when there is one.

    Every RocksDB open/close syncs several metadata files; on a busy disk that costs
    ~100 ms per database, and the contract tests create hundreds of databases.
    """
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="streamstate-test-rocksdb-", dir=base)


class Made:
    """Creates backends of one registered kind and disposes them all at teardown."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.made: list[Any] = []
        self.local_dir = fast_local_dir() if name == "rocksdb" else None

    def __call__(self, op: str, rng: Any, max_p: int, key_ser: Any, **kwargs: Any) -> Any:
        if self.local_dir is not None:
            kwargs.setdefault("local_dir", self.local_dir)
        b = create_keyed_backend(
            self.name,
            operator_name=op,
            key_group_range=rng,
            max_parallelism=max_p,
            key_serializer=key_ser,
            **kwargs,
        )
        self.made.append(b)
        return b

    def backend(self, p: int = 1, idx: int = 0, max_p: int = MAX_P, op: str = "op") -> Any:
        r = compute_key_group_range_for_operator_index(max_p, p, idx)
        return self(op, r, max_p, PickleSerializer())

    def close(self) -> None:
        for b in self.made:
            b.dispose()
        if self.local_dir is not None:
            shutil.rmtree(self.local_dir, ignore_errors=True)


def made_backends(name: str) -> Iterator[Made]:
    m = Made(name)
    yield m
    m.close()
