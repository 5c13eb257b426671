"""Keyed backend factories for the contract suite and the RocksDB tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import test_heap_backend as H

from streamstate.runtime.keygroups import compute_key_group_range_for_operator_index
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.state.registry import create_keyed_backend


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

    def backend(self, p: int = 1, idx: int = 0, max_p: int = H.MAX_P, op: str = "op") -> Any:
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
