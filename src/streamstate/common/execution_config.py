"""``ExecutionConfig``, as ``pyflink.common.execution_config``.

The per-job execution settings ``env.get_config()`` returns. The environment keeps its
parallelism and max parallelism here, so ``env.get_config().set_parallelism(4)`` and
``env.set_parallelism(4)`` are the same call. The global job parameters reach every
function through ``RuntimeContext.get_job_parameter``; ``disable_auto_generated_uids()``
makes ``execute()`` refuse an operator without ``.uid(...)``, as Flink does. The
watermark interval, the serializer and JVM switches (Kryo, Avro, POJO types, closure cleaner, object reuse,
latency tracking, task cancellation) are kept and read back but change nothing here;
``docs/pyflink-compat.md`` says so for each.
"""

from __future__ import annotations

from typing import Any

from streamstate.common.time import to_millis
from streamstate.errors import ConfigurationError

__all__ = ["ExecutionConfig"]

#: PyFlink's default auto-watermark interval (ms)
DEFAULT_AUTO_WATERMARK_INTERVAL = 200
GLOBAL_JOB_PARAMETERS = "pipeline.global-job-parameters"
AUTO_GENERATE_UIDS = "pipeline.auto-generate-uids"
OBJECT_REUSE = "pipeline.object-reuse"
AUTO_WATERMARK_INTERVAL = "pipeline.auto-watermark-interval"

#: Flink's upper bound of the max parallelism (runtime/keygroups.py has the same)
UPPER_BOUND_MAX_PARALLELISM = 1 << 15


