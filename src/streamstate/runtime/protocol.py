"""The driver-worker protocol: every message that crosses between the two, typed.

Per job the driver broadcasts one :class:`StageTaskSpec` per stage. Per epoch it sends
one :class:`EpochSpec` per stage (a :class:`SubtaskSpec` per subtask: the source slice,
where the subtask's state is, its watermark state). Every subtask answers with one
:class:`SubtaskAck`: the :class:`StateVersion` it committed per stateful operator, its
checkpoint handles in a barrier epoch, source progress, sink results, counts, timings.

Contracts:

* all messages are immutable values (frozen, slotted dataclasses) and picklable; the
  worker never mutates what the driver sent, and the driver never mutates an ack;
* :data:`PROTOCOL_VERSION` travels in every :class:`StageTaskSpec`; a worker running a
  different version of streamstate than the driver refuses the task with
  :class:`~streamstate.errors.ConfigurationError` instead of misreading it;
* none of these messages is persisted as such: what a checkpoint stores is the
  ``_metadata`` document (``runtime/checkpoint/metadata.py``, versioned on its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from streamstate.errors import ConfigurationError
from streamstate.runtime.graph import Stage

if TYPE_CHECKING:
    from streamstate.runtime.checkpoint.storage import CheckpointStorageAccess

__all__ = [
    "DRIVER",
    "PROTOCOL_VERSION",
    "EpochSpec",
    "Lineage",
    "OperatorStateLineage",
    "StageTaskSpec",
    "StateVersion",
    "SubtaskAck",
    "SubtaskSpec",
    "SubtaskTimings",
    "Token",
    "VersionKind",
    "check_protocol_version",
]

#: Bumped whenever a message changes shape; driver and workers must agree on it.
PROTOCOL_VERSION = 13  # v3: EpochSpec.ending; v4: SubtaskAck.user_metrics; v5: .migrated;
# v6: .executor; v7: SubtaskAck.query_host, StageTaskSpec.serve_queries;
# v8: StageTaskSpec.source_interval_s / source_slice; v9: StateVersion.bridge, Lineage.bridge;
# v10: StageTaskSpec.storage_options
# v11: EpochSpec.replay_stamp
# v12: StageTaskSpec.features, SubtaskAck.features (optional features: runtime/features.py)
#      instead of .serve_queries, .keyed_states, .query_host
# v13: Lineage.kept_from, SubtaskAck.key_groups

#: The destination index of acks that go back to the driver (leaf stages).
DRIVER = -1

#: ``(attempt, epoch)``: which version of a subtask's state a message speaks of.
Token = tuple[int, int]


class VersionKind(Enum):
    """What a subtask committed for one stateful operator at the end of an epoch."""

    #: a complete snapshot: it replaces the lineage's base and clears its deltas
    FULL = "full"
    #: the changes since the previous version, appended to the lineage
    DELTA = "delta"
    #: nothing changed: the lineage only advances its token
    NONE = "none"


@dataclass(frozen=True, slots=True)
class StateVersion:
    """One committed state version: its kind and where it is (``None`` for NONE).

    For keyed state the handle of a FULL version is a keyed snapshot handle
    (``KeyGroupsStateHandle`` or RocksDB's ``IncrementalKeyedStateHandle``), of a
    DELTA a ``StreamStateHandle``; for operator state every version is FULL with a
    ``StreamStateHandle``.
    """

    kind: VersionKind
    handle: Any = None
    #: of a FULL keyed version, when written: the changes since the subtask's previous version
    #: (a delta, as a DELTA version would have been); written only when a feature of the
    #: stage keeps copies of the backend's state (``features.bridged``), else ``None``
    bridge: Any = None

    @staticmethod
    def full(handle: Any, bridge: Any = None) -> StateVersion:
        return StateVersion(VersionKind.FULL, handle, bridge)

    @staticmethod
    def delta(handle: Any) -> StateVersion:
        return StateVersion(VersionKind.DELTA, handle)


#: the version of an operator whose state did not change in an epoch
UNCHANGED = StateVersion(VersionKind.NONE)


@dataclass(frozen=True, slots=True)
class Lineage:
    """How to rebuild one keyed operator subtask's state at version ``token`` anywhere.

    ``base`` are keyed snapshots (several after a rescale: each backend keeps only
    its key groups); ``deltas`` are applied on top, in order.

    ``bridge``: ``(previous base, previous deltas, delta)`` when the base was written with
    the changes since the previous version (``StateVersion.bridge``): the base is the
    previous base with the previous deltas and ``delta`` applied, so a copy of the state
    kept at the previous base (by a feature, ``runtime/features.py``) moves onto the new
    one without rebuilding (the previous deltas' files are kept until the next new base;
    the previous base's are not, it is only compared). Workers ignore it.
    """

    token: Token
    base: tuple[Any, ...] = ()
    deltas: tuple[Any, ...] = ()
    bridge: tuple[tuple[Any, ...], tuple[Any, ...], Any] | None = None
    #: a rescale in place (runtime/rescale.py): a worker whose instance of this subtask
    #: index is at this version holds ``base``'s state for its previous key groups, so
    #: it keeps the key groups it still owns and reads only those it gains from ``base``
    kept_from: Token | None = None


@dataclass(frozen=True, slots=True)
class OperatorStateLineage:
    """Where one subtask's operator state at version ``token`` is.

    ``handle``: the subtask's own latest version. ``redistribute``: after a restore
    from a checkpoint, the checkpoint handle of every *old* subtask (None where that
    subtask had no operator state), in subtask order; the worker redistributes them.
    """

    token: Token
    handle: Any = None
    redistribute: tuple[Any, ...] | None = None


@dataclass(frozen=True, slots=True)
class SubtaskSpec:
    """The per-epoch instructions of one subtask."""

    #: the source slice to read (source stages; ``None`` otherwise)
    source_assignment: Any = None
    #: keyed operator uid -> its state at version n-1
    lineages: Mapping[str, Lineage] = field(default_factory=dict)
    #: node uid -> watermark state (runtime/watermarks.node_state), used when the
    #: subtask instance is rebuilt (restore, failover, another worker)
    watermarks: Mapping[str, Any] = field(default_factory=dict)
    #: operator uid -> where its operator state is (only operators that have some)
    op_lineages: Mapping[str, OperatorStateLineage] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EpochSpec:
    """The per-epoch instructions of one stage (small: shipped with every task)."""

    epoch: int
    attempt: int
    #: the checkpoint whose barrier this epoch ends with, if any
    checkpoint_id: int | None
    #: write full state versions (not deltas) even without a checkpoint
    full_version: bool
    subtasks: tuple[SubtaskSpec, ...]
    #: the driver's clock at the epoch's start (ms): processing time for timers and idleness
    processing_time_ms: int | None = None
    #: the source of this (source) stage is exhausted: emit the final watermark
    end_of_input: bool = False
    #: checkpoint trigger time (or the epoch's start), for snapshot contexts
    timestamp_ms: int = 0
    #: ("complete" | "aborted", checkpoint id) to deliver before this epoch's input
    notifications: tuple[tuple[str, int], ...] = ()
    #: the sources read nothing: the epoch only delivers notifications
    notify_only: bool = False
    #: the savepoint this epoch ends with, if any: its id and where to write it
    #: (a ``runtime/checkpoint/savepoint.SavepointTarget``)
    savepoint_id: int | None = None
    savepoint: Any = None
    #: the epoch this attempt started after (0 on a fresh start, the restored checkpoint's
    #: epoch after a restore): a subtask rebuilt in a later epoch moved without a failure
    attempt_start_epoch: int = 0
    #: the job ends after this epoch's checkpoint (a stop, e.g. execution.epoch.max-epochs):
    #: sinks close what they keep open (the FileSink rolls its in-progress parts)
    ending: bool = False
    #: the job's replay stamp when this attempt replays exactly, so sinks skip records they
    #: committed before (``runtime/replay.py``); ``None``: skip nothing
    replay_stamp: str | None = None

    @property
    def previous_token(self) -> Token:
        """The token of the state version this epoch starts from."""
        return (self.attempt, self.epoch - 1)

    @property
    def moved(self) -> bool:
        """Whether a subtask that has to be rebuilt in this epoch ran an earlier epoch of
        this attempt elsewhere (it moved: another process or machine, not a failure)."""
        return self.epoch > self.attempt_start_epoch + 1

    @property
    def token(self) -> Token:
        """The token of the state version this epoch commits."""
        return (self.attempt, self.epoch)


@dataclass(frozen=True, slots=True)
class StageTaskSpec:
    """Everything a worker needs to run a stage; shipped once per job (broadcast)."""

    job_id: str
    stage: Stage
    #: node tid -> cloudpickled zero-arg operator factory
    factories: Mapping[int, bytes]
    #: the job's checkpoint storage (picklable; bound to the job by ``initialize_job``)
    storage: CheckpointStorageAccess
    backend_name: str
    job_parameters: Mapping[str, str]
    #: at most this many records per source subtask and epoch
    source_budget: int
    #: ``execution.epoch.interval``: a reader stops reading this many seconds after it
    #: started in an epoch (0: only the budget ends an epoch's reading)
    source_interval_s: float = 0.0
    #: with an interval: the most records read between two looks at the clock
    source_slice: int = 1024
    #: the clock of state TTL (``runtime/state/ttl_clock.py``); ``None``: the wall clock
    ttl_time_provider: Any = None
    #: extra keyword arguments of the keyed backend (``StateBackend.backend_options()``)
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    #: the job runs in BATCH mode (``JobSettings.batch``): no state versions are written
    batch: bool = False
    #: feature name -> what the stage's workers need of that optional feature
    #: (runtime/features.py); a feature not named here adds nothing to the acks
    features: Mapping[str, Any] = field(default_factory=dict)
    #: the job's storage options (endpoint, credentials), installed by the worker before
    #: anything of the job touches a store (runtime/stores/options.py)
    storage_options: Any = None
    protocol_version: int = PROTOCOL_VERSION


def check_protocol_version(spec: StageTaskSpec) -> None:
    """Refuse a spec written by a driver that speaks another protocol version."""
    version = getattr(spec, "protocol_version", None)
    if version != PROTOCOL_VERSION:
        raise ConfigurationError(
            f"the driver sent a task in streamstate protocol version {version} but this worker "
            f"speaks version {PROTOCOL_VERSION}: install the same streamstate version on the "
            f"driver and on every Spark executor (PYSPARK_PYTHON)"
        )


@dataclass(frozen=True, slots=True)
class SubtaskTimings:
    """Seconds one subtask spent in an epoch, by phase."""

    #: getting the state at version n-1 (0 on a cache hit)
    restore: float = 0.0
    #: reading or decoding input and running the operators
    process: float = 0.0
    #: snapshotting and writing the state versions
    commit: float = 0.0


@dataclass(frozen=True, slots=True)
class SubtaskAck:
    """What one subtask reports to the driver at the end of an epoch."""

    stage: int
    subtask: int
    #: the version this subtask's state is now at: ``(attempt, epoch)``
    token: Token
    #: keyed operator uid -> the version it committed
    versions: Mapping[str, StateVersion] = field(default_factory=dict)
    #: keyed operator uid -> its checkpoint handle (barrier epochs only)
    checkpoint: Mapping[str, Any] = field(default_factory=dict)
    #: operator uid -> the operator-state version it committed
    op_versions: Mapping[str, StateVersion] = field(default_factory=dict)
    #: operator uid -> its operator-state checkpoint handle (barrier epochs only)
    op_checkpoint: Mapping[str, Any] = field(default_factory=dict)
    #: the source reader's progress (source stages)
    source: Any = None
    #: sink operator uid -> its result for the driver-side committer
    sinks: Mapping[str, Any] = field(default_factory=dict)
    #: node uid -> records it processed this epoch
    counts: Mapping[str, int] = field(default_factory=dict)
    #: node uid -> watermark state (see runtime/watermarks.node_state)
    watermarks: Mapping[str, Any] = field(default_factory=dict)
    #: whether the subtask's operators and state were found in this worker process; None
    #: for a subtask with neither (a stateless source run without a host): not counted
    cache_hit: bool | None = False
    #: restore path ("reused" | "local" | "remote") -> keyed backends restored that way
    state_restores: Mapping[str, int] = field(default_factory=dict)
    #: keyed operator uid -> (key groups kept in place, key groups read from storage)
    #: when its backend was built this epoch (a rescale in place keeps some)
    key_groups: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: "host:pid" of the Python worker that ran the subtask
    worker: str = "?"
    #: the Spark executor whose task ran the subtask, as a task location
    #: (``executor_<host>_<id>``); ``None`` where unknown (local mode, in-process runner)
    executor: str | None = None
    #: why this subtask could not write the epoch's savepoint (the savepoint fails, the
    #: epoch and the job go on, as in Flink)
    savepoint_error: str | None = None
    timings: SubtaskTimings = SubtaskTimings()
    #: user metric identifier -> (kind, what changed this epoch): see api/metrics.py
    user_metrics: Mapping[str, tuple[str, Any]] = field(default_factory=dict)
    #: "<operator uid>.<state name>" -> entries migrated to a new schema this epoch
    migrated: Mapping[str, int] = field(default_factory=dict)
    #: feature name -> the feature's part of the ack (runtime/features.py)
    features: Mapping[str, Any] = field(default_factory=dict)
