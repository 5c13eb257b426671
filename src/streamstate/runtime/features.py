"""Optional features of a running job, plugged in at one seam.

A feature follows a job without the core (the epoch loop, the executor, the worker step,
the protocol) knowing what it does. On the driver, each job gets one :class:`JobFeature`
per registered feature, told when the job restored a checkpoint, completed an epoch or a
checkpoint, failed, was rescaled and ended; it may keep a JSON value in every
checkpoint's properties and give the workers of a stage a value of its own
(``StageTaskSpec.features``). On a worker, the feature's :class:`WorkerFeature` adds its
part to the subtask's ack (``SubtaskAck.features``), which the driver side reads back,
and a feature that keeps copies of a keyed backend's state asks for its full versions to
carry the changes since the previous one (``bridged``, ``versions.py``).

Features are registered by name in :data:`FEATURES` (the module that registers it,
imported on first use, as the keyed backends' registry does); the core imports none of
them, which an import-linter contract checks. The one feature is queryable state
(``runtime/queryable/feature.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from streamstate.runtime.checkpoint.metadata import CheckpointMetadata
    from streamstate.runtime.graph import ExecutionPlan, Stage
    from streamstate.runtime.job_state import JobState
    from streamstate.runtime.protocol import StageTaskSpec, SubtaskAck

__all__ = [
    "FEATURES",
    "FeatureRegistration",
    "JobFeature",
    "JobFeatures",
    "WorkerFeature",
    "ack_parts",
    "bridged",
    "feature",
]

#: name -> the module whose ``REGISTRATION`` is the feature's :class:`FeatureRegistration`
FEATURES: Mapping[str, str] = {"queryable": "streamstate.runtime.queryable.feature"}


class JobFeature(Protocol):
    """The driver side of a feature, one per job. Called on the driver loop's thread."""

    def stage_option(self, stage: Stage) -> Any:
        """What the workers of ``stage`` need of the feature (``None``: nothing)."""

    def restored(self, md: CheckpointMetadata, state: JobState) -> None:
        """The job restored checkpoint ``md`` (at start, after a failure, to rescale);
        ``state`` is at its epoch."""

    def epoch_completed(
        self, epoch: int, state: JobState, acks: Mapping[tuple[int, int], SubtaskAck]
    ) -> None:
        """Epoch ``epoch``'s ``acks`` (by (stage, subtask)) are folded into ``state``;
        called before the state versions it superseded are deleted."""

    def checkpoint_property(self) -> Any:
        """A JSON value kept in every checkpoint's properties under the feature's name
        (``None``: nothing)."""

    def checkpoint_completed(self, md: CheckpointMetadata, state: JobState) -> None:
        """Checkpoint ``md`` (not a savepoint) completed."""

    def rescaled(self, plan: ExecutionPlan) -> None:
        """The job runs ``plan`` at new parallelisms from now on (a restore follows)."""

    def failed(self, why: str) -> None:
        """An epoch failed; the job restarts from a checkpoint (``why``: for readers)."""

    def ended(self, why: str) -> None:
        """The job ended, however; release everything."""


class WorkerFeature(Protocol):
    """The worker side of a feature: its part of a subtask's ack."""

    def __call__(
        self,
        option: Any,
        spec: StageTaskSpec,
        keyed_backends: Mapping[str, Any],
        executor: str | None,
    ) -> Any:
        """The feature's part of the ack of a subtask of ``spec``'s stage (``option``:
        the driver's ``stage_option`` for it; ``keyed_backends``: operator uid -> its
        keyed backend; ``executor``: the Spark executor running it, None where unknown)."""


@dataclass(frozen=True)
class FeatureRegistration:
    """A feature: how the driver makes its :class:`JobFeature` for a job, and its worker
    side."""

    name: str
    #: ``(job id, plan, settings, the job's metric counters) -> JobFeature``
    for_job: Callable[[str, Any, Any, dict[str, int]], JobFeature]
    ack_part: WorkerFeature
    #: ``(stage option, keyed backend) -> bool``: the feature keeps copies of the backend's
    #: state that follow it onto a new base by its bridge (``Lineage.bridge``)
    keeps_copies: Callable[[Any, Any], bool] | None = None


def feature(name: str) -> FeatureRegistration:
    """The registration of feature ``name`` (its module imported on first use)."""
    registration = importlib.import_module(FEATURES[name]).REGISTRATION
    assert isinstance(registration, FeatureRegistration) and registration.name == name
    return registration


class JobFeatures:
    """Every feature of one job (driver side); the executor and the epoch loop call these
    and nothing else of a feature."""

    def __init__(self, job_id: str, plan: Any, settings: Any, stats: dict[str, int]) -> None:
        self.by_name: dict[str, JobFeature] = {
            name: feature(name).for_job(job_id, plan, settings, stats) for name in FEATURES
        }

    def __iter__(self) -> Iterator[JobFeature]:
        return iter(self.by_name.values())

    def stage_options(self, stage: Stage) -> dict[str, Any]:
        """``StageTaskSpec.features`` of ``stage``: the features its workers take part in."""
        options = ((n, f.stage_option(stage)) for n, f in self.by_name.items())
        return {n: o for n, o in options if o is not None}

    def checkpoint_properties(self) -> dict[str, Any]:
        """What the features keep in a checkpoint's properties, by feature name."""
        values = ((n, f.checkpoint_property()) for n, f in self.by_name.items())
        return {n: v for n, v in values if v is not None}

    def restored(self, md: CheckpointMetadata, state: JobState) -> None:
        for f in self:
            f.restored(md, state)

    def epoch_completed(
        self, epoch: int, state: JobState, acks: Mapping[tuple[int, int], SubtaskAck]
    ) -> None:
        for f in self:
            f.epoch_completed(epoch, state, acks)

    def checkpoint_completed(self, md: CheckpointMetadata, state: JobState) -> None:
        for f in self:
            f.checkpoint_completed(md, state)

    def rescaled(self, plan: ExecutionPlan) -> None:
        for f in self:
            f.rescaled(plan)

    def failed(self, why: str) -> None:
        for f in self:
            f.failed(why)

    def ended(self, why: str) -> None:
        for f in self:
            f.ended(why)


def ack_parts(
    spec: StageTaskSpec, keyed_backends: Mapping[str, Any], executor: str | None
) -> dict[str, Any]:
    """``SubtaskAck.features`` of a subtask of ``spec``'s stage: each feature the stage
    takes part in (``spec.features``) adds its part."""
    return {
        name: feature(name).ack_part(option, spec, keyed_backends, executor)
        for name, option in spec.features.items()
    }


def bridged(spec: StageTaskSpec) -> Callable[[Any], bool]:
    """Whether a keyed backend of ``spec``'s stage writes its bridge with a full version:
    some feature of the stage keeps copies of its state."""
    asks = []
    for name, option in spec.features.items():
        keeps = feature(name).keeps_copies
        if keeps is not None:
            asks.append((keeps, option))
    return lambda backend: any(keeps(option, backend) for keeps, option in asks)
