"""The driver: epoch loop, checkpoint barriers, recovery (Flink's JobManager role).

One :class:`JobExecutor` runs one job. Each epoch it plans the source slices,
asks the :class:`EpochRunner` (Spark, or in-process for tests) to run every
stage once, and folds the acks back: source positions, state lineages, sink
results, counts. When the coordinator says a checkpoint is due, the epoch is
run with a barrier: every stateful subtask writes a snapshot, and after all
acked the driver stores ``_metadata`` atomically; only then are sinks
committed. On a failure the restart strategy decides; a restart restores the
latest valid checkpoint (state, source positions, pending sink commits) and
replays from there.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from abc import ABC, abstractmethod
from typing import Any

import cloudpickle

from streamstate.common.job_execution_result import JobExecutionResult
from streamstate.runtime.checkpoint.metadata import (
    CheckpointMetadata,
    SubtaskState,
    build_operator_states,
)
from streamstate.runtime.errors import (
    CheckpointError,
    ConfigurationError,
    CorruptCheckpointError,
    JobExecutionError,
    StateMigrationError,
)
from streamstate.runtime.graph import ExecutionPlan, Stage
from streamstate.runtime.keygroups import compute_key_group_range_for_operator_index
from streamstate.runtime.state.ttl_clock import ttl_time_provider_from_configuration
from streamstate.runtime.task import (
    EpochSpec,
    Lineage,
    OperatorStateLineage,
    StageTaskSpec,
    SubtaskEpoch,
)

__all__ = ["EpochRunner", "JobCancelled", "JobExecutor"]

log = logging.getLogger("streamstate")

DEFAULT_EPOCH_RECORDS = 100_000
DEFAULT_FULL_VERSION_EVERY = 20


class JobCancelled(Exception):
    """Raised inside the loop when ``cancel()`` was requested; the job stops at an epoch boundary."""


class EpochRunner(ABC):
    """Runs every stage of a plan once per epoch and returns all acks."""

    @abstractmethod
    def start(self, job_id: str, plan: ExecutionPlan, specs: dict[int, bytes]) -> None: ...

    @abstractmethod
    def run_epoch(
        self, plan: ExecutionPlan, epoch_specs: dict[int, EpochSpec]
    ) -> list[dict[str, Any]]: ...

    @abstractmethod
    def stop(self) -> None: ...

    def describe(self) -> str:
        return type(self).__name__


class JobExecutor:
    def __init__(
        self,
        plan: ExecutionPlan,
        job_name: str,
        configuration: Any,
        checkpoint_config: Any,
        state_backend: Any,
        restart_strategy: Any,
        job_parameters: dict[str, str],
        recovery_path: str | None,
        runner: EpochRunner,
    ) -> None:
        from streamstate.runtime.checkpoint.coordinator import CheckpointCoordinator
        from streamstate.runtime.restart import create_restart_strategy

        self.plan = plan
        self.job_name = job_name
        self.conf = configuration
        self.cc = checkpoint_config
        self.backend_name = getattr(state_backend, "backend_name", "hashmap")
        options = getattr(state_backend, "backend_options", None)
        self.backend_options: dict[str, Any] = dict(options()) if callable(options) else {}
        self.job_parameters = job_parameters
        self.recovery_path = recovery_path
        self.runner = runner
        self.job_id = uuid.uuid4().hex[:16]
        self.checkpointing = checkpoint_config.is_checkpointing_enabled()
        self.exactly_once = checkpoint_config.get_checkpointing_mode().name == "EXACTLY_ONCE"
        self.restart = create_restart_strategy(
            restart_strategy, configuration, checkpointing_enabled=self.checkpointing
        )
        self.epoch_records = conf_int(
            configuration, "execution.epoch.max-records", DEFAULT_EPOCH_RECORDS
        )
        self.full_every = conf_int(
            configuration, "execution.epoch.full-snapshot-interval", DEFAULT_FULL_VERSION_EVERY
        )
        self.max_epochs = conf_int(configuration, "execution.epoch.max-epochs", 0)
        self.ttl_time_provider = ttl_time_provider_from_configuration(configuration)
        self.idle_wait_s = conf_int(configuration, "execution.epoch.idle-wait-ms", 200) / 1000.0
        storage = checkpoint_config.get_checkpoint_storage()
        if storage is None:
            from streamstate.datastream.checkpoint_storage import JobManagerCheckpointStorage

            storage = JobManagerCheckpointStorage()
        working_dir = configuration.get_string("execution.epoch.state-dir", None)
        self.storage = storage.create_access(working_dir=working_dir)
        self.storage.initialize_job(self.job_id)
        self.coordinator = CheckpointCoordinator.from_checkpoint_config(
            checkpoint_config, self.storage
        )
        self.cancel_requested = threading.Event()
        # runtime state of the job
        self.attempt = 0
        self.epoch = 0
        self.last_full_epoch = 0
        self.source_states: dict[str, Any] = {}
        self.lineages: dict[tuple[str, int], Lineage] = {}
        #: operator state per (uid, subtask), only for operators that have some
        self.op_lineages: dict[tuple[str, int], OperatorStateLineage] = {}
        #: checkpoint notifications for the subtasks, delivered with the next epoch
        self.notifications: list[tuple[str, int]] = []
        self._listeners: bool | None = None
        self.committers: dict[str, Any] = {}
        self.counts: dict[str, int] = {}
        self.stats = {
            "epochs": 0,
            "checkpoints": 0,
            "restarts": 0,
            "cache_hits": 0,
            "cache_misses": 0,
            "checkpoints_failed": 0,
        }
        self.restored_from: str | None = None
        #: ids of aborted checkpoints whose files are still state-version bases
        self._deferred_discard: list[int] = []
        #: "stage/subtask" -> worker processes ("host:pid") that ran it
        self.workers: dict[str, set[str]] = {}
        #: seconds spent in subtasks, summed over all subtasks: restore / process / commit
        self.timings: dict[str, float] = {}

    # -- setup ------------------------------------------------------------------
    def _specs(self) -> dict[int, bytes]:
        specs = {}
        for st in self.plan.stages:
            factories = {
                tid: cloudpickle.dumps(n.factory)
                for tid, n in st.nodes.items()
                if n.factory is not None
            }
            spec = StageTaskSpec(
                job_id=self.job_id,
                stage=_strip_factories(st),
                factories=factories,
                storage=self.storage,
                backend_name=self.backend_name,
                job_parameters=self.job_parameters,
                source_budget=self.epoch_records,
                ttl_time_provider=self.ttl_time_provider,
                backend_options=self.backend_options,
            )
            specs[st.id] = cloudpickle.dumps(spec)
        return specs

    def _fresh_state(self) -> None:
        self.epoch = 0
        self.last_full_epoch = 0
        for st in self.plan.sources:
            assert st.source_uid is not None  # set on every source stage by build_plan
            self.source_states[st.source_uid] = st.source.create_enumerator_state(st.parallelism)
        self.lineages = {}
        self.op_lineages = {}
        for st in self.plan.stages:
            for uid in st.keyed_uids:
                for i in range(st.parallelism):
                    self.lineages[(uid, i)] = Lineage((self.attempt, 0))
        #: (stage id, subtask) -> {node uid: watermark state} (runtime/watermarks.py)
        self.wm_states: dict[tuple[int, int], dict[str, Any]] = {}
        self.end_of_input_sent = False

    def _make_committers(self) -> None:
        for st in self.plan.stages:
            for n in st.nodes.values():
                if n.committer_factory is not None:
                    self.committers[n.uid] = n.committer_factory(
                        self.exactly_once or not self.checkpointing
                    )

    # -- restore ----------------------------------------------------------------
    def _restore(self, md: CheckpointMetadata) -> None:
        epoch = int(md.properties.get("epoch", 0))
        self.epoch = epoch
        self.last_full_epoch = epoch
        for st in self.plan.sources:
            assert st.source_uid is not None  # set on every source stage by build_plan
            saved = md.source_offsets.get(st.source_uid)
            if saved is None:
                log.warning(
                    "source %s has no position in the checkpoint: reading from the start",
                    st.source_uid,
                )
                self.source_states[st.source_uid] = st.source.create_enumerator_state(
                    st.parallelism
                )
            else:
                self.source_states[st.source_uid] = st.source.restore_enumerator_state(
                    saved, st.parallelism
                )
        known = set()
        for st in self.plan.stages:
            for uid in st.keyed_uids:
                known.add(uid)
                ops = md.operator_states.get(uid)
                handles = [h for s in (ops.subtasks if ops else ()) for h in s.keyed]
                if ops is not None and ops.max_parallelism != st.max_parallelism:
                    raise StateMigrationError(
                        f"operator {uid!r} was checkpointed with max parallelism {ops.max_parallelism} "
                        f"but now has {st.max_parallelism}: the max parallelism fixes the key groups "
                        f"and cannot change across a restore; set it back with set_max_parallelism()"
                    )
                for i in range(st.parallelism):
                    rng = compute_key_group_range_for_operator_index(
                        st.max_parallelism, st.parallelism, i
                    )
                    base = tuple(h for h in handles if h.intersects(rng))
                    self.lineages[(uid, i)] = Lineage((self.attempt, epoch), base, ())
        for st in self.plan.stages:
            for n in st.nodes.values():
                ops = md.operator_states.get(n.uid)
                if n.factory is None or ops is None:
                    continue
                known.add(n.uid)
                if any(s.operator for s in ops.subtasks):
                    old = tuple(s.operator[0] if s.operator else None for s in ops.subtasks)
                    for i in range(st.parallelism):
                        self.op_lineages[(n.uid, i)] = OperatorStateLineage(
                            (self.attempt, epoch), None, old
                        )
        unknown = [
            u
            for u, o in md.operator_states.items()
            if u not in known and any(s.keyed or s.operator for s in o.subtasks)
        ]
        if unknown:
            log.warning(
                "checkpoint state of operators %s has no operator in this job; it is dropped",
                unknown,
            )
        self._restore_watermarks(md.properties.get("watermarks") or {})
        for uid, c in self.committers.items():
            c.abort(epoch)
            c.restore(md.sink_state.get(uid))

    def _restore_watermarks(self, saved: dict[str, list[Any]]) -> None:
        """Watermark states from a checkpoint; merged conservatively when the parallelism changed."""
        from streamstate.runtime.watermarks import merge_states

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

    def _initial_restore(self) -> None:
        if not self.recovery_path:
            self._fresh_state()
            return
        try:
            md = self.storage.load_metadata(self.recovery_path, verify=True)
        except FileNotFoundError as e:
            raise CorruptCheckpointError(f"no checkpoint at {self.recovery_path}: {e}") from e
        self._fresh_state()
        self._restore(md)
        self.restored_from = self.recovery_path
        log.info("job %s restored from %s (epoch %d)", self.job_id, self.recovery_path, self.epoch)

    def _recover_after_failure(self) -> None:
        self.attempt += 1
        # newest checkpoint that loads and verifies: a corrupt latest one falls back to an older one
        md = self.storage.latest_valid_checkpoint() if self.stats["checkpoints"] else None
        if md is None and self.restored_from:
            md = self.storage.load_metadata(self.restored_from, verify=True)
        self._fresh_state()
        if md is not None:
            self._restore(md)
        else:
            for c in self.committers.values():
                c.abort(0)
        log.warning(
            "job %s restarting (attempt %d) from %s",
            self.job_id,
            self.attempt,
            f"checkpoint {md.checkpoint_id}" if md else "the beginning",
        )

    # -- the loop ---------------------------------------------------------------
    def run(self) -> JobExecutionResult:
        t0 = time.time()
        self._make_committers()
        self._initial_restore()
        self.runner.start(self.job_id, self.plan, self._specs())
        cancelled = False
        try:
            while True:
                try:
                    self._run_epochs()
                    break
                except (JobCancelled, KeyboardInterrupt):
                    cancelled = True
                    log.warning("job %s cancelled at epoch %d", self.job_id, self.epoch)
                    break
                except Exception as e:  # noqa: BLE001 - every failure goes to the restart strategy
                    self.stats["epochs_failed"] = self.stats.get("epochs_failed", 0) + 1
                    self.restart.notify_failure()
                    if not self.restart.can_restart():
                        self._terminate_failed()
                        raise JobExecutionError(
                            f"job {self.job_name!r} ({self.job_id}) failed and the restart strategy "
                            f"({self.restart.describe()}) allows no further attempt: {e}"
                        ) from e
                    log.warning("epoch %d failed: %s", self.epoch + 1, _first_line(e))
                    time.sleep(self.restart.get_backoff_time_ms() / 1000.0)
                    self.stats["restarts"] += 1
                    self._recover_after_failure()
        finally:
            self.runner.stop()
        self.coordinator.on_job_terminal(cancelled=cancelled)
        for c in self.committers.values():
            c.finish()
        self._cleanup_epoch_versions()
        acc: dict[str, Any] = dict(self.stats)
        acc.update({f"records-in.{k}": v for k, v in self.counts.items()})
        acc["job-id"] = self.job_id
        acc.update({f"subtask-seconds.{k}": round(v, 3) for k, v in self.timings.items()})
        acc["subtask-workers"] = {k: sorted(v) for k, v in self.workers.items()}
        latest = self.coordinator.latest_completed
        acc["latest-checkpoint"] = (
            self.storage.checkpoint_location(latest.checkpoint_id) if latest is not None else None
        )
        return JobExecutionResult(self.job_id, int((time.time() - t0) * 1000), acc)

    def _terminate_failed(self) -> None:
        try:
            self.runner.stop()
            self.coordinator.on_job_terminal(cancelled=False, failed=True)
            self._cleanup_epoch_versions()
        except Exception as e:  # noqa: BLE001 - the job failure is what the caller must see
            log.warning("cleanup after job failure failed: %s", e)

    def cancel(self) -> None:
        self.cancel_requested.set()

    def _has_listeners(self) -> bool:
        """Whether any operator wants checkpoint notifications (built here, never opened)."""
        if self._listeners is None:
            self._listeners = any(
                n.factory().listens_to_checkpoints()
                for st in self.plan.stages
                for n in st.nodes.values()
                if n.factory is not None
            )
        return self._listeners

    def _all_finished(self) -> bool:
        return all(
            st.source.is_finished(self.source_states[_source_uid(st)]) for st in self.plan.sources
        )

    def _run_epochs(self) -> None:
        while True:
            if self.cancel_requested.is_set():
                raise JobCancelled()
            now = _now_ms()
            for st in self.plan.sources:
                uid = _source_uid(st)
                self.source_states[uid] = st.source.discover(self.source_states[uid], now)
            final = self._all_finished()
            if (
                final
                and not self.checkpointing
                and (self.end_of_input_sent or not self._needs_final_watermark())
            ):
                self._commit_all(self.epoch)
                return
            if self.max_epochs and self.epoch >= self.max_epochs:
                return
            pending = None
            if self.checkpointing and (final or self.coordinator.should_trigger(now)):
                pending = self.coordinator.trigger(now)
            read = self._run_one_epoch(pending, now)
            if final:
                if self.notifications and self._has_listeners():
                    # deliver the last checkpoint's notify_checkpoint_complete: one input-free epoch
                    self._run_one_epoch(None, _now_ms(), notify_only=True)
                return
            if read == 0 and self.idle_wait_s > 0:
                # unbounded sources with nothing new: don't spin Spark jobs back to back
                self.cancel_requested.wait(self.idle_wait_s)

    def _needs_final_watermark(self) -> bool:
        """Keyed operators may hold event-time timers/windows: a bounded job without
        checkpointing runs one more (empty) epoch to send them the final watermark."""
        return any(n.keyed for st in self.plan.stages for n in st.nodes.values())

    def _run_one_epoch(self, pending: Any, started_ms: int, notify_only: bool = False) -> int:
        """Run epoch ``self.epoch + 1``; returns how many records the sources read.

        ``notify_only``: the sources read nothing (the epoch only delivers notifications).
        """
        epoch = self.epoch + 1
        full = pending is None and (epoch - self.last_full_epoch) >= self.full_every
        notes = tuple(self.notifications)
        especs: dict[int, EpochSpec] = {}
        finished = {
            st.id: st.source.is_finished(self.source_states[_source_uid(st)])
            for st in self.plan.sources
        }
        for st in self.plan.stages:
            assignments = (
                st.source.plan_epoch(self.source_states[_source_uid(st)], st.parallelism)
                if st.is_source and not notify_only
                else [None] * st.parallelism
            )
            subs = [
                SubtaskEpoch(
                    assignments[i],
                    {uid: self.lineages[(uid, i)] for uid in st.keyed_uids},
                    self.wm_states.get((st.id, i), {}),
                    op_lineages={
                        n.uid: self.op_lineages[(n.uid, i)]
                        for n in st.nodes.values()
                        if (n.uid, i) in self.op_lineages
                    },
                )
                for i in range(st.parallelism)
            ]
            especs[st.id] = EpochSpec(
                epoch,
                self.attempt,
                pending.checkpoint_id if pending else None,
                full,
                subs,
                processing_time_ms=started_ms,
                end_of_input=finished.get(st.id, False),
                timestamp_ms=pending.trigger_ms if pending else started_ms,
                notifications=notes,
                notify_only=notify_only,
            )
        try:
            acks = self.runner.run_epoch(self.plan, especs)
        except BaseException:
            if pending is not None:
                self.coordinator.abort(pending, "the epoch carrying its barrier failed")
                self.notifications.append(("aborted", pending.checkpoint_id))
            raise
        del self.notifications[: len(notes)]  # delivered
        self._absorb(epoch, acks, pending, notify_only)
        if finished and all(finished.values()):
            self.end_of_input_sent = True
        for cid in self._deferred_discard:
            if not (full or pending is not None):
                break
            self.storage.discard_checkpoint(cid)
        if full or pending is not None:
            self._deferred_discard = []
        self.epoch = epoch
        self.stats["epochs"] += 1
        if full or pending is not None:
            self.last_full_epoch = epoch
        if pending is not None:
            self._complete_checkpoint(pending, epoch, acks, started_ms)
        elif not self.checkpointing:
            self._commit_all(epoch)
        return sum(
            a["counts"].get(st.source_uid, 0)
            for st in self.plan.sources
            for a in acks
            if a["stage"] == st.id
        )

    def _absorb(
        self, epoch: int, acks: list[dict[str, Any]], pending: Any, notify_only: bool = False
    ) -> None:
        by = {(a["stage"], a["subtask"]): a for a in acks}
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
                uid = _source_uid(st)
                self.source_states[uid] = st.source.apply_progress(
                    self.source_states[uid], [a["source"] for a in sacks]
                )
            for a in sacks:
                i = a["subtask"]
                self.stats["cache_hits" if a["cache_hit"] else "cache_misses"] += 1
                for path, n in a.get("state_restores", {}).items():
                    k = f"state_restores_{path}"
                    self.stats[k] = self.stats.get(k, 0) + n
                self.workers.setdefault(f"{st.id}/{i}", set()).add(a.get("worker", "?"))
                for k, v in a.get("timings", {}).items():
                    self.timings[k] = self.timings.get(k, 0.0) + v
                for uid, n in a["counts"].items():
                    self.counts[uid] = self.counts.get(uid, 0) + n
                self.wm_states[(st.id, i)] = a.get("watermarks") or {}
                for uid, (kind, h) in a["versions"].items():
                    lin = self.lineages[(uid, i)]
                    token = tuple(a["token"])
                    if kind == "full":
                        superseded.extend(s for x in lin.base for s in x.stream_handles())
                        superseded.extend(lin.deltas)
                        self.lineages[(uid, i)] = Lineage(token, (h,), ())
                    elif kind == "delta":
                        self.lineages[(uid, i)] = Lineage(token, lin.base, (*lin.deltas, h))
                    else:
                        self.lineages[(uid, i)] = Lineage(token, lin.base, lin.deltas)
                for uid, (kind, h) in a.get("op_versions", {}).items():
                    old = self.op_lineages.get((uid, i))
                    token = tuple(a["token"])
                    if kind == "full":
                        if old is not None and old.handle is not None:
                            superseded.append(old.handle)
                        self.op_lineages[(uid, i)] = OperatorStateLineage(token, h)
                    elif old is not None:
                        self.op_lineages[(uid, i)] = OperatorStateLineage(
                            token, old.handle, old.redistribute
                        )
            for n in st.nodes.values():
                if n.uid in self.committers:
                    self.committers[n.uid].prepare(epoch, [a["sinks"].get(n.uid) for a in sacks])
        if superseded:
            self.storage.discard_epoch_state(superseded)

    def _complete_checkpoint(
        self, pending: Any, epoch: int, acks: list[dict[str, Any]], started_ms: int
    ) -> None:
        if self.coordinator.is_expired(pending, _now_ms()):
            # The subtasks' lineages already point at this checkpoint's files: keep them until
            # the next epoch has written full versions, then delete them.
            self.coordinator.abort(pending, "checkpoint timeout expired", discard=False)
            self.notifications.append(("aborted", pending.checkpoint_id))
            self._deferred_discard.append(pending.checkpoint_id)
            self.last_full_epoch = -(10**9)
            self.stats["checkpoints_failed"] += 1
            if self.coordinator.should_fail_job():
                raise CheckpointError(
                    "more checkpoints failed than the tolerable failure number allows"
                )
            return
        per_op: dict[str, dict[int, SubtaskState]] = {}
        for a in acks:
            op_handles = a.get("op_checkpoint", {})
            for uid in {*a["checkpoint"], *op_handles}:
                kh = a["checkpoint"].get(uid)
                oh = op_handles.get(uid)
                per_op.setdefault(uid, {})[a["subtask"]] = SubtaskState(
                    keyed=(kh,) if kh is not None else (), operator=(oh,) if oh is not None else ()
                )
        par = {uid: p for uid, (p, _) in self.plan.operator_parallelism().items() if uid in per_op}
        maxp = {
            uid: mp for uid, (_, mp) in self.plan.operator_parallelism().items() if uid in per_op
        }
        md = CheckpointMetadata(
            job_id=self.job_id,
            checkpoint_id=pending.checkpoint_id,
            timestamp_ms=pending.trigger_ms,
            operator_states=build_operator_states(per_op, par, maxp),
            source_offsets={uid: _jsonable(s) for uid, s in self.source_states.items()},
            sink_state={uid: c.snapshot(epoch) for uid, c in self.committers.items()},
            properties={
                "epoch": epoch,
                "attempt": self.attempt,
                "job_name": self.job_name,
                "watermarks": self._watermark_property(),
            },
        )
        self.coordinator.complete(pending, md)
        self.notifications.append(("complete", pending.checkpoint_id))
        self.stats["checkpoints"] += 1
        self._commit_all(epoch)

    def _watermark_property(self) -> dict[str, list[Any]]:
        """node uid -> per-subtask watermark state (JSON), for the checkpoint's properties."""
        out: dict[str, list[Any]] = {}
        for st in self.plan.stages:
            for n in st.nodes.values():
                per = [self.wm_states.get((st.id, i), {}).get(n.uid) for i in range(st.parallelism)]
                if any(per):
                    out[n.uid] = per
        return out

    def _commit_all(self, epoch: int) -> None:
        for c in self.committers.values():
            c.commit(epoch)

    def _cleanup_epoch_versions(self) -> None:
        handles = [
            h
            for lin in self.lineages.values()
            for h in (*[s for b in lin.base for s in b.stream_handles()], *lin.deltas)
        ]
        handles += [ol.handle for ol in self.op_lineages.values() if ol.handle is not None]
        try:
            self.storage.discard_epoch_state(handles)
        except Exception as e:  # noqa: BLE001 - cleanup is best effort
            log.debug("epoch version cleanup failed: %s", e)


def _source_uid(st: Stage) -> str:
    """The uid of source stage ``st`` (build_plan sets it on every source stage)."""
    assert st.source_uid is not None
    return st.source_uid


def _strip_factories(st: Any) -> Any:
    """A copy of the stage without operator factories (they travel pickled separately)."""
    import copy

    s = copy.copy(st)
    s.nodes = {tid: copy.copy(n) for tid, n in st.nodes.items()}
    for n in s.nodes.values():
        if n.factory is not None:
            n.factory = True  # marker: "has an operator"; the worker unpickles factories[tid]
        n.committer_factory = None
    return s


def _jsonable(state: Any) -> Any:
    import json

    json.dumps(state)  # sources promise JSON-compatible state: fail loudly here, not at restore
    return state


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return f"{type(e).__name__}: {s[-1] if s else ''}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def conf_int(conf: Any, key: str, default: int) -> int:
    raw = conf.get_string(key, None) if conf is not None else None
    if raw is None:
        return default
    try:
        return int(str(raw).strip())
    except ValueError as e:
        raise ConfigurationError(f"{key} must be an integer, got {raw!r}") from e
