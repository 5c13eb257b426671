"""Every configuration key streamstate knows, checked once when a job starts.

:func:`validate_configuration` checks the value of every known key (type and range) and
raises :class:`~streamstate.errors.ConfigurationError` naming the key, the value and what
is accepted. A key in one of the namespaces streamstate reads (``execution.*``,
``state.*``, ``restart-strategy.*``, ``rest.*``, ``pipeline.*``, ...) that it does not
know is most likely a typo: it is reported with the closest known keys ("did you mean"),
as a warning, or as an error with ``pipeline.strict-config: true``. Flink keys that
streamstate accepts but that have no effect here are reported once as such.
Keys outside those namespaces (``spark.*``, ``python.*``, user keys) are left alone.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from streamstate.common.configuration import parse_duration_ms
from streamstate.datastream import config_options as co
from streamstate.datastream.checkpoint_config import CheckpointConfig
from streamstate.errors import ConfigurationError
from streamstate.runtime.stores.options import (
    FSSPEC_PREFIX,
    S3_ACCESS_KEY,
    S3_ENDPOINT,
    S3_PATH_STYLE_ACCESS,
    S3_REGION,
    S3_SECRET_KEY,
    StorageOptions,
)

__all__ = [
    "IGNORED_FLINK_KEYS",
    "KNOWN_KEYS",
    "OWNED_NAMESPACES",
    "STRICT_CONFIG",
    "register_config_key",
    "validate_configuration",
]

log = logging.getLogger("streamstate")

STRICT_CONFIG = "pipeline.strict-config"

#: key prefixes streamstate reads: an unknown key there is reported
OWNED_NAMESPACES = (
    "execution.",
    "state.",
    "restart-strategy",
    "rest.",
    "pipeline.",
    "parallelism.",
    "queryable-state.",
    "metrics.",
    "s3.",
    "fsspec.",
)

Validator = Callable[[str, str], None]


def _int(minimum: int | None = None) -> Validator:
    def check(key: str, raw: str) -> None:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigurationError(f"{key} must be an integer, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise ConfigurationError(f"{key} must be >= {minimum}, got {value}")

    return check


def _float(low: float | None = None, high: float | None = None) -> Validator:
    def check(key: str, raw: str) -> None:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ConfigurationError(f"{key} must be a number, got {raw!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise ConfigurationError(f"{key} must be in [{low}, {high}], got {value}")

    return check


def _duration(key: str, raw: str) -> None:
    try:
        if parse_duration_ms(raw) < 0:
            raise ConfigurationError("negative")
    except ConfigurationError as e:
        raise ConfigurationError(
            f"{key} must be a duration (ms, or e.g. '10 s', '1 min'), got {raw!r}: {e}"
        ) from None


def _bool(key: str, raw: str) -> None:
    if raw.strip().lower() not in ("true", "false"):
        raise ConfigurationError(f"{key} must be true or false, got {raw!r}")


def _choice(*accepted: str) -> Validator:
    def check(key: str, raw: str) -> None:
        if raw.strip().lower().replace("_", "-") not in {a.lower() for a in accepted}:
            raise ConfigurationError(f"{key} must be one of {', '.join(accepted)}, got {raw!r}")

    return check


def _map(key: str, raw: str) -> None:
    from streamstate.common.execution_config import parse_map

    parse_map(key, raw)


def _any(key: str, raw: str) -> None:
    if not raw.strip():
        raise ConfigurationError(f"{key} is empty")


def _size(key: str, raw: str) -> None:
    text = raw.strip().lower().replace(" ", "")
    digits = text.rstrip("kmgtb")
    if not digits.isdigit():
        raise ConfigurationError(f"{key} must be a size such as 64mb or 1048576, got {raw!r}")


def _parsed_by(parse: Callable[[dict[str, str]], Any]) -> Validator:
    """The value is valid when ``config_options`` parses it (one list of accepted values)."""

    def check(key: str, raw: str) -> None:
        parse({key: raw})

    return check


_STORAGE = _parsed_by(co.checkpoint_storage_from_configuration)
_BACKEND = _parsed_by(co.state_backend_from_configuration)
_RESTART = _parsed_by(co.restart_strategy_from_configuration)


def _checkpoint_option(key: str, raw: str) -> None:
    co.apply_configuration({key: raw}, CheckpointConfig())


#: every key streamstate reads -> how its value is checked
KNOWN_KEYS: dict[str, Validator] = {
    "execution.checkpointing.interval": _duration,
    "execution.checkpointing.mode": _checkpoint_option,
    "execution.checkpointing.timeout": _duration,
    "execution.checkpointing.min-pause": _duration,
    "execution.checkpointing.max-concurrent-checkpoints": _int(1),
    "execution.checkpointing.tolerable-failed-checkpoints": _int(0),
    "execution.checkpointing.externalized-checkpoint-retention": _checkpoint_option,
    "execution.checkpointing.dir": _any,
    "execution.checkpointing.storage": _STORAGE,
    "execution.checkpointing.num-retained": _int(1),
    "execution.state-recovery.path": _any,
    "execution.state-recovery.ignore-unclaimed-state": _bool,
    "execution.state-recovery.allow-duplicate-output": _bool,
    "execution.state-recovery.allow-unsigned-checkpoints": _bool,
    "execution.savepoint.ignore-unclaimed-state": _bool,
    "execution.checkpointing.savepoint-dir": _any,
    "state.savepoints.dir": _any,
    "execution.savepoint.path": _any,
    "execution.epoch.max-records": _int(1),
    "execution.epoch.interval": _duration,
    "execution.epoch.slice-records": _int(1),
    "execution.epoch.full-snapshot-interval": _int(1),
    "execution.epoch.max-epochs": _int(0),
    "execution.epoch.idle-wait-ms": _int(0),
    "execution.epoch.source-function.max-wait-ms": _int(0),
    "execution.epoch.state-dir": _any,
    "execution.runner": _choice("spark", "rdd", "dataframe", "barrier", "local"),
    "execution.runner.barrier.start-timeout": _duration,
    "execution.runner.local.rebuild-instances": _bool,
    "execution.runner.spark.preferred-locations": _bool,
    "execution.runner.spark.subtask-hosts": _bool,
    "execution.runner.spark.subtask-hosts.idle-timeout": _duration,
    "execution.task-failure-logs": _bool,
    "state.backend.type": _BACKEND,
    "state.backend": _BACKEND,
    "state.backend.incremental": _bool,
    "state.changelog.enabled": _bool,
    "state.backend.rocksdb.localdir": _any,
    "state.backend.rocksdb.predefined-options": _any,
    "state.backend.rocksdb.writebuffer.size": _size,
    "state.backend.rocksdb.block.cache-size": _size,
    "state.backend.rocksdb.options": _any,
    "state.checkpoint-storage": _STORAGE,
    "state.checkpoints.dir": _any,
    "state.checkpoints.num-retained": _int(1),
    "state.ttl.time-provider": _any,
    "restart-strategy.type": _RESTART,
    "restart-strategy": _RESTART,
    "restart-strategy.fixed-delay.attempts": _int(0),
    "restart-strategy.fixed-delay.delay": _duration,
    "restart-strategy.failure-rate.max-failures-per-interval": _int(1),
    "restart-strategy.failure-rate.failure-rate-interval": _duration,
    "restart-strategy.failure-rate.delay": _duration,
    "restart-strategy.exponential-delay.initial-backoff": _duration,
    "restart-strategy.exponential-delay.max-backoff": _duration,
    "restart-strategy.exponential-delay.backoff-multiplier": _float(1.0),
    "restart-strategy.exponential-delay.reset-backoff-threshold": _duration,
    "restart-strategy.exponential-delay.jitter-factor": _float(0.0, 1.0),
    "parallelism.default": _int(1),
    "pipeline.max-parallelism": _int(1),
    STRICT_CONFIG: _bool,
    # the driver's REST API and dashboard (streamstate.control)
    "rest.enabled": _bool,
    "rest.port": _int(0),
    "rest.bind-address": _any,
    "rest.address": _any,
    "rest.token": _any,
    "execution.progress": _choice("auto", "live", "lines", "none"),
    # the query server for queryable state (runtime/queryable/)
    "queryable-state.enable": _bool,
    "queryable-state.proxy.ports": _int(0),
    "queryable-state.bind-address": _any,
    "queryable-state.proxy.query-threads": _int(1),
    "queryable-state.cache.max-entries": _int(1),
    "queryable-state.serve-on-executors": _bool,
    "execution.rescale.keep-state-in-place": _bool,
    "execution.runner.spark.quiet": _bool,
    # the stores' endpoint and credentials (runtime/stores/options.py)
    S3_ENDPOINT: _any,
    S3_ACCESS_KEY: _any,
    S3_SECRET_KEY: _any,
    S3_REGION: _any,
    S3_PATH_STYLE_ACCESS: _bool,
    # ExecutionConfig (common/execution_config.py)
    "pipeline.global-job-parameters": _map,
    "pipeline.auto-generate-uids": _bool,
}

#: Flink keys accepted for portability that change nothing here -> why
IGNORED_FLINK_KEYS: dict[str, str] = {
    "execution.buffer-timeout": "there are no network buffers: records move in epochs",
    "execution.checkpointing.unaligned": "checkpoints are always aligned at epoch boundaries",
    "execution.checkpointing.unaligned.enabled": "checkpoints are always aligned",
    "execution.checkpointing.aligned-checkpoint-timeout": "checkpoints are always aligned",
    "execution.checkpointing.force-unaligned": "checkpoints are always aligned",
    "execution.checkpointing.externalized-checkpoint-retention.enabled": "use the retention key",
    "pipeline.name": "the job name is execute()'s argument",
    "pipeline.auto-watermark-interval": "watermarks advance once per epoch",
    "pipeline.object-reuse": "records are Python objects",
    "pipeline.jars": "there is no JVM code to ship",
    "pipeline.classpaths": "there is no JVM code to ship",
    "pipeline.operator-chaining": "operators are always chained where Flink would chain them",
    "state.backend.rocksdb.checkpoint.transfer.thread.num": "transfers are sequential",
    "state.backend.local-recovery": "local recovery is always on for RocksDB",
    "execution.runtime-mode": "use env.set_runtime_mode()",
}


def register_config_key(key: str, validator: Validator | None = None) -> None:
    """Make ``key`` known (a connector's or extension's key); ``validator`` checks its value."""
    KNOWN_KEYS[key] = validator or _any


def validate_configuration(conf: Mapping[str, Any] | Any) -> list[str]:
    """Check every key of ``conf`` (a Configuration or a mapping); returns the warnings given.

    Raises ConfigurationError for a bad value of a known key, and for an unknown key in
    a streamstate namespace when ``pipeline.strict-config`` is true.
    """
    items = conf.to_dict() if hasattr(conf, "to_dict") else dict(conf)
    strict = str(items.get(STRICT_CONFIG, "false")).strip().lower() == "true"
    warnings: list[str] = []
    for key, value in sorted(items.items()):
        raw = "" if value is None else str(value)
        check = KNOWN_KEYS.get(key)
        if check is not None:
            check(key, raw)
            continue
        if key.startswith(FSSPEC_PREFIX):  # fsspec.<protocol>.<option>: any fsspec option
            StorageOptions.from_configuration({key: raw})
            continue
        if not key.startswith(OWNED_NAMESPACES):
            continue
        if key in IGNORED_FLINK_KEYS:
            warnings.append(f"{key} has no effect in streamstate: {IGNORED_FLINK_KEYS[key]}")
            continue
        close = difflib.get_close_matches(key, list(KNOWN_KEYS), n=3, cutoff=0.75)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        message = f"unknown configuration key {key!r}{hint}"
        if strict:
            raise ConfigurationError(
                f"{message} ({STRICT_CONFIG} is true; remove the key or fix its name)"
            )
        warnings.append(message + f" (it is ignored; {STRICT_CONFIG}: true makes this an error)")
    for w in warnings:
        log.warning(w)
    return warnings
