"""The checkpoint coordinator: when to checkpoint, and the lifecycle of each checkpoint.

Driver-side, and the owner of every checkpoint decision. The epoch loop asks
:meth:`CheckpointCoordinator.should_trigger` at every epoch boundary; if yes it calls
:meth:`~CheckpointCoordinator.trigger`, runs the epoch with the checkpoint id and hands
the epoch's acks to :meth:`~CheckpointCoordinator.conclude`, which decides what becomes of
the checkpoint (completed, aborted because a savepoint's files could not be written, or
expired, and whether that fails the job) and answers with a :class:`CheckpointVerdict`
the loop acts on. An epoch that fails aborts its checkpoint
(:meth:`~CheckpointCoordinator.abort`).

Guarantees:

* ids strictly increase, also across restarts of the driver on the same storage (the first
  id is above every ``chk-<n>`` directory already there);
* a checkpoint is COMPLETED only after its ``_metadata`` was stored atomically;
* older checkpoints beyond ``num_retained`` are deleted only after a newer one completed;
* it is the one owner of a checkpoint's lifecycle: PENDING -> COMPLETED -> SUBSUMED
  (dropped by retention) and PENDING -> ABORTED; anything else raises
  :class:`IllegalLifecycleTransition`. ``_metadata`` is only ever built here, from the
  acknowledged subtask states, after checking that every subtask of every stateful
  operator acknowledged with the operator's parallelism;
* every step is reported to a :class:`CheckpointStatsTracker` (counts, history, sizes).

Max concurrent checkpoints: a checkpoint completes at the end of the epoch that triggered
it, so in the epoch model at most one is ever pending. The setting is kept and honoured
(no trigger while ``max_concurrent`` are pending) for compatibility.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from streamstate.errors import (
    CheckpointError,
    ConfigurationError,
    IllegalLifecycleTransition,
)
from streamstate.runtime.checkpoint.handles import KeyGroupsStateHandle, StreamStateHandle
from streamstate.runtime.checkpoint.metadata import (
    CheckpointMetadata,
    SubtaskState,
    build_operator_states,
)
from streamstate.runtime.checkpoint.stats import CheckpointStatsTracker
from streamstate.runtime.checkpoint.storage import CheckpointStorageAccess, _url_to_fs
from streamstate.runtime.clock import Clock, system_clock_ms
from streamstate.runtime.settings import CheckpointSettings, RetentionPolicy

if TYPE_CHECKING:
    from streamstate.runtime.graph import ExecutionPlan
    from streamstate.runtime.protocol import SubtaskAck

__all__ = [
    "CheckpointContents",
    "CheckpointCoordinator",
    "CheckpointStatus",
    "CheckpointVerdict",
    "PendingCheckpoint",
    "RetentionPolicy",
    "cleanup_shared_state",
]

log = logging.getLogger(__name__)


class CheckpointStatus(Enum):
    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    ABORTED = "ABORTED"
    #: a completed checkpoint that retention dropped (a newer one took its place)
    SUBSUMED = "SUBSUMED"


_TRANSITIONS: dict[CheckpointStatus, frozenset[CheckpointStatus]] = {
    CheckpointStatus.PENDING: frozenset({CheckpointStatus.COMPLETED, CheckpointStatus.ABORTED}),
    CheckpointStatus.COMPLETED: frozenset({CheckpointStatus.SUBSUMED}),
    CheckpointStatus.ABORTED: frozenset(),
    CheckpointStatus.SUBSUMED: frozenset(),
}


@dataclass
class PendingCheckpoint:
    """A triggered checkpoint collecting acks. Mutated only by the coordinator's thread."""

    checkpoint_id: int
    trigger_ms: int
    is_savepoint: bool = False
    #: a savepoint's SavepointTarget (its own directory); None: the checkpoint storage
    target: Any = None
    status: CheckpointStatus = CheckpointStatus.PENDING
    failure_reason: str | None = None
    # operator uid -> subtask index -> state
    acks: dict[str, dict[int, SubtaskState]] = field(default_factory=dict)
    parallelism: dict[str, int] = field(default_factory=dict)
    max_parallelism: dict[str, int] = field(default_factory=dict)

    def _transition(self, to: CheckpointStatus) -> None:
        if to not in _TRANSITIONS[self.status]:
            raise IllegalLifecycleTransition(
                f"checkpoint {self.checkpoint_id} cannot go from {self.status.name} to {to.name}"
            )
        self.status = to

    def acknowledge(
        self,
        operator_uid: str,
        subtask_index: int,
        parallelism: int,
        max_parallelism: int,
        keyed: Iterable[KeyGroupsStateHandle] = (),
        operator: Iterable[StreamStateHandle] = (),
    ) -> None:
        """Record subtask ``subtask_index`` of ``operator_uid``'s state for this checkpoint.

        A retried subtask may acknowledge again: the last ack wins. Raises
        IllegalLifecycleTransition when the checkpoint is no longer pending.
        """
        if self.status is not CheckpointStatus.PENDING:
            raise IllegalLifecycleTransition(
                f"checkpoint {self.checkpoint_id} is {self.status.name}: it takes no more acks"
            )
        if not 0 <= subtask_index < parallelism:
            raise CheckpointError(
                f"ack from subtask {subtask_index} of {operator_uid!r} is outside parallelism "
                f"{parallelism}"
            )
        known = self.parallelism.setdefault(operator_uid, parallelism)
        known_max = self.max_parallelism.setdefault(operator_uid, max_parallelism)
        if (known, known_max) != (parallelism, max_parallelism):
            raise CheckpointError(
                f"operator {operator_uid!r} acked with parallelism {parallelism}/"
                f"{max_parallelism}, earlier acks said {known}/{known_max}"
            )
        self.acks.setdefault(operator_uid, {})[subtask_index] = SubtaskState(
            tuple(keyed), tuple(operator)
        )

    def is_expired(self, now_ms: int, timeout_ms: int) -> bool:
        return self.status is CheckpointStatus.PENDING and now_ms - self.trigger_ms > timeout_ms


