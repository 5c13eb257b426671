"""Every runtime setting of one job, parsed once when the job starts.

:class:`JobSettings` is built at ``execute()`` from the environment's Configuration,
CheckpointConfig and state backend; the driver loop, the checkpoint coordinator and
the worker specs read typed fields from it and never look at raw configuration keys
again. A bad value raises :class:`~streamstate.errors.ConfigurationError`
naming the key before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from streamstate.runtime.autoscaler import AutoscalerSettings
from streamstate.runtime.clock import Clock, system_clock_ms
from streamstate.runtime.config_values import conf_bool, conf_duration_ms, conf_int, conf_str
from streamstate.runtime.state.registry import DEFAULT_BACKEND, backend_settings, registration
from streamstate.runtime.state.ttl_clock import ttl_time_provider_from_configuration
from streamstate.runtime.stores.options import StorageOptions

__all__ = [
    "BATCH_EPOCH_RECORDS",
    "DEFAULT_EPOCH_RECORDS",
    "DEFAULT_FULL_VERSION_EVERY",
    "DEFAULT_SLICE_RECORDS",
    "CheckpointSettings",
    "JobSettings",
    "RetentionPolicy",
]

DEFAULT_EPOCH_RECORDS = 100_000
DEFAULT_FULL_VERSION_EVERY = 20
DEFAULT_IDLE_WAIT_MS = 200
#: with ``execution.epoch.interval``: the most records a reader reads (and runs through its
#: chained operators) between two looks at the clock
DEFAULT_SLICE_RECORDS = 1024
#: the source budget of the one epoch of a BATCH job (no limit in practice)
BATCH_EPOCH_RECORDS = 1 << 62


class RetentionPolicy(Enum):
    """Mirror of ExternalizedCheckpointCleanup, so the runtime needn't import the public API."""

    DELETE_ON_CANCELLATION = "DELETE_ON_CANCELLATION"
    RETAIN_ON_CANCELLATION = "RETAIN_ON_CANCELLATION"
    NO_EXTERNALIZED_CHECKPOINTS = "NO_EXTERNALIZED_CHECKPOINTS"


@dataclass(frozen=True)
class CheckpointSettings:
    """The checkpointing part of a job's settings (Flink's CheckpointConfig, as values)."""

    enabled: bool = False
    exactly_once: bool = True
    #: <= 0: no periodic checkpoints
    interval_ms: int = -1
    timeout_ms: int = 10 * 60 * 1000
    min_pause_ms: int = 0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    num_retained: int = 1
    retention: RetentionPolicy = RetentionPolicy.NO_EXTERNALIZED_CHECKPOINTS

    @staticmethod
    def from_checkpoint_config(cc: Any) -> CheckpointSettings:
        """From a :class:`streamstate.datastream.CheckpointConfig` (read through its getters)."""
        return CheckpointSettings(
            enabled=cc.is_checkpointing_enabled(),
            exactly_once=cc.get_checkpointing_mode().name == "EXACTLY_ONCE",
            interval_ms=cc.get_checkpoint_interval(),
            timeout_ms=cc.get_checkpoint_timeout(),
            min_pause_ms=cc.get_min_pause_between_checkpoints(),
            max_concurrent=cc.get_max_concurrent_checkpoints(),
            tolerable_failures=cc.get_tolerable_checkpoint_failure_number(),
            num_retained=cc.get_num_retained_checkpoints(),
            retention=RetentionPolicy(cc.get_effective_externalized_checkpoint_cleanup().name),
        )


