"""Writing state in a task: a bootstrap function over one key-group range's records (keyed
state) or one partition's records (operator state), snapshotted into the savepoint
directory through the picklable ``SavepointTarget``.

The keyed snapshot is the canonical format (``runtime/state/format/``), whatever backend
held the state while the function ran, so the savepoint restores on heap and RocksDB at
any parallelism. File names are deterministic (``<uid>-<index>-keyed``,
``<uid>-<index>-operator``) and every write is atomic: a retried task writes the same
file again.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from streamstate.errors import ConfigurationError, StateAccessError
from streamstate.runtime.checkpoint.handles import KeyGroupsStateHandle, StreamStateHandle
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.operators.base import OperatorContext, close_function, open_function
from streamstate.runtime.operators.checkpointing import (
    StateInitializationContext,
    initialize_function_state,
    snapshot_function_state,
)
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.state.operator import DefaultOperatorStateStore
from streamstate.runtime.state_processor.contexts import (
    BootstrapContext,
    BroadcastBootstrapContext,
    KeyedBootstrapContext,
)
from streamstate.runtime.state_processor.plan import BackendSpec

__all__ = [
    "KeyedBootstrapSpec",
    "OperatorBootstrapSpec",
    "bootstrap_keyed_range",
    "bootstrap_operator_state",
    "safe_file_prefix",
]


def safe_file_prefix(uid: str) -> str:
    """A file-name-safe form of a uid (the uid itself stays in ``_metadata``)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in uid).lstrip(".") or "op"


@dataclass(frozen=True)
class KeyedBootstrapSpec:
    """What every task of a keyed bootstrap needs (picklable)."""

    uid: str
    max_parallelism: int
    ranges: tuple[KeyGroupRange, ...]
    key_serializer: TypeSerializer
    backend: BackendSpec
    #: runtime/checkpoint/savepoint.SavepointTarget of the savepoint being written
    target: Any


def _consumed(fn: Any, returned: Any) -> None:
    """Bootstrap functions emit nothing; a generator's body still has to run."""
    if returned is None:
        return
    try:
        for _ in returned:
            pass
    except TypeError:
        raise ConfigurationError(
            f"{type(fn).__name__}.process_element returned {type(returned).__name__}; "
            f"a bootstrap function writes state and returns nothing"
        ) from None


def bootstrap_keyed_range(
    spec: KeyedBootstrapSpec, index: int, function: Any, records: Iterable[tuple[int, Any, Any]]
) -> KeyGroupsStateHandle:
    """Run ``function`` (a ``KeyedStateBootstrapFunction``) over ``(key group, key, value)``
    records of range ``index``; write and return the range's canonical snapshot."""
    rng = spec.ranges[index]
    backend = spec.backend.create(spec.uid, rng, spec.max_parallelism, spec.key_serializer)
    try:
        ctx = OperatorContext(
            spec.uid, index, len(spec.ranges), spec.max_parallelism, 0, {}, backend
        )
        ctx.processing_time = int(time.time() * 1000)
        open_function(function, ctx)
        bctx = KeyedBootstrapContext(ctx)
        process = function.process_element
        for kg, key, value in records:
            if kg not in rng:
                raise StateAccessError(
                    f"bootstrap of {spec.uid!r}: key {key!r} (key group {kg}) reached the task "
                    f"of key groups [{rng.start}, {rng.end}]"
                )
            backend.set_current_key(key, kg)
            _consumed(function, process(value, bctx))
        close_function(function)
        snap = backend.snapshot()
        name = f"{safe_file_prefix(spec.uid)}-{index}-keyed"
        stream = spec.target.write_state(0, name, snap.data)
        return KeyGroupsStateHandle(stream, rng, dict(snap.offsets), dict(snap.meta))
    finally:
        backend.dispose()


@dataclass(frozen=True)
class OperatorBootstrapSpec:
    """One non-keyed bootstrap: list / union list state (``StateBootstrapFunction``) or
    broadcast state (``BroadcastStateBootstrapFunction``)."""

    uid: str
    broadcast: bool
    parallelism: int
    max_parallelism: int
    target: Any


def bootstrap_operator_state(
    spec: OperatorBootstrapSpec, index: int, function: Any, values: Iterable[Any]
) -> StreamStateHandle:
    """Run ``function`` over one partition's ``values``; write and return the subtask's
    operator state snapshot (``snapshot_state`` is called once, after the last value)."""
    store = DefaultOperatorStateStore(spec.uid, allow_broadcast=spec.broadcast)
    ctx = OperatorContext(
        spec.uid, index, spec.parallelism, spec.max_parallelism, 0, {}, None, store
    )
    now = int(time.time() * 1000)
    initialize_function_state(function, StateInitializationContext(False, store, None))
    open_function(function, ctx)
    bctx: Any = BroadcastBootstrapContext(store, now) if spec.broadcast else BootstrapContext(now)
    for value in values:
        _consumed(function, function.process_element(value, bctx))
    snapshot_function_state(function, 0, now)
    close_function(function)
    name = f"{safe_file_prefix(spec.uid)}-{index}-operator"
    return spec.target.write_state(0, name, store.snapshot())  # type: ignore[no-any-return]  # SavepointTarget returns FileStateHandle