class ExecutionConfig:
    """Execution settings of a job (PyFlink's ``ExecutionConfig``)."""

    PARALLELISM_DEFAULT = -1
    PARALLELISM_UNKNOWN = -2

    def __init__(self) -> None:
        self._params: dict[str, str] = {}
        self._parallelism: int | None = None
        self._max_parallelism: int | None = None
        self._auto_watermark_interval = DEFAULT_AUTO_WATERMARK_INTERVAL
        self._latency_tracking_interval = -1
        self._task_cancellation_interval = 30_000
        self._task_cancellation_timeout = 180_000
        self._flags: dict[str, bool] = {
            "auto_generated_uids": True,
            "closure_cleaner": True,
            "force_avro": False,
            "force_kryo": False,
            "generic_types": True,
            "object_reuse": False,
            "snapshot_compression": False,
        }

    # -- parallelism (the environment's) -------------------------------------------
    def set_parallelism(self, parallelism: int) -> ExecutionConfig:
        if parallelism == self.PARALLELISM_DEFAULT:
            self._parallelism = None
            return self
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
            raise ConfigurationError(f"parallelism must be a positive int, got {parallelism!r}")
        self._parallelism = parallelism
        return self

    def get_parallelism(self) -> int:
        """The parallelism set, or ``PARALLELISM_DEFAULT`` (-1) when none was."""
        return self.PARALLELISM_DEFAULT if self._parallelism is None else self._parallelism

    def set_max_parallelism(self, max_parallelism: int) -> ExecutionConfig:
        if not isinstance(max_parallelism, int) or not (
            1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM
        ):
            raise ConfigurationError(
                f"max parallelism must be in [1, {UPPER_BOUND_MAX_PARALLELISM}], "
                f"got {max_parallelism!r}"
            )
        self._max_parallelism = max_parallelism
        return self

    def get_max_parallelism(self) -> int:
        """The max parallelism set, or ``PARALLELISM_DEFAULT`` (-1) when none was."""
        return self.PARALLELISM_DEFAULT if self._max_parallelism is None else self._max_parallelism

    # -- global job parameters -----------------------------------------------------
    def set_global_job_parameters(
        self, global_job_parameters_dict: dict[str, Any]
    ) -> ExecutionConfig:
        """Parameters every function reads with ``RuntimeContext.get_job_parameter(key,
        default)`` (keys and values as strings, as in PyFlink)."""
        self._params = {str(k): str(v) for k, v in global_job_parameters_dict.items()}
        return self

    def get_global_job_parameters(self) -> dict[str, str]:
        return dict(self._params)

    # -- watermarks ----------------------------------------------------------------
    def set_auto_watermark_interval(self, interval: Any) -> ExecutionConfig:
        """The period of periodic watermark generation in Flink (ms or a duration). Kept
        and read back (also as ``pipeline.auto-watermark-interval``); here watermarks
        advance once per epoch, so the epoch is the period."""
        ms = to_millis(interval)
        if ms < 0:
            raise ConfigurationError(f"auto-watermark interval must be >= 0, got {interval!r}")
        self._auto_watermark_interval = ms
        return self

    def get_auto_watermark_interval(self) -> int:
        return self._auto_watermark_interval

    def set_latency_tracking_interval(self, interval: Any) -> ExecutionConfig:
        self._latency_tracking_interval = to_millis(interval)
        return self

    def get_latency_tracking_interval(self) -> int:
        return self._latency_tracking_interval

    # -- tasks -----------------------------------------------------------------------
    def set_task_cancellation_interval(self, interval: Any) -> ExecutionConfig:
        self._task_cancellation_interval = to_millis(interval)
        return self

    def get_task_cancellation_interval(self) -> int:
        return self._task_cancellation_interval

    def set_task_cancellation_timeout(self, timeout: Any) -> ExecutionConfig:
        self._task_cancellation_timeout = to_millis(timeout)
        return self

    def get_task_cancellation_timeout(self) -> int:
        return self._task_cancellation_timeout

    # -- uids ------------------------------------------------------------------------
    def enable_auto_generated_uids(self) -> ExecutionConfig:
        self._flags["auto_generated_uids"] = True
        return self

    def disable_auto_generated_uids(self) -> ExecutionConfig:
        """``execute()`` then refuses any operator without an explicit ``.uid(...)``."""
        self._flags["auto_generated_uids"] = False
        return self

    def has_auto_generated_uids_enabled(self) -> bool:
        return self._flags["auto_generated_uids"]

    # -- switches kept for API compatibility (no effect here) -----------------------
    def enable_closure_cleaner(self) -> ExecutionConfig:
        return self._set("closure_cleaner", True)

    def disable_closure_cleaner(self) -> ExecutionConfig:
        return self._set("closure_cleaner", False)

    def is_closure_cleaner_enabled(self) -> bool:
        return self._flags["closure_cleaner"]

    def enable_generic_types(self) -> ExecutionConfig:
        return self._set("generic_types", True)

    def disable_generic_types(self) -> ExecutionConfig:
        return self._set("generic_types", False)

    def has_generic_types_disabled(self) -> bool:
        return not self._flags["generic_types"]

    def enable_force_kryo(self) -> ExecutionConfig:
        return self._set("force_kryo", True)

    def disable_force_kryo(self) -> ExecutionConfig:
        return self._set("force_kryo", False)

    def is_force_kryo_enabled(self) -> bool:
        return self._flags["force_kryo"]

    def enable_force_avro(self) -> ExecutionConfig:
        return self._set("force_avro", True)

    def disable_force_avro(self) -> ExecutionConfig:
        return self._set("force_avro", False)

    def is_force_avro_enabled(self) -> bool:
        return self._flags["force_avro"]

    def enable_object_reuse(self) -> ExecutionConfig:
        return self._set("object_reuse", True)

    def disable_object_reuse(self) -> ExecutionConfig:
        return self._set("object_reuse", False)

    def is_object_reuse_enabled(self) -> bool:
        return self._flags["object_reuse"]

    def set_use_snapshot_compression(self, use_snapshot_compression: bool) -> ExecutionConfig:
        return self._set("snapshot_compression", bool(use_snapshot_compression))

    def is_use_snapshot_compression(self) -> bool:
        return self._flags["snapshot_compression"]

    def get_registered_kryo_types(self) -> list[str]:
        """Always empty: Python values are pickled or serialized by their type info."""
        return []

    def get_registered_pojo_types(self) -> list[str]:
        """Always empty: there are no Java POJOs."""
        return []

    def get_default_kryo_serializer_classes(self) -> dict[str, str]:
        """Always empty: there is no Kryo."""
        return {}

    def apply_configuration(self, conf: Any) -> None:
        """Flink's keys behind these settings: ``pipeline.global-job-parameters``
        (``k1:v1,k2:v2``), ``pipeline.auto-generate-uids``, ``pipeline.object-reuse``,
        ``pipeline.auto-watermark-interval``."""
        params = conf.get_string(GLOBAL_JOB_PARAMETERS, None)
        if params is not None:
            self.set_global_job_parameters(parse_map(GLOBAL_JOB_PARAMETERS, params))
        for key, flag in (
            (AUTO_GENERATE_UIDS, "auto_generated_uids"),
            (OBJECT_REUSE, "object_reuse"),
        ):
            raw = conf.get_string(key, None)
            if raw is not None:
                self._set(flag, _parse_bool(key, raw))
        interval = conf.get_string(AUTO_WATERMARK_INTERVAL, None)
        if interval is not None:
            from streamstate.common.configuration import parse_duration_ms

            self.set_auto_watermark_interval(parse_duration_ms(interval))

    def _set(self, flag: str, value: bool) -> ExecutionConfig:
        self._flags[flag] = value
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExecutionConfig) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return id(self)


def _parse_bool(key: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigurationError(f"{key} must be true or false, got {raw!r}")
    return value == "true"


def parse_map(key: str, raw: str) -> dict[str, str]:
    """Flink's map syntax, ``k1:v1,k2:v2`` (a value may contain ``:``)."""
    out: dict[str, str] = {}
    for part in (p for p in raw.split(",") if p.strip()):
        k, sep, v = part.partition(":")
        if not sep or not k.strip():
            raise ConfigurationError(f"{key} is a map 'k1:v1,k2:v2', got {raw!r}")
        out[k.strip()] = v.strip()
    return out