@dataclass(frozen=True)
class JobSettings:
    """One job's runtime settings. Immutable; owned by the job's driver."""

    job_name: str = "streamstate job"
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    #: ``execution.epoch.max-records``: records per source subtask and epoch
    epoch_records: int = DEFAULT_EPOCH_RECORDS
    #: ``execution.epoch.full-snapshot-interval``: a full state version at least this often
    full_every: int = DEFAULT_FULL_VERSION_EVERY
    #: ``execution.epoch.max-epochs``: stop after this many epochs (0: no limit)
    max_epochs: int = 0
    #: ``execution.epoch.idle-wait-ms``: pause after an epoch that read nothing
    idle_wait_s: float = DEFAULT_IDLE_WAIT_MS / 1000.0
    #: ``execution.epoch.interval``: a reader subtask stops reading this long after it
    #: started in an epoch (the epoch is cut by time, whichever of records and time comes
    #: first), and epochs that did not fill their budget start at most this often (0: epochs
    #: by records only, back to back)
    epoch_interval_s: float = 0.0
    #: ``execution.epoch.slice-records``: with an interval, the most records read between two
    #: looks at the clock (runtime/sliced_read.py sizes slices to the time left)
    epoch_slice_records: int = DEFAULT_SLICE_RECORDS
    #: ``execution.epoch.state-dir``: where per-epoch versions go with in-memory storage
    state_dir: str | None = None
    #: ``state.ttl.time-provider``
    ttl_time_provider: Any = None
    backend_name: str = DEFAULT_BACKEND
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    job_parameters: Mapping[str, str] = field(default_factory=dict)
    #: the checkpoint or savepoint to start from
    recovery_path: str | None = None
    #: ``execution.state-recovery.ignore-unclaimed-state``: a restore may drop the state of
    #: operators the job no longer has (otherwise it fails, as in Flink)
    allow_non_restored_state: bool = False
    #: ``execution.state-recovery.allow-duplicate-output``: a restore may write output again
    #: that a sink committed after its checkpoint when the replay cannot skip it
    #: (``runtime/replay.py``; otherwise it fails with DuplicateOutputError)
    allow_duplicate_output: bool = False
    #: ``execution.state-recovery.allow-unsigned-checkpoints``: restore a checkpoint whose
    #: ``_metadata`` has no signature (``checkpoint/signing.py``; otherwise refused)
    allow_unsigned_checkpoints: bool = False
    #: ``execution.checkpointing.savepoint-dir``: where savepoints go when no directory is given
    savepoint_dir: str | None = None
    #: the driver's clock (ms); see ``runtime/clock.py``
    clock: Clock = system_clock_ms
    #: ``RuntimeExecutionMode.BATCH``: bounded inputs read in one epoch that ends with the
    #: final watermark, no checkpoints, no state versions, reduce emits final values only
    batch: bool = False
    #: ``queryable-state.cache.max-entries``: serving copies the query server keeps
    queryable_cache_entries: int = 512
    #: ``queryable-state.serve-on-executors``: a query host on each executor machine serves
    #: the state of the subtasks there (runtime/queryable/query_host.py), not the driver
    queryable_on_executors: bool = True
    #: ``s3.*`` / ``fsspec.*``: endpoint and credentials of the stores (runtime/stores/),
    #: installed on the driver and on every executor
    storage_options: StorageOptions = field(default_factory=StorageOptions)
    #: ``execution.rescale.keep-state-in-place``: after a rescale in place, a subtask that
    #: keeps key groups keeps their state where it is and reads only the key groups it
    #: gains (false: every subtask reads its state from the rescale's checkpoint)
    rescale_in_place: bool = True
    #: ``job.autoscaler.*`` (runtime/autoscaler.py; off by default)
    autoscaler: AutoscalerSettings = field(default_factory=AutoscalerSettings)

    @staticmethod
    def from_environment(
        *,
        job_name: str,
        configuration: Any,
        checkpoint_config: Any,
        state_backend: Any = None,
        job_parameters: Mapping[str, str] | None = None,
        recovery_path: str | None = None,
        clock: Clock | None = None,
        batch: bool = False,
    ) -> JobSettings:
        """Parse everything once; raises ConfigurationError naming a bad key.

        ``batch``: Flink's BATCH runtime mode (checkpointing is off, as in Flink, and the
        sources are read in one epoch)."""
        backend_name, backend_options = backend_settings(state_backend)
        records = conf_int(
            configuration, "execution.epoch.max-records", DEFAULT_EPOCH_RECORDS, minimum=1
        )
        return JobSettings(
            job_name=job_name,
            checkpoint=(
                CheckpointSettings()
                if batch
                else CheckpointSettings.from_checkpoint_config(checkpoint_config)
            ),
            epoch_records=BATCH_EPOCH_RECORDS if batch else records,
            full_every=conf_int(
                configuration,
                "execution.epoch.full-snapshot-interval",
                DEFAULT_FULL_VERSION_EVERY,
                minimum=1,
            ),
            max_epochs=conf_int(configuration, "execution.epoch.max-epochs", 0, minimum=0),
            idle_wait_s=conf_int(
                configuration, "execution.epoch.idle-wait-ms", DEFAULT_IDLE_WAIT_MS, minimum=0
            )
            / 1000.0,
            epoch_interval_s=conf_duration_ms(configuration, "execution.epoch.interval", 0)
            / 1000.0,
            epoch_slice_records=conf_int(
                configuration, "execution.epoch.slice-records", DEFAULT_SLICE_RECORDS, minimum=1
            ),
            state_dir=configuration.get_string("execution.epoch.state-dir", None),
            ttl_time_provider=ttl_time_provider_from_configuration(configuration),
            backend_name=backend_name,
            backend_options=_with_changelog(
                backend_name,
                backend_options,
                conf_bool(configuration, "state.changelog.enabled"),
            ),
            job_parameters=dict(job_parameters or {}),
            recovery_path=recovery_path,
            allow_non_restored_state=conf_bool(
                configuration,
                "execution.state-recovery.ignore-unclaimed-state",
                "execution.savepoint.ignore-unclaimed-state",
            ),
            allow_duplicate_output=conf_bool(
                configuration, "execution.state-recovery.allow-duplicate-output"
            ),
            allow_unsigned_checkpoints=conf_bool(
                configuration, "execution.state-recovery.allow-unsigned-checkpoints"
            ),
            savepoint_dir=conf_str(
                configuration, "execution.checkpointing.savepoint-dir", "state.savepoints.dir"
            ),
            clock=clock or system_clock_ms,
            batch=batch,
            queryable_cache_entries=conf_int(
                configuration, "queryable-state.cache.max-entries", 512, minimum=1
            ),
            queryable_on_executors=conf_bool(
                configuration, "queryable-state.serve-on-executors", default=True
            ),
            storage_options=StorageOptions.from_configuration(configuration),
            rescale_in_place=conf_bool(
                configuration, "execution.rescale.keep-state-in-place", default=True
            ),
            autoscaler=AutoscalerSettings.from_configuration(configuration),
        )


def _with_changelog(backend: str, options: dict[str, Any], enabled: bool) -> dict[str, Any]:
    """``state.changelog.enabled`` (Flink: checkpoints that upload only the changes): the
    heap backend's changelog checkpoints; RocksDB's incremental checkpoints are its own."""
    if not enabled:
        return options
    return {**options, **registration(backend).changelog_options}
