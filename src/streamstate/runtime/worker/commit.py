"""The state side of an epoch's end: snapshot hooks, state versions, the savepoint.

:func:`commit_epoch` runs after time advanced: every operator's ``snapshot_state``, then
version ``n`` of each keyed backend and operator state store (a checkpoint snapshot when
the epoch ends with a barrier, else a full version every few epochs, else a delta), then
this subtask's part of a savepoint the epoch carries. A savepoint that cannot be written
fails alone (:attr:`EpochCommit.savepoint_error`): the versions are already committed, so
the job goes on, as in Flink.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamstate.errors import StreamStateError
from streamstate.runtime.features import bridged
from streamstate.runtime.protocol import EpochSpec, StageTaskSpec, StateVersion
from streamstate.runtime.versions import (
    commit_keyed_state,
    commit_operator_state,
    write_savepoint,
)
from streamstate.runtime.worker.instance import SubtaskInstance

__all__ = ["EpochCommit", "commit_epoch"]


@dataclass
class EpochCommit:
    """What committing one subtask's epoch wrote, by operator uid."""

    #: keyed operator uid -> the version it committed (none in BATCH mode)
    versions: dict[str, StateVersion] = field(default_factory=dict)
    #: keyed operator uid -> its checkpoint (or savepoint) handle
    checkpoint: dict[str, Any] = field(default_factory=dict)
    #: operator uid -> the operator-state version it committed
    op_versions: dict[str, StateVersion] = field(default_factory=dict)
    #: operator uid -> its operator-state checkpoint (or savepoint) handle
    op_checkpoint: dict[str, Any] = field(default_factory=dict)
    #: why this subtask's part of the epoch's savepoint could not be written
    savepoint_error: str | None = None


def commit_epoch(
    spec: StageTaskSpec, inst: SubtaskInstance, index: int, epoch_spec: EpochSpec
) -> EpochCommit:
    """Snapshot the operators of ``inst`` and write its state for ``epoch_spec``."""
    barrier_id = (
        epoch_spec.checkpoint_id
        if epoch_spec.checkpoint_id is not None
        else epoch_spec.savepoint_id
    )
    for op in inst.ops.values():
        op.snapshot_state(barrier_id, epoch_spec.timestamp_ms)
    done = EpochCommit()
    # names RocksDB's incremental uploads: the storage's job id (a restored job keeps it)
    scope = spec.storage.job_id or spec.job_id
    if not spec.batch:  # BATCH: the job is this one epoch; no version is read after it
        done.versions, done.checkpoint = commit_keyed_state(
            spec.storage, inst.backends, index, epoch_spec, scope, bridged(spec)
        )
        done.op_versions, done.op_checkpoint = commit_operator_state(
            spec.storage,
            inst.op_stores,
            inst.op_crcs,
            index,
            epoch_spec.attempt,
            epoch_spec.epoch,
            epoch_spec.checkpoint_id,
            force=epoch_spec.full_version,
        )
    if epoch_spec.savepoint is not None:
        assert epoch_spec.savepoint_id is not None
        try:
            done.checkpoint, done.op_checkpoint = write_savepoint(
                epoch_spec.savepoint,
                inst.backends,
                inst.op_stores,
                inst.op_crcs,
                index,
                epoch_spec.savepoint_id,
                scope,
            )
        except (OSError, StreamStateError) as e:
            stage = spec.stage.id
            done.savepoint_error = f"subtask {index} of stage {stage}: {type(e).__name__}: {e}"
    return done
