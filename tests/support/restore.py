"""A keyed backend written, checkpointed and restored on a fresh one (the schema evolution
and serializer tests): one key group range of ``MAX_P`` groups, pickled keys."""

from __future__ import annotations

from typing import Any

from streamstate.runtime.checkpoint.handles import ByteStreamStateHandle, KeyGroupsStateHandle
from streamstate.runtime.keygroups import KeyGroupRange, compute_key_group_for_serialized_key
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.state.registry import create_keyed_backend

__all__ = ["KEYS", "KEY_SER", "MAX_P", "checkpoint", "fresh", "kg", "write_then_restore"]

MAX_P = 16
KEY_SER = PickleSerializer()
KEYS = range(30)


def kg(k: Any) -> int:
    return compute_key_group_for_serialized_key(KEY_SER.serialize(k), MAX_P)


def fresh(backend: str) -> Any:
    return create_keyed_backend(
        backend,
        operator_name="op",
        key_group_range=KeyGroupRange(0, MAX_P - 1),
        max_parallelism=MAX_P,
        key_serializer=KEY_SER,
    )


def checkpoint(b: Any) -> KeyGroupsStateHandle:
    snap = b.snapshot()
    return KeyGroupsStateHandle(
        ByteStreamStateHandle.of(snap.data), KeyGroupRange(0, MAX_P - 1), snap.offsets, snap.meta
    )


def write_then_restore(backend: str, old: Any, values: Any, write: Any = None) -> Any:
    """A backend restored from a checkpoint of ``old`` state holding ``values(k)``."""
    b = fresh(backend)
    try:
        st = b.get_partitioned_state(old)
        for k in KEYS:
            b.set_current_key(k, kg(k))
            (write or (lambda s, v: s.update(v)))(st, values(k))
        h = checkpoint(b)
    finally:
        b.dispose()
    nb = fresh(backend)
    nb.restore([h])
    return nb, h
