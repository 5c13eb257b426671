"""Flink configuration keys (PyFlink 2.x names, plus the legacy ones) -> streamstate objects.

Every function takes a :class:`~streamstate.common.Configuration` (or any mapping of
string keys) and reads only the keys it documents; absent keys leave things unchanged /
return ``None``. Durations use Flink's syntax (``"10 s"``, ``"1 min"``, ``"500ms"``,
plain ms). Unknown enum values raise :class:`ConfigurationError` listing the accepted ones.

Where two keys mean the same (new and legacy), the PyFlink 2.x key wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from streamstate.common.configuration import Configuration, parse_duration_ms
from streamstate.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from streamstate.datastream.checkpoint_config import (
    CheckpointConfig,
    ExternalizedCheckpointCleanup,
)
from streamstate.datastream.checkpoint_storage import (
    CheckpointStorage,
    FileSystemCheckpointStorage,
    checkpoint_storage_from_name,
)
from streamstate.datastream.checkpointing_mode import CheckpointingMode
from streamstate.datastream.state_backend import (
    EmbeddedRocksDBStateBackend,
    FsStateBackend,
    HashMapStateBackend,
    MemoryStateBackend,
    PredefinedOptions,
    StateBackend,
)
from streamstate.errors import ConfigurationError

__all__ = [
    "CHECKPOINTING_DIR",
    "CHECKPOINTING_INTERVAL",
    "CHECKPOINTING_MODE",
    "CHECKPOINTING_STORAGE",
    "CHECKPOINTING_TIMEOUT",
    "EXTERNALIZED_CHECKPOINT_RETENTION",
    "MAX_CONCURRENT_CHECKPOINTS",
    "MAX_PARALLELISM",
    "MIN_PAUSE",
    "NUM_RETAINED",
    "PARALLELISM",
    "RESTART_STRATEGY_TYPE",
    "ROCKSDB_BLOCK_CACHE_SIZE",
    "ROCKSDB_LOCALDIR",
    "ROCKSDB_PREDEFINED_OPTIONS",
    "ROCKSDB_RAW_OPTIONS",
    "ROCKSDB_WRITE_BUFFER_SIZE",
    "STATE_BACKEND_INCREMENTAL",
    "STATE_BACKEND_TYPE",
    "STATE_RECOVERY_PATH",
    "TOLERABLE_FAILED_CHECKPOINTS",
    "apply_configuration",
    "checkpoint_config_to_configuration",
    "checkpoint_storage_from_configuration",
    "max_parallelism_from_configuration",
    "parallelism_from_configuration",
    "register_state_backend_type",
    "restart_strategy_from_configuration",
    "restart_strategy_to_configuration",
    "state_backend_from_configuration",
    "state_recovery_path_from_configuration",
]

STATE_BACKEND_TYPE = "state.backend.type"
_LEGACY_STATE_BACKEND = "state.backend"
CHECKPOINTING_INTERVAL = "execution.checkpointing.interval"
CHECKPOINTING_MODE = "execution.checkpointing.mode"
CHECKPOINTING_TIMEOUT = "execution.checkpointing.timeout"
MIN_PAUSE = "execution.checkpointing.min-pause"
MAX_CONCURRENT_CHECKPOINTS = "execution.checkpointing.max-concurrent-checkpoints"
TOLERABLE_FAILED_CHECKPOINTS = "execution.checkpointing.tolerable-failed-checkpoints"
EXTERNALIZED_CHECKPOINT_RETENTION = "execution.checkpointing.externalized-checkpoint-retention"
CHECKPOINTING_DIR = "execution.checkpointing.dir"
_LEGACY_CHECKPOINTS_DIR = "state.checkpoints.dir"
CHECKPOINTING_STORAGE = "execution.checkpointing.storage"
_LEGACY_CHECKPOINT_STORAGE = "state.checkpoint-storage"
NUM_RETAINED = "execution.checkpointing.num-retained"
_LEGACY_NUM_RETAINED = "state.checkpoints.num-retained"
RESTART_STRATEGY_TYPE = "restart-strategy.type"
_LEGACY_RESTART_STRATEGY = "restart-strategy"
FIXED_DELAY_ATTEMPTS = "restart-strategy.fixed-delay.attempts"
FIXED_DELAY_DELAY = "restart-strategy.fixed-delay.delay"
FAILURE_RATE_MAX = "restart-strategy.failure-rate.max-failures-per-interval"
FAILURE_RATE_INTERVAL = "restart-strategy.failure-rate.failure-rate-interval"
FAILURE_RATE_DELAY = "restart-strategy.failure-rate.delay"
EXP_INITIAL_BACKOFF = "restart-strategy.exponential-delay.initial-backoff"
EXP_MAX_BACKOFF = "restart-strategy.exponential-delay.max-backoff"
EXP_MULTIPLIER = "restart-strategy.exponential-delay.backoff-multiplier"
EXP_RESET_THRESHOLD = "restart-strategy.exponential-delay.reset-backoff-threshold"
EXP_JITTER = "restart-strategy.exponential-delay.jitter-factor"
PARALLELISM = "parallelism.default"
MAX_PARALLELISM = "pipeline.max-parallelism"
STATE_BACKEND_INCREMENTAL = "state.backend.incremental"
ROCKSDB_LOCALDIR = "state.backend.rocksdb.localdir"
ROCKSDB_PREDEFINED_OPTIONS = "state.backend.rocksdb.predefined-options"
ROCKSDB_WRITE_BUFFER_SIZE = "state.backend.rocksdb.writebuffer.size"
ROCKSDB_BLOCK_CACHE_SIZE = "state.backend.rocksdb.block.cache-size"
ROCKSDB_RAW_OPTIONS = "state.backend.rocksdb.options"
STATE_RECOVERY_PATH = "execution.state-recovery.path"
_LEGACY_STATE_RECOVERY_PATH = "execution.savepoint.path"

ConfLike = Configuration | Mapping[str, Any]


# -- raw access ----------------------------------------------------------------------------------


def _raw(conf: ConfLike, *keys: str) -> tuple[str, str] | None:
    """(key, string value) of the first present key, else None."""
    for key in keys:
        if isinstance(conf, Configuration):
            value = conf.get_string(key, None)
        else:
            value = conf.get(key)
        if value is not None:
            return key, str(value).strip()
    return None


def _int(conf: ConfLike, *keys: str, minimum: int | None = None) -> int | None:
    found = _raw(conf, *keys)
    if found is None:
        return None
    key, raw = found
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{key} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigurationError(f"{key} must be >= {minimum}, got {value}")
    return value


def _float(conf: ConfLike, *keys: str) -> float | None:
    found = _raw(conf, *keys)
    if found is None:
        return None
    key, raw = found
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"{key} must be a number, got {raw!r}") from None


def _duration(conf: ConfLike, *keys: str) -> int | None:
    found = _raw(conf, *keys)
    if found is None:
        return None
    key, raw = found
    try:
        return parse_duration_ms(raw)
    except ConfigurationError as e:
        raise ConfigurationError(f"{key}: {e}") from e


def _choice(
    conf: ConfLike, accepted: Mapping[str, Any], *keys: str, shown: str | None = None
) -> Any:
    """Enum-like value: case-insensitive, '-' and '_' equivalent.

    ``shown`` replaces the list of accepted names in the error (to hide aliases).
    """
    found = _raw(conf, *keys)
    if found is None:
        return None
    key, raw = found
    norm = raw.lower().replace("-", "_")
    for name, value in accepted.items():
        if name.lower().replace("-", "_") == norm:
            return value
    names = shown or ", ".join(sorted(accepted))
    raise ConfigurationError(f"{key}: unknown value {raw!r}; accepted: {names}")


# -- checkpointing ---------------------------------------------------------------------------------

_MODES = {m.name: m for m in CheckpointingMode}
_RETENTIONS = {m.name: m for m in ExternalizedCheckpointCleanup}


def checkpoint_storage_from_configuration(conf: ConfLike) -> CheckpointStorage | None:
    """``execution.checkpointing.storage`` + ``execution.checkpointing.dir`` (legacy
    ``state.checkpoints.dir``). As in Flink, a directory without a storage type means
    ``filesystem``; the legacy ``state.backend.type: filesystem/jobmanager`` is honoured too.
    """
    found = _raw(conf, CHECKPOINTING_DIR, _LEGACY_CHECKPOINTS_DIR)
    directory = found[1] if found else None
    name = _choice(
        conf,
        {"jobmanager": "jobmanager", "filesystem": "filesystem"},
        CHECKPOINTING_STORAGE,
        _LEGACY_CHECKPOINT_STORAGE,
    )
    if name is None:
        backend = _raw(conf, STATE_BACKEND_TYPE, _LEGACY_STATE_BACKEND)
        if backend is not None and backend[1].lower() in ("jobmanager", "filesystem"):
            name = backend[1].lower()
    if name is None:
        return FileSystemCheckpointStorage(directory) if directory else None
    if name == "filesystem" and not directory:
        raise ConfigurationError(
            f"checkpoint storage 'filesystem' needs a directory: set {CHECKPOINTING_DIR}"
        )
    return checkpoint_storage_from_name(name, directory)


def apply_configuration(conf: ConfLike, checkpoint_config: CheckpointConfig) -> None:
    """Set every checkpointing option present in ``conf`` on ``checkpoint_config``."""
    interval = _duration(conf, CHECKPOINTING_INTERVAL)
    if interval is not None and interval > 0:  # Flink: absent or 0 = disabled
        checkpoint_config.set_checkpoint_interval(interval)
    mode = _choice(conf, _MODES, CHECKPOINTING_MODE)
    if mode is not None:
        checkpoint_config.set_checkpointing_mode(mode)
    timeout = _duration(conf, CHECKPOINTING_TIMEOUT)
    if timeout is not None:
        checkpoint_config.set_checkpoint_timeout(timeout)
    pause = _duration(conf, MIN_PAUSE)
    if pause is not None:
        checkpoint_config.set_min_pause_between_checkpoints(pause)
    concurrent = _int(conf, MAX_CONCURRENT_CHECKPOINTS, minimum=1)
    if concurrent is not None:
        checkpoint_config.set_max_concurrent_checkpoints(concurrent)
    tolerable = _int(conf, TOLERABLE_FAILED_CHECKPOINTS, minimum=0)
    if tolerable is not None:
        checkpoint_config.set_tolerable_checkpoint_failure_number(tolerable)
    retention = _choice(conf, _RETENTIONS, EXTERNALIZED_CHECKPOINT_RETENTION)
    if retention is not None:
        checkpoint_config.set_externalized_checkpoint_cleanup(retention)
    retained = _int(conf, NUM_RETAINED, _LEGACY_NUM_RETAINED, minimum=1)
    if retained is not None:
        checkpoint_config.set_num_retained_checkpoints(retained)
    storage = checkpoint_storage_from_configuration(conf)
    if storage is not None:
        checkpoint_config.set_checkpoint_storage(storage)


def checkpoint_config_to_configuration(
    checkpoint_config: CheckpointConfig, conf: Configuration | None = None
) -> Configuration:
    """Write ``checkpoint_config`` as PyFlink 2.x keys (inverse of :func:`apply_configuration`)."""
    conf = Configuration() if conf is None else conf
    cc = checkpoint_config
    if cc.is_checkpointing_enabled():
        conf.set_string(CHECKPOINTING_INTERVAL, f"{cc.get_checkpoint_interval()} ms")
    conf.set_string(CHECKPOINTING_MODE, cc.get_checkpointing_mode().name)
    conf.set_string(CHECKPOINTING_TIMEOUT, f"{cc.get_checkpoint_timeout()} ms")
    conf.set_string(MIN_PAUSE, f"{cc.get_min_pause_between_checkpoints()} ms")
    conf.set_string(MAX_CONCURRENT_CHECKPOINTS, str(cc.get_max_concurrent_checkpoints()))
    conf.set_string(TOLERABLE_FAILED_CHECKPOINTS, str(cc.get_tolerable_checkpoint_failure_number()))
    cleanup = cc.get_externalized_checkpoint_cleanup()
    if cleanup is not None:
        conf.set_string(EXTERNALIZED_CHECKPOINT_RETENTION, cleanup.name)
    conf.set_string(NUM_RETAINED, str(cc.get_num_retained_checkpoints()))
    storage = cc.get_checkpoint_storage()
    if storage is not None:
        conf.set_string(CHECKPOINTING_STORAGE, storage.storage_name)
        checkpoint_dir = storage.get_checkpoint_path()
        if checkpoint_dir is not None:
            conf.set_string(CHECKPOINTING_DIR, checkpoint_dir)
    return conf


# -- state backend ---------------------------------------------------------------------------------


def _hashmap(conf: ConfLike) -> StateBackend:
    return HashMapStateBackend()


def _jobmanager(conf: ConfLike) -> StateBackend:
    found = _raw(conf, CHECKPOINTING_DIR, _LEGACY_CHECKPOINTS_DIR)
    return MemoryStateBackend(checkpoint_path=found[1] if found else None)


def _filesystem(conf: ConfLike) -> StateBackend:
    found = _raw(conf, CHECKPOINTING_DIR, _LEGACY_CHECKPOINTS_DIR)
    if found is None:
        raise ConfigurationError(
            f"{STATE_BACKEND_TYPE}: 'filesystem' needs a checkpoint directory: set "
            f"{CHECKPOINTING_DIR}"
        )
    return FsStateBackend(found[1])


_BOOLS = {"true": True, "false": False}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1 << 10,
    "k": 1 << 10,
    "mb": 1 << 20,
    "m": 1 << 20,
    "gb": 1 << 30,
    "g": 1 << 30,
}


def _size(conf: ConfLike, key: str) -> int | None:
    """A memory size: bytes, or with a unit (``64mb``, ``512 kb``, ``1g``)."""
    found = _raw(conf, key)
    if found is None:
        return None
    raw = found[1].lower().replace(" ", "")
    digits = raw.rstrip("kmgb")
    unit = raw[len(digits) :]
    if not digits.isdigit() or unit not in _SIZE_UNITS or int(digits) <= 0:
        raise ConfigurationError(
            f"{key} must be a positive size in bytes or with a unit (e.g. 64mb), got {found[1]!r}"
        )
    return int(digits) * _SIZE_UNITS[unit]


def _rocksdb(conf: ConfLike) -> StateBackend:
    """``state.backend.type: rocksdb`` with the ``state.backend.rocksdb.*`` options."""
    incremental = _choice(conf, _BOOLS, STATE_BACKEND_INCREMENTAL)
    backend = EmbeddedRocksDBStateBackend(incremental)
    local = _raw(conf, ROCKSDB_LOCALDIR)
    if local is not None and local[1]:
        backend.set_db_storage_paths(*[p for p in local[1].replace(";", ",").split(",") if p])
    profile = _choice(conf, PredefinedOptions.__members__, ROCKSDB_PREDEFINED_OPTIONS)
    if profile is not None:
        backend.set_predefined_options(profile)
    backend.set_write_buffer_size(_size(conf, ROCKSDB_WRITE_BUFFER_SIZE))
    backend.set_block_cache_size(_size(conf, ROCKSDB_BLOCK_CACHE_SIZE))
    raw = _raw(conf, ROCKSDB_RAW_OPTIONS)
    if raw is not None:
        try:
            backend.set_options(raw[1])
        except ConfigurationError as e:
            raise ConfigurationError(f"{ROCKSDB_RAW_OPTIONS}: {e}") from e
    return backend


_STATE_BACKEND_TYPES: dict[str, Callable[[ConfLike], StateBackend]] = {
    "rocksdb": _rocksdb,
    "hashmap": _hashmap,
    "jobmanager": _jobmanager,
    "filesystem": _filesystem,
}


def register_state_backend_type(name: str, factory: Callable[[ConfLike], StateBackend]) -> None:
    """Make ``state.backend.type: <name>`` create ``factory(conf)`` (e.g. for rocksdb)."""
    _STATE_BACKEND_TYPES[name.lower()] = factory


def state_backend_from_configuration(conf: ConfLike) -> StateBackend | None:
    """``state.backend.type`` (legacy ``state.backend``): hashmap | rocksdb | jobmanager |
    filesystem.

    ``jobmanager``/``filesystem`` are Flink's legacy names: HashMap working state plus
    in-memory / file system checkpoint storage (the returned legacy backend implies it).
    """
    factory = _choice(conf, _STATE_BACKEND_TYPES, STATE_BACKEND_TYPE, _LEGACY_STATE_BACKEND)
    return None if factory is None else factory(conf)


# -- restart strategy -----------------------------------------------------------------------------

_RESTART_TYPES = {
    "none": "none",
    "off": "none",
    "disable": "none",
    "no-restart": "none",
    "fixed-delay": "fixed-delay",
    "fixeddelay": "fixed-delay",
    "failure-rate": "failure-rate",
    "failurerate": "failure-rate",
    "exponential-delay": "exponential-delay",
    "exponentialdelay": "exponential-delay",
}


def restart_strategy_from_configuration(conf: ConfLike) -> RestartStrategyConfiguration | None:
    """``restart-strategy.type`` and its options (Flink's defaults for absent options:
    fixed-delay 1 attempt / 1 s; failure-rate 1 restart per 1 min / 1 s delay;
    exponential-delay 1 s / 1 min / x1.5 / reset after 1 h / jitter 0.1).

    Returns None when no type is configured.
    """
    kind = _choice(
        conf,
        _RESTART_TYPES,
        RESTART_STRATEGY_TYPE,
        _LEGACY_RESTART_STRATEGY,
        shown="none (or off, disable), fixed-delay, failure-rate, exponential-delay",
    )
    if kind is None:
        return None
    if kind == "none":
        return RestartStrategies.no_restart()
    if kind == "fixed-delay":
        attempts = _int(conf, FIXED_DELAY_ATTEMPTS, minimum=0)
        delay = _duration(conf, FIXED_DELAY_DELAY)
        return RestartStrategies.fixed_delay_restart(
            1 if attempts is None else attempts, 1000 if delay is None else delay
        )
    if kind == "failure-rate":
        rate = _int(conf, FAILURE_RATE_MAX, minimum=1)
        interval = _duration(conf, FAILURE_RATE_INTERVAL)
        delay = _duration(conf, FAILURE_RATE_DELAY)
        return RestartStrategies.failure_rate_restart(
            1 if rate is None else rate,
            60_000 if interval is None else interval,
            1000 if delay is None else delay,
        )
    initial = _duration(conf, EXP_INITIAL_BACKOFF)
    maximum = _duration(conf, EXP_MAX_BACKOFF)
    multiplier = _float(conf, EXP_MULTIPLIER)
    reset = _duration(conf, EXP_RESET_THRESHOLD)
    jitter = _float(conf, EXP_JITTER)
    return RestartStrategies.exponential_delay_restart(
        1000 if initial is None else initial,
        60_000 if maximum is None else maximum,
        1.5 if multiplier is None else multiplier,
        3_600_000 if reset is None else reset,
        0.1 if jitter is None else jitter,
    )


def restart_strategy_to_configuration(
    config: RestartStrategyConfiguration, conf: Configuration | None = None
) -> Configuration:
    """Write ``config`` as ``restart-strategy.*`` keys (fallback writes nothing)."""
    conf = Configuration() if conf is None else conf
    if isinstance(config, RestartStrategies.NoRestartStrategyConfiguration):
        conf.set_string(RESTART_STRATEGY_TYPE, "none")
    elif isinstance(config, RestartStrategies.FixedDelayRestartStrategyConfiguration):
        conf.set_string(RESTART_STRATEGY_TYPE, "fixed-delay")
        conf.set_string(FIXED_DELAY_ATTEMPTS, str(config.restart_attempts))
        conf.set_string(FIXED_DELAY_DELAY, f"{config.delay_between_attempts_interval_ms} ms")
    elif isinstance(config, RestartStrategies.FailureRateRestartStrategyConfiguration):
        conf.set_string(RESTART_STRATEGY_TYPE, "failure-rate")
        conf.set_string(FAILURE_RATE_MAX, str(config.max_failure_rate))
        conf.set_string(FAILURE_RATE_INTERVAL, f"{config.failure_interval_ms} ms")
        conf.set_string(FAILURE_RATE_DELAY, f"{config.delay_between_attempts_interval_ms} ms")
    elif isinstance(config, RestartStrategies.ExponentialDelayRestartStrategyConfiguration):
        conf.set_string(RESTART_STRATEGY_TYPE, "exponential-delay")
        conf.set_string(EXP_INITIAL_BACKOFF, f"{config.initial_backoff_ms} ms")
        conf.set_string(EXP_MAX_BACKOFF, f"{config.max_backoff_ms} ms")
        conf.set_string(EXP_MULTIPLIER, str(config.backoff_multiplier))
        conf.set_string(EXP_RESET_THRESHOLD, f"{config.reset_backoff_threshold_ms} ms")
        conf.set_string(EXP_JITTER, str(config.jitter_factor))
    return conf


# -- parallelism / recovery -------------------------------------------------------------------------


def parallelism_from_configuration(conf: ConfLike) -> int | None:
    """``parallelism.default`` (>= 1), or None."""
    return _int(conf, PARALLELISM, minimum=1)


def max_parallelism_from_configuration(conf: ConfLike) -> int | None:
    """``pipeline.max-parallelism``; None when absent or -1 (derive from the parallelism)."""
    value = _int(conf, MAX_PARALLELISM, minimum=-1)
    if value is None or value == -1:
        return None
    if value == 0:
        raise ConfigurationError(f"{MAX_PARALLELISM} must be -1 (auto) or >= 1, got 0")
    return value


def state_recovery_path_from_configuration(conf: ConfLike) -> str | None:
    """``execution.state-recovery.path`` (legacy ``execution.savepoint.path``), or None."""
    found = _raw(conf, STATE_RECOVERY_PATH, _LEGACY_STATE_RECOVERY_PATH)
    return found[1] if found and found[1] else None
