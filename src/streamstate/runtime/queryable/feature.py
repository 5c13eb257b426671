"""Queryable state as a feature of a running job (``runtime/features.py``): its one seam.

Driver side, :class:`QueryableFeature` keeps the job's :class:`~.service.QueryableStateService`
current: an epoch completed publishes the job's new state versions (``as_of="epoch"``), a
checkpoint completed or restored publishes that checkpoint (``as_of="checkpoint"``), a
failure retracts the epoch snapshot until the restored job publishes again, and every
checkpoint keeps the names registered as queryable (its property ``"queryable"``), so a
job restored from it answers before its first epoch.

Worker side, :func:`ack_part` reports the states a subtask's keyed backends registered,
with their ``set_queryable`` names (as Flink's tasks register their KvStates), and, when
the job serves queries on the executors (``queryable-state.serve-on-executors``), the
address of this machine's query host (``query_host.py``), started for a subtask that has
a queryable state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamstate.runtime.features import FeatureRegistration
from streamstate.runtime.protocol import SubtaskAck
from streamstate.runtime.queryable.process import PROCESS
from streamstate.runtime.queryable.service import (
    QueryableAck,
    QueryableStateService,
    checkpoint_lineages,
    queryable_operators,
)
from streamstate.runtime.state.format.keyed_index import searchable_keys
from streamstate.runtime.state.registry import registration_of

if TYPE_CHECKING:
    from streamstate.runtime.checkpoint.metadata import CheckpointMetadata
    from streamstate.runtime.graph import ExecutionPlan, Stage
    from streamstate.runtime.job_state import JobState
    from streamstate.runtime.protocol import StageTaskSpec

__all__ = [
    "NAME",
    "REGISTRATION",
    "QueryableAck",
    "QueryableFeature",
    "QueryableStage",
    "ack_part",
    "keeps_copies",
    "queryable_ack",
]

#: the feature's name: its key in ``StageTaskSpec.features``, ``SubtaskAck.features`` and
#: a checkpoint's properties
NAME = "queryable"


@dataclass(frozen=True)
class QueryableStage:
    """What the workers of a stage with keyed operators know of queryable state."""

    #: run a query host on the executors that serves the stage's keyed state
    #: (``queryable-state.serve-on-executors``; never in BATCH mode)
    serve_on_executors: bool = False


#: the part of an ack without one (a stage without keyed operators)
_NOTHING = QueryableAck()


def queryable_ack(ack: SubtaskAck) -> QueryableAck:
    """``ack``'s part of queryable state."""
    part = ack.features.get(NAME)
    return part if isinstance(part, QueryableAck) else _NOTHING


def ack_part(
    option: QueryableStage,
    spec: StageTaskSpec,
    keyed_backends: Mapping[str, Any],
    executor: str | None,
) -> QueryableAck:
    """The subtask's :class:`QueryableAck` (a ``WorkerFeature``)."""
    states = {uid: b.registered_states() for uid, b in keyed_backends.items()}
    host = None
    start = PROCESS.query_host_starter
    if option.serve_on_executors and start is not None:
        if any(state[2] for per_op in states.values() for state in per_op):
            host = start(spec.job_id, executor)
    return QueryableAck(states, host)


class QueryableFeature:
    """The driver side (a ``JobFeature``): see the module docstring."""

    def __init__(self, job_id: str, plan: Any, settings: Any, stats: dict[str, int]) -> None:
        self.settings = settings
        #: published epoch/checkpoint snapshots, the name registry, lookups
        self.service = QueryableStateService(
            job_id,
            queryable_operators(plan, settings),
            settings.queryable_cache_entries,
            stats,
        )

    def stage_option(self, stage: Stage) -> QueryableStage | None:
        if not any(n.keyed for n in stage.nodes.values()):
            return None
        settings = self.settings
        return QueryableStage(settings.queryable_on_executors and not settings.batch)

    def restored(self, md: CheckpointMetadata, state: JobState) -> None:
        # the restored cut answers queries at once (as of its epoch), until the next epoch
        service = self.service
        epoch, attempt = state.epoch, state.attempt
        service.restore_registrations(md.properties.get(NAME))
        service.publish_epoch(epoch, attempt, state.versions.keyed)
        if not md.is_savepoint:
            lineages = checkpoint_lineages(md, service.operators)
            service.publish_checkpoint(md.checkpoint_id, epoch, attempt, lineages)

    def epoch_completed(
        self, epoch: int, state: JobState, acks: Mapping[tuple[int, int], SubtaskAck]
    ) -> None:
        # published before the superseded files go, so a lookup moves on to files that exist
        parts = {k: queryable_ack(a) for k, a in acks.items()}
        self.service.epoch_folded(epoch, state.attempt, state.versions.keyed, parts)

    def checkpoint_property(self) -> dict[str, list[Any]]:
        return self.service.registrations()

    def checkpoint_completed(self, md: CheckpointMetadata, state: JobState) -> None:
        self.service.checkpoint_completed(md, state)

    def rescaled(self, plan: ExecutionPlan) -> None:
        self.service.operators = queryable_operators(plan, self.settings)

    def failed(self, why: str) -> None:
        self.service.retract_epoch(why)

    def ended(self, why: str) -> None:
        self.service.retract_epoch(why)
        self.service.close()


def keeps_copies(option: QueryableStage, backend: Any) -> bool:
    """Whether lookups keep serving copies of ``backend``'s state (``serving.py``), which
    then follow it onto a new base by its bridge: it has a queryable state, and lookups do
    not search its version files (heap keys of an integer or boolean type: no copy,
    ``search.py``)."""
    searched = (
        not registration_of(backend).native_versions
        and not backend.changelog
        and searchable_keys(backend.key_serializer)
    )
    if searched:
        return False
    return any(qname is not None for _, _, qname, _ in backend.registered_states())


#: the feature's registration (``runtime/features.py`` finds it by module)
REGISTRATION = FeatureRegistration(NAME, QueryableFeature, ack_part, keeps_copies)
