"""The driver's restorable view of a job between epochs.

:class:`JobState` is everything a checkpoint captures on the driver side besides the
subtasks' state files: the epoch counter, each source's enumerator state (positions),
where every subtask's state version is (:class:`~streamstate.runtime.versions.StateVersions`),
and each subtask's watermark state. :meth:`JobState.reset` is a fresh start;
:meth:`JobState.restore` rebuilds it from a checkpoint's ``_metadata`` at the current
plan's parallelism (keyed state by key group, operator state redistributed, watermarks
merged conservatively when the parallelism changed).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from streamstate.errors import CheckpointError, StateMigrationError
from streamstate.runtime.checkpoint.metadata import CheckpointMetadata
from streamstate.runtime.graph import ExecutionPlan, Stage
from streamstate.runtime.protocol import EpochSpec, SubtaskAck, SubtaskSpec
from streamstate.runtime.versions import StateVersions
from streamstate.runtime.watermarks import merge_states

__all__ = ["JobState", "source_uid"]

log = logging.getLogger("streamstate")


def source_uid(st: Stage) -> str:
    """The uid of source stage ``st`` (build_plan sets it on every source stage)."""
    assert st.source_uid is not None
    return st.source_uid


class JobState:
    """Epoch counter, source positions, state versions and watermarks of one job."""

    def __init__(self, plan: ExecutionPlan) -> None:
        self.plan = plan
        #: restarts so far; part of every state version's token, so a restart invalidates caches
        self.attempt = 0
        #: the last epoch that ran to completion
        self.epoch = 0
        #: the last epoch that wrote full state versions (a checkpoint or a full version)
        self.last_full_epoch = 0
        self.source_states: dict[str, Any] = {}
        self.versions = StateVersions()
        #: (stage id, subtask) -> {node uid: watermark state} (runtime/watermarks.py)
        self.wm_states: dict[tuple[int, int], dict[str, Any]] = {}
        #: the final watermark went out (bounded sources exhausted)
        self.end_of_input_sent = False
        #: the last epoch covered by a completed checkpoint (its output is committed)
        self.committed_epoch = 0
        #: the epoch the current attempt started after (see EpochSpec.attempt_start_epoch)
        self.attempt_start_epoch = 0
        #: EpochSpec.replay_stamp of this attempt (set by the driver at every restore)
        self.replay_stamp: str | None = None

    def reset(self) -> None:
        """A fresh start at epoch 0 of the current attempt."""
        self.epoch = 0
        self.last_full_epoch = 0
        for st in self.plan.sources:
            self.source_states[source_uid(st)] = st.source.create_enumerator_state(st.parallelism)
        self.versions.reset(
            (
                (uid, i)
                for st in self.plan.stages
                for uid in st.keyed_uids
                for i in range(st.parallelism)
            ),
            (self.attempt, 0),
        )
        self.wm_states = {}
        self.end_of_input_sent = False
        self.committed_epoch = 0
        self.attempt_start_epoch = 0

    def restore(self, md: CheckpointMetadata, allow_non_restored_state: bool = True) -> None:
        """Continue after the checkpoint ``md`` (call :meth:`reset` first).

        State of an operator uid this job does not have fails the restore
        (:class:`StateMigrationError`) unless ``allow_non_restored_state``: then it is
        dropped with a warning. An operator without state in ``md`` starts empty."""
        epoch = int(md.properties.get("epoch", 0))
        self.epoch = epoch
        self.last_full_epoch = epoch
        self.committed_epoch = epoch
        self.attempt_start_epoch = epoch
        token = (self.attempt, epoch)
        for st in self.plan.sources:
            uid = source_uid(st)
            saved = md.source_offsets.get(uid)
            if saved is None:
                log.warning(
                    "source %s has no position in the checkpoint: reading from the start", uid
                )
                self.source_states[uid] = st.source.create_enumerator_state(st.parallelism)
            else:
                self.source_states[uid] = st.source.restore_enumerator_state(saved, st.parallelism)
        known = set()
        for st in self.plan.stages:
            for uid in st.keyed_uids:
                known.add(uid)
                ops = md.operator_states.get(uid)
                if ops is not None and ops.max_parallelism != st.max_parallelism:
                    raise StateMigrationError(
                        f"operator {uid!r} was checkpointed with max parallelism {ops.max_parallelism} "
                        f"but now has {st.max_parallelism}: the max parallelism fixes the key groups "
                        f"and cannot change across a restore; set it back with set_max_parallelism()"
                    )
                handles = [h for s in (ops.subtasks if ops else ()) for h in s.keyed]
                self.versions.restore_keyed(uid, handles, st.parallelism, st.max_parallelism, token)
        for st in self.plan.stages:
            for n in st.nodes.values():
                ops = md.operator_states.get(n.uid)
                if n.factory is None or ops is None:
                    continue
                known.add(n.uid)
                if any(s.operator for s in ops.subtasks):
                    old = tuple(s.operator[0] if s.operator else None for s in ops.subtasks)
                    self.versions.restore_operator(n.uid, old, st.parallelism, token)
        unknown = [
            u
            for u, o in md.operator_states.items()
            if u not in known and any(s.keyed or s.operator for s in o.subtasks)
        ]
        if unknown and not allow_non_restored_state:
            raise StateMigrationError(
                f"the {'savepoint' if md.is_savepoint else 'checkpoint'} holds state of "
                f"operators {unknown} that this job does not have (operators are matched by "
                f"uid: set .uid(...) on stateful operators to keep it stable). To drop that "
                f"state, allow non-restored state: `streamstate run --allow-non-restored-state`"
                f" or execution.state-recovery.ignore-unclaimed-state: true"
            )
        if unknown:
            log.warning(
                "checkpoint state of operators %s has no operator in this job; it is dropped",
                unknown,
            )
        self._restore_watermarks(md.properties.get("watermarks") or {})

    def _restore_watermarks(self, saved: dict[str, list[Any]]) -> None:
        for st in self.plan.stages:
            for n in st.nodes.values():
                per = saved.get(n.uid)
                if not per:
                    continue
                if len(per) == st.parallelism:
                    for i, state in enumerate(per):
                        if state:
                            self.wm_states.setdefault((st.id, i), {})[n.uid] = state
                else:
                    merged = merge_states([x for x in per if x])
                    for i in range(st.parallelism):
                        self.wm_states.setdefault((st.id, i), {})[n.uid] = merged

    def watermark_property(self) -> dict[str, list[Any]]:
        """Node uid -> per-subtask watermark state (JSON), for the checkpoint's properties."""
        out: dict[str, list[Any]] = {}
        for st in self.plan.stages:
            for n in st.nodes.values():
                per = [self.wm_states.get((st.id, i), {}).get(n.uid) for i in range(st.parallelism)]
                if any(per):
                    out[n.uid] = per
        return out

    def epoch_specs(
        self,
        epoch: int,
        checkpoint_id: int | None,
        timestamp_ms: int,
        started_ms: int,
        full: bool,
        notify_only: bool,
        finished: dict[int, bool],
        notifications: tuple[tuple[str, int], ...],
        savepoint: tuple[int, Any] | None = None,
        ending: bool = False,
    ) -> dict[int, EpochSpec]:
        """One :class:`EpochSpec` per stage for epoch ``epoch`` (plans the sources' slices)."""
        especs: dict[int, EpochSpec] = {}
        for st in self.plan.stages:
            assignments = (
                st.source.plan_epoch(self.source_states[source_uid(st)], st.parallelism)
                if st.is_source and not notify_only
                else [None] * st.parallelism
            )
            op_uids = [n.uid for n in st.nodes.values()]
            subs = tuple(
                SubtaskSpec(
                    assignments[i],
                    self.versions.keyed_for(st.keyed_uids, i),
                    self.wm_states.get((st.id, i), {}),
                    self.versions.operator_for(op_uids, i),
                )
                for i in range(st.parallelism)
            )
            especs[st.id] = EpochSpec(
                epoch,
                self.attempt,
                checkpoint_id,
                full,
                subs,
                processing_time_ms=started_ms,
                end_of_input=finished.get(st.id, False),
                timestamp_ms=timestamp_ms,
                notifications=notifications,
                notify_only=notify_only,
                savepoint_id=savepoint[0] if savepoint else None,
                savepoint=savepoint[1] if savepoint else None,
                attempt_start_epoch=self.attempt_start_epoch,
                ending=ending,
                replay_stamp=self.replay_stamp,
            )
        return especs

    def absorb(
        self, epoch: int, acks: Iterable[SubtaskAck], notify_only: bool
    ) -> tuple[dict[tuple[int, int], SubtaskAck], list[Any]]:
        """Check that every subtask acked, then fold in source progress, watermark states
        and state versions. Returns the acks by (stage, subtask) and the epoch files the
        new versions superseded (the caller deletes them)."""
        by = {(a.stage, a.subtask): a for a in acks}
        missing = [
            (st.id, i)
            for st in self.plan.stages
            for i in range(st.parallelism)
            if (st.id, i) not in by
        ]
        if missing:
            raise CheckpointError(f"epoch {epoch}: no ack from (stage, subtask) {missing}")
        superseded: list[Any] = []
        for st in self.plan.stages:
            sacks = [by[(st.id, i)] for i in range(st.parallelism)]
            if st.is_source and not notify_only:
                uid = source_uid(st)
                self.source_states[uid] = st.source.apply_progress(
                    self.source_states[uid], [a.source for a in sacks]
                )
            for a in sacks:
                self.wm_states[(st.id, a.subtask)] = dict(a.watermarks)
                superseded.extend(self.versions.fold(a))
        return by, superseded

    def source_offsets(self) -> dict[str, Any]:
        """Every source's enumerator state, checked to be JSON (sources promise it)."""
        for state in self.source_states.values():
            json.dumps(state)  # fail loudly here, not at restore
        return dict(self.source_states)

    def all_sources_finished(self) -> bool:
        return all(
            st.source.is_finished(self.source_states[source_uid(st)]) for st in self.plan.sources
        )
