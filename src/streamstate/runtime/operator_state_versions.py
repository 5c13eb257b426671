"""Per-epoch versions of operator state: how a subtask's operator state follows it
from worker to worker, into checkpoints and back out of them (rescaled).

Operator state is small (Flink's advice; buffers, offsets, rules), so every
version is a **full** snapshot of the subtask's ``DefaultOperatorStateStore``:

* at the end of every epoch the task calls each operator's ``snapshot_state``
  (the user's ``CheckpointedFunction.snapshot_state`` / ``ListCheckpointed``),
  then serializes the store. Unchanged bytes (same CRC as the version the
  instance started from or last wrote) produce no new version;
* a version of at most :data:`INLINE_LIMIT` bytes travels **inline in the ack**
  (a ``ByteStreamStateHandle``) and back to workers in the next ``EpochSpec``;
  a larger one is written to ``epochs/<uid>/<i>/a<attempt>-e<epoch>-operator``;
* in a checkpoint epoch the snapshot is written with
  ``storage.write_state(chk, "<uid>-<i>-operator")``; that handle goes into
  ``SubtaskState.operator`` of ``_metadata`` and is also the new version;
* the driver keeps an :class:`OperatorStateLineage` per (uid, subtask): the
  latest version's handle (or, right after a restore, every old subtask's
  checkpoint handle, to be redistributed by the worker: see
  ``runtime/state/operator.py`` ``redistribute``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamstate.runtime.checkpoint.handles import (
    ByteStreamStateHandle,
    StreamStateHandle,
    checksum,
)
from streamstate.runtime.state.operator import (
    DefaultOperatorStateStore,
    decode_operator_snapshot,
    redistribute,
)

__all__ = [
    "INLINE_LIMIT",
    "OperatorStateLineage",
    "commit_operator_state",
    "restore_operator_store",
]

#: versions up to this many bytes travel inline in acks and epoch specs
INLINE_LIMIT = 16 * 1024


@dataclass(frozen=True)
class OperatorStateLineage:
    """Where one subtask's operator state at version ``token`` is.

    ``handle``: the subtask's own latest version. ``redistribute``: after a restore
    from a checkpoint, the checkpoint handle of every *old* subtask (None where that
    subtask had no operator state), in subtask order; the worker redistributes them.
    """

    token: tuple[int, int]
    handle: StreamStateHandle | None = None
    redistribute: tuple[StreamStateHandle | None, ...] | None = None


def restore_operator_store(
    store: DefaultOperatorStateStore,
    lineage: OperatorStateLineage | None,
    index: int,
    parallelism: int,
) -> int | None:
    """Load ``lineage`` into ``store``; returns the CRC of the version restored as-is."""
    if lineage is None:
        return None
    if lineage.redistribute is not None:
        old = [
            decode_operator_snapshot(h.read(), f"operator state of old subtask {j}")
            if h is not None
            else None
            for j, h in enumerate(lineage.redistribute)
        ]
        store.restore(redistribute(old, index, parallelism))
        return None
    if lineage.handle is not None:
        data = lineage.handle.read()
        store.restore(decode_operator_snapshot(data, f"operator state version {lineage.token}"))
        return checksum(data)
    return None


def commit_operator_state(
    storage: Any,
    stores: dict[str, DefaultOperatorStateStore],
    crcs: dict[str, int | None],
    index: int,
    attempt: int,
    epoch: int,
    checkpoint_id: int | None,
    force: bool = False,
) -> tuple[dict[str, Any], dict[str, StreamStateHandle]]:
    """Write this epoch's operator-state versions: ``(versions, checkpoint handles)`` by uid.

    ``versions[uid]`` is ``("full", handle)`` or ``("none", None)`` (unchanged).
    ``crcs`` (uid -> CRC of the last version) is updated in place. ``force`` (a
    full-version epoch) writes a version even when unchanged, so that no lineage keeps
    pointing at the files of a checkpoint that the driver may discard afterwards (an
    aborted one).
    """
    versions: dict[str, Any] = {}
    checkpoint: dict[str, StreamStateHandle] = {}
    for uid, store in stores.items():
        if store.is_empty and crcs.get(uid) is None:
            continue  # never had operator state
        data = store.snapshot()
        crc = checksum(data)
        if checkpoint_id is not None:
            h = storage.write_state(checkpoint_id, f"{uid}-{index}-operator", data)
            checkpoint[uid] = h
            versions[uid] = ("full", h)
        elif crc == crcs.get(uid) and not force:
            versions[uid] = ("none", None)
        elif len(data) <= INLINE_LIMIT:
            versions[uid] = ("full", ByteStreamStateHandle.of(data))
        else:
            name = f"{uid}/{index}/a{attempt}-e{epoch}-operator"
            versions[uid] = ("full", storage.write_epoch_state(name, data))
        crcs[uid] = crc
    return versions, checkpoint