@dataclass(frozen=True)
class CheckpointContents:
    """What a completed checkpoint stores besides its operators' state."""

    source_offsets: Mapping[str, Any]
    sink_state: Mapping[str, Any]
    properties: Mapping[str, Any]


@dataclass(frozen=True)
class CheckpointVerdict:
    """What became of a checkpoint at the end of the epoch that carried its barrier."""

    checkpoint_id: int
    is_savepoint: bool
    #: its ``_metadata`` when it COMPLETED; None: it was aborted (``failure`` says why)
    metadata: CheckpointMetadata | None = None
    failure: str | None = None
    #: it expired: its files stay state-version bases until the next full versions
    expired: bool = False
    #: more checkpoints failed in a row than tolerated: the job fails with this error
    job_failure: CheckpointError | None = None

    @property
    def completed(self) -> bool:
        return self.metadata is not None


class CheckpointCoordinator:
    """Triggers, completes, aborts and prunes checkpoints of one job (driver only)."""

    def __init__(
        self,
        storage: CheckpointStorageAccess,
        *,
        interval_ms: int,
        timeout_ms: int = 10 * 60 * 1000,
        min_pause_ms: int = 0,
        max_concurrent: int = 1,
        tolerable_failures: int = 0,
        num_retained: int = 1,
        retention: RetentionPolicy | str = RetentionPolicy.NO_EXTERNALIZED_CHECKPOINTS,
        clock: Clock | None = None,
        start_ms: int | None = None,
        next_checkpoint_id: int | None = None,
        stats: CheckpointStatsTracker | None = None,
    ) -> None:
        """``interval_ms <= 0`` disables periodic checkpoints (savepoints still work).

        The first periodic checkpoint is due ``interval_ms`` after ``start_ms`` (default:
        the clock now). ``next_checkpoint_id`` defaults to one above every checkpoint id
        already present in ``storage``.
        """
        for name, value, minimum in (
            ("timeout_ms", timeout_ms, 1),
            ("min_pause_ms", min_pause_ms, 0),
            ("max_concurrent", max_concurrent, 1),
            ("tolerable_failures", tolerable_failures, 0),
            ("num_retained", num_retained, 1),
        ):
            if value < minimum:
                raise ConfigurationError(f"{name} must be >= {minimum}, got {value}")
        self.storage = storage
        self.interval_ms = interval_ms
        self.timeout_ms = timeout_ms
        self.min_pause_ms = min_pause_ms
        self.max_concurrent = max_concurrent
        self.tolerable_failures = tolerable_failures
        self.num_retained = num_retained
        self.retention = RetentionPolicy(
            retention if isinstance(retention, str) else retention.value
        )
        self._clock = clock or system_clock_ms
        self._last_trigger_ms = self._clock() if start_ms is None else start_ms
        self._last_completion_ms: int | None = None
        if next_checkpoint_id is None:
            next_checkpoint_id = storage.max_checkpoint_id_in_use() + 1
        self._next_id = next_checkpoint_id
        self._pending: dict[int, PendingCheckpoint] = {}
        #: completed checkpoints still retained (they become SUBSUMED when pruned)
        self._retained: dict[int, PendingCheckpoint] = {}
        #: aborted checkpoints to look at again once a later one completed (a subtask of the
        #: failed epoch may write after the abort); None: not swept yet, look at every
        #: incomplete ``chk-<n>`` (earlier drivers of the job directory left them)
        self._aborted: set[int] | None = None
        self.consecutive_failures = 0
        self.latest_completed: CheckpointMetadata | None = None
        #: expired checkpoints whose files are still state-version bases: deleted once
        #: every subtask wrote a full version again (:meth:`discard_deferred`)
        self._deferred_discard: list[int] = []
        self.stats = stats if stats is not None else CheckpointStatsTracker()

    @classmethod
    def from_settings(
        cls, settings: CheckpointSettings, storage: CheckpointStorageAccess, **kwargs: Any
    ) -> CheckpointCoordinator:
        """Build from a job's parsed :class:`~streamstate.runtime.settings.CheckpointSettings`."""
        return cls(
            storage,
            interval_ms=settings.interval_ms,
            timeout_ms=settings.timeout_ms,
            min_pause_ms=settings.min_pause_ms,
            max_concurrent=settings.max_concurrent,
            tolerable_failures=settings.tolerable_failures,
            num_retained=settings.num_retained,
            retention=settings.retention,
            **kwargs,
        )

    @classmethod
    def from_checkpoint_config(
        cls, checkpoint_config: Any, storage: CheckpointStorageAccess, **kwargs: Any
    ) -> CheckpointCoordinator:
        """Build from a :class:`streamstate.datastream.checkpoint_config.CheckpointConfig`."""
        return cls.from_settings(
            CheckpointSettings.from_checkpoint_config(checkpoint_config), storage, **kwargs
        )

    # -- queries -----------------------------------------------------------------------------

    @property
    def pending(self) -> list[PendingCheckpoint]:
        return list(self._pending.values())

    @property
    def periodic_checkpointing_enabled(self) -> bool:
        return self.interval_ms > 0

    def _now(self, now_ms: int | None) -> int:
        return self._clock() if now_ms is None else now_ms

    def should_trigger(self, now_ms: int | None = None) -> bool:
        """Whether a periodic checkpoint is due at this epoch boundary.

        True iff checkpointing is enabled, fewer than ``max_concurrent`` are pending, the
        interval elapsed since the last trigger, and the min pause elapsed since the last
        completion.
        """
        if not self.periodic_checkpointing_enabled or len(self._pending) >= self.max_concurrent:
            return False
        now = self._now(now_ms)
        if now - self._last_trigger_ms < self.interval_ms:
            return False
        return (
            self._last_completion_ms is None or now - self._last_completion_ms >= self.min_pause_ms
        )

    def should_fail_job(self) -> bool:
        """True when more consecutive checkpoints failed than ``tolerable_failures``."""
        return self.consecutive_failures > self.tolerable_failures

    def continue_ids_after(self, checkpoint_id: int) -> None:
        """The job restored ``checkpoint_id``: later checkpoints get higher ids, also in a
        new job directory (Flink sets its checkpoint id counter to the restored id + 1;
        write-ahead sinks rely on ids only growing)."""
        self._next_id = max(self._next_id, checkpoint_id + 1)

    # -- lifecycle ---------------------------------------------------------------------------

    def trigger(
        self, now_ms: int | None = None, is_savepoint: bool = False, target: Any = None
    ) -> PendingCheckpoint:
        """Start checkpoint ``next id`` (does not check the interval: see should_trigger).

        Raises CheckpointError while ``max_concurrent`` checkpoints are pending.
        """
        if len(self._pending) >= self.max_concurrent:
            raise CheckpointError(
                f"cannot trigger a checkpoint: {len(self._pending)} pending (max concurrent "
                f"checkpoints is {self.max_concurrent}); complete or abort "
                f"{sorted(self._pending)} first"
            )
        now = self._now(now_ms)
        pending = PendingCheckpoint(self._next_id, now, is_savepoint, target)
        self._next_id += 1
        self._pending[pending.checkpoint_id] = pending
        if not is_savepoint:
            self._last_trigger_ms = now
        self.stats.reported_pending(pending.checkpoint_id, now, is_savepoint)
        return pending

    def _check_pending(self, pending: PendingCheckpoint) -> None:
        if self._pending.get(pending.checkpoint_id) is not pending:
            raise IllegalLifecycleTransition(
                f"checkpoint {pending.checkpoint_id} is {pending.status.name} and not pending "
                f"in this coordinator"
            )

    def complete(
        self,
        pending: PendingCheckpoint,
        *,
        job_id: str | None = None,
        source_offsets: Mapping[str, Any] | None = None,
        sink_state: Mapping[str, Any] | None = None,
        properties: Mapping[str, Any] | None = None,
        now_ms: int | None = None,
    ) -> CheckpointMetadata:
        """Build ``_metadata`` from the acks, store it atomically, mark COMPLETED, prune.

        Every subtask of every acknowledged operator must have acknowledged
        (:class:`CheckpointError` otherwise: abort it instead). If storing fails the
        checkpoint is aborted (counted as a failure) and the storage error propagates.
        Completed checkpoints beyond ``num_retained`` become SUBSUMED and are deleted.
        """
        self._check_pending(pending)
        for uid, p in pending.parallelism.items():
            missing = sorted(set(range(p)) - set(pending.acks.get(uid, {})))
            if missing:
                raise CheckpointError(
                    f"checkpoint {pending.checkpoint_id}: subtasks {missing} of operator "
                    f"{uid!r} did not acknowledge; abort it instead"
                )
        metadata = CheckpointMetadata(
            job_id=job_id or self.storage.job_id or "",
            checkpoint_id=pending.checkpoint_id,
            timestamp_ms=pending.trigger_ms,
            operator_states=build_operator_states(
                pending.acks, pending.parallelism, pending.max_parallelism
            ),
            source_offsets=dict(source_offsets or {}),
            sink_state=dict(sink_state or {}),
            properties=dict(properties or {}),
            is_savepoint=pending.is_savepoint,
        )
        store = pending.target if pending.target is not None else self.storage
        try:
            location = store.store_metadata(metadata)
        except Exception as e:
            self.abort(pending, f"storing _metadata failed: {e}", now_ms=now_ms)
            raise
        pending._transition(CheckpointStatus.COMPLETED)
        del self._pending[pending.checkpoint_id]
        end = self._now(now_ms)
        self._last_completion_ms = end
        self.consecutive_failures = 0
        self.latest_completed = metadata
        self.stats.reported_completed(
            pending.checkpoint_id,
            end,
            metadata.properties.get("epoch"),
            {
                uid: tuple(sum(h.size for h in s.stream_handles()) for s in ops.subtasks)
                for uid, ops in metadata.operator_states.items()
            },
            location
            if pending.target is not None
            else self.storage.checkpoint_location(pending.checkpoint_id),
        )
        if not pending.is_savepoint:
            self._retained[pending.checkpoint_id] = pending
            self._prune()
            self._discard_leftovers(pending.checkpoint_id)
            cleanup_shared_state(self.storage, pending.checkpoint_id)
        return metadata

    def abort(
        self,
        pending: PendingCheckpoint,
        reason: str,
        *,
        count_as_failure: bool = True,
        now_ms: int | None = None,
        discard: bool = True,
    ) -> None:
        """Mark ABORTED, delete whatever the subtasks already wrote for it.

        ``count_as_failure`` (default) counts it against ``tolerable_failures``; pass False
        for aborts that are not the checkpoint's fault (e.g. the job is failing anyway).
        ``discard=False`` leaves its files for the caller to delete later (they may still
        be read as state versions); without ``_metadata`` they never form a checkpoint.
        """
        self._check_pending(pending)
        pending._transition(CheckpointStatus.ABORTED)
        pending.failure_reason = reason
        del self._pending[pending.checkpoint_id]
        if count_as_failure:
            self.consecutive_failures += 1
        self.stats.reported_failed(pending.checkpoint_id, self._now(now_ms), reason)
        log.warning("checkpoint %d aborted: %s", pending.checkpoint_id, reason)
        if not discard:
            return
        if self._aborted is not None and pending.target is None:
            self._aborted.add(pending.checkpoint_id)
        try:
            if pending.target is not None:  # a savepoint: its directory never got _metadata
                fs, path = _url_to_fs(pending.target.url)
                fs.rm(path, recursive=True)
                return
            self.storage.discard_checkpoint(pending.checkpoint_id)
        except Exception as e:  # noqa: BLE001 - leftover files are harmless: they never get a _metadata
            log.warning("could not clean up aborted checkpoint %d: %s", pending.checkpoint_id, e)

    def conclude(
        self,
        pending: PendingCheckpoint,
        plan: ExecutionPlan,
        acks: Mapping[tuple[int, int], SubtaskAck],
        contents: Callable[[], CheckpointContents],
        *,
        job_id: str,
        uncommitted: tuple[int, int],
        now_ms: int,
    ) -> CheckpointVerdict:
        """Decide ``pending``'s fate once the epoch carrying its barrier ran: ``acks`` are
        that epoch's, by (stage, subtask).

        A savepoint whose files a subtask could not write is aborted (not counted as a
        failure); a checkpoint past its timeout expires (:meth:`expire`; the verdict then
        carries the job's failure when that was one failure too many: ``uncommitted``
        names the epochs whose output waits); otherwise every stateful subtask's ack is
        recorded and the checkpoint completes with ``contents()`` (built only then)."""
        verdict = CheckpointVerdict(pending.checkpoint_id, pending.is_savepoint)
        errors = sorted(a.savepoint_error for a in acks.values() if a.savepoint_error)
        if pending.is_savepoint and errors:
            self.abort(
                pending, "its files could not be written", count_as_failure=False, now_ms=now_ms
            )
            return replace(verdict, failure="; ".join(errors))
        if self.is_expired(pending, now_ms):
            try:
                self.expire(pending, now_ms, uncommitted)
            except CheckpointError as too_many:
                return replace(
                    verdict, failure="its timeout expired", expired=True, job_failure=too_many
                )
            return replace(verdict, failure="its timeout expired", expired=True)
        _acknowledge_epoch(pending, plan, acks)
        stored = contents()
        metadata = self.complete(
            pending,
            job_id=job_id,
            source_offsets=stored.source_offsets,
            sink_state=stored.sink_state,
            properties=stored.properties,
            now_ms=now_ms,
        )
        return replace(verdict, metadata=metadata)

    def _discard_leftovers(self, before: int) -> None:
        """Delete what aborted checkpoints below ``before`` still left in storage: files a
        subtask of a failed epoch wrote after the abort deleted the rest, multipart uploads
        of writers that died. Pending checkpoints and deferred discards are left alone."""
        keep = set(self._pending) | set(self._deferred_discard)
        try:
            if self._aborted is None:
                gone = self.storage.discard_incomplete_checkpoints(before, keep)
                self._aborted = set()
            else:
                gone = sorted(c for c in self._aborted if c < before and c not in keep)
                for cid in gone:
                    self.storage.discard_checkpoint(cid)
                self._aborted.difference_update(gone)
        except Exception as e:  # noqa: BLE001 - a failed delete must not fail the job
            log.warning("could not delete what aborted checkpoints left: %s", e)
            return
        if gone:
            log.info("deleted what aborted checkpoints %s left", gone)

    def is_expired(self, pending: PendingCheckpoint, now_ms: int | None = None) -> bool:
        return pending.is_expired(self._now(now_ms), self.timeout_ms)

    def expire(self, pending: PendingCheckpoint, now_ms: int, uncommitted: tuple[int, int]) -> None:
        """Abort ``pending``, whose epoch ended after its timeout, as a failure.

        Its subtasks' lineages already point at a checkpoint's files: they are kept until
        the next full versions are written (:meth:`discard_deferred`); a savepoint's go at
        once (no version is based on them). Raises :class:`CheckpointError` when more
        checkpoints failed in a row than tolerated; ``uncommitted`` = the first and last
        epoch whose output then waits for a restore.
        """
        self.abort(
            pending, "checkpoint timeout expired", discard=pending.is_savepoint, now_ms=now_ms
        )
        if not pending.is_savepoint:
            self._deferred_discard.append(pending.checkpoint_id)
        if self.should_fail_job():
            first, last = uncommitted
            raise CheckpointError(
                f"checkpoint {pending.checkpoint_id} expired (timeout {self.timeout_ms} ms) "
                f"and {self.consecutive_failures} checkpoints in a row failed, more than "
                f"execution.checkpointing.tolerable-failed-checkpoints "
                f"({self.tolerable_failures}) allows. The output of epochs {first}..{last} "
                f"is not committed: it is kept (pending sink results, in-progress files) for "
                f"a restore from the last completed checkpoint. Raise the checkpoint timeout "
                f"or the tolerable failures if checkpoints are slow"
            )

    def discard_deferred(self) -> None:
        """Every subtask wrote a full version (or a checkpoint): delete the files of the
        expired checkpoints that were state-version bases until then."""
        for checkpoint_id in self._deferred_discard:
            self.storage.discard_checkpoint(checkpoint_id)
        self._deferred_discard = []

    def abort_expired(self, now_ms: int | None = None) -> list[PendingCheckpoint]:
        """Abort every pending checkpoint older than the timeout; returns them."""
        now = self._now(now_ms)
        expired = [p for p in self._pending.values() if p.is_expired(now, self.timeout_ms)]
        for p in expired:
            self.abort(
                p,
                f"checkpoint expired before completing (timeout {self.timeout_ms} ms)",
                now_ms=now,
            )
        return expired

    def _prune(self) -> None:
        ids = self.storage.list_checkpoints()
        for cid in ids[: max(0, len(ids) - self.num_retained)]:
            self._subsume(cid)
            try:
                self.storage.discard_checkpoint(cid)
            except Exception as e:  # noqa: BLE001 - a failed delete must not fail the job
                log.warning("could not discard subsumed checkpoint %d: %s", cid, e)

    def _subsume(self, checkpoint_id: int) -> None:
        done = self._retained.pop(checkpoint_id, None)
        if done is not None:
            done._transition(CheckpointStatus.SUBSUMED)
            self.stats.reported_subsumed(checkpoint_id)

    def on_job_terminal(self, cancelled: bool, *, failed: bool = False) -> list[int]:
        """Apply the retention policy when the job ends; returns the discarded ids.

        RETAIN_ON_CANCELLATION keeps every completed checkpoint; DELETE_ON_CANCELLATION
        deletes when the job was cancelled or finished, keeps when it failed;
        NO_EXTERNALIZED_CHECKPOINTS deletes whenever the job ends. Pending checkpoints are
        aborted first (not counted as failures); what is kept is the completed checkpoints
        and the shared files they name, nothing that checkpoints which never completed left.
        """
        for p in list(self._pending.values()):
            self.abort(p, "job ended", count_as_failure=False)
        keeps = self.retention is RetentionPolicy.RETAIN_ON_CANCELLATION or (
            self.retention is RetentionPolicy.DELETE_ON_CANCELLATION and failed and not cancelled
        )
        if keeps:
            # what stays is the retained checkpoints and the files they name, nothing of
            # the checkpoints that never completed: the job is over, no upload is in flight
            if self._aborted is not None:
                self._aborted.update(self._deferred_discard)
            self._deferred_discard = []
            self._discard_leftovers(2**62)
            cleanup_shared_state(self.storage, 2**62)
            return []
        ids = self.storage.list_checkpoints()
        for cid in ids:
            self._subsume(cid)
            self.storage.discard_checkpoint(cid)
        cleanup_shared_state(self.storage, 2**62)  # the job is over: no upload is in flight
        return ids


def _acknowledge_epoch(
    pending: PendingCheckpoint, plan: ExecutionPlan, acks: Mapping[tuple[int, int], SubtaskAck]
) -> None:
    """Every subtask of every operator that has checkpoint state acknowledges it (with
    empty state where that subtask has none), so :meth:`CheckpointCoordinator.complete`
    can check that none is missing."""
    stateful = {uid for a in acks.values() for uid in (*a.checkpoint, *a.op_checkpoint)}
    for st in plan.stages:
        for n in st.nodes.values():
            if n.uid not in stateful:
                continue
            for i in range(st.parallelism):
                a = acks[(st.id, i)]
                keyed = a.checkpoint.get(n.uid)
                operator = a.op_checkpoint.get(n.uid)
                pending.acknowledge(
                    n.uid,
                    i,
                    st.parallelism,
                    st.max_parallelism,
                    keyed=(keyed,) if keyed is not None else (),
                    operator=(operator,) if operator is not None else (),
                )


def cleanup_shared_state(storage: CheckpointStorageAccess, up_to_checkpoint_id: int) -> None:
    """Delete ``shared/`` files that no retained checkpoint refers to.

    The reference count of a shared file is the number of retained checkpoints
    whose metadata names it; files at zero are deleted (as are leftovers of killed
    uploads), but only those uploaded by checkpoints up to ``up_to_checkpoint_id``.
    When a retained checkpoint's metadata cannot be read, nothing is deleted.
    """
    from streamstate.runtime.checkpoint.handles import FileStateHandle
    from streamstate.runtime.checkpoint.incremental import shared_file_checkpoint_id

    try:
        if not storage.shared_state_files():
            return
        referenced: set[str] = set()
        for cid in storage.list_checkpoints():
            md = storage.load_metadata(cid, verify=False)
            referenced.update(h.path for h in md.stream_handles() if isinstance(h, FileStateHandle))
        storage.cleanup_shared_state(referenced, up_to_checkpoint_id, shared_file_checkpoint_id)
    except Exception as e:  # noqa: BLE001 - cleanup must not fail the job; the next one retries
        log.warning("shared state cleanup after checkpoint %d failed: %s", up_to_checkpoint_id, e)
