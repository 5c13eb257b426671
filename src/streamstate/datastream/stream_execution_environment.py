"""``StreamExecutionEnvironment``, as ``pyflink.datastream.stream_execution_environment``.

The environment collects the job graph and its settings; ``execute()`` hands
them to the epoch executor, which runs the job on Spark (``local[*]`` unless a
SparkSession or a master was given) or, with ``execution.runner: local``, in
this process (used by unit tests; same runtime, no Spark).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from streamstate.common._unsupported import unsupported_attribute
from streamstate.common.configuration import Configuration, parse_duration_ms
from streamstate.common.execution_config import ExecutionConfig
from streamstate.common.job_client import JobClient
from streamstate.common.job_execution_result import JobExecutionResult
from streamstate.common.restart_strategy import RestartStrategyConfiguration
from streamstate.datastream._environment_methods import EnvironmentMethods
from streamstate.datastream._spark_sources import SparkSourcesMixin
from streamstate.datastream.checkpoint_config import CheckpointConfig
from streamstate.datastream.checkpointing_mode import CheckpointingMode
from streamstate.datastream.data_stream import DataStream
from streamstate.datastream.execution_mode import RuntimeExecutionMode
from streamstate.datastream.state_backend import HashMapStateBackend, StateBackend
from streamstate.errors import ConfigurationError
from streamstate.runtime.clock import default_clock
from streamstate.runtime.graph import Transformation, TransformationKind, build_plan

__all__ = ["ExecutionConfig", "JobClient", "StreamExecutionEnvironment"]


def _cli_defaults() -> Configuration:
    """Keys injected by ``streamstate run`` (env var ``STREAMSTATE_CONF``, a JSON object)."""
    raw = os.environ.get("STREAMSTATE_CONF")
    if not raw:
        return Configuration()
    import json

    try:
        values = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"STREAMSTATE_CONF is not a JSON object: {e}") from e
    if not isinstance(values, dict):
        raise ConfigurationError("STREAMSTATE_CONF must be a JSON object of configuration keys")
    return Configuration({str(k): str(v) for k, v in values.items()})


class StreamExecutionEnvironment(SparkSourcesMixin, EnvironmentMethods):
    """Entry point of a job: sources, settings, ``execute``."""

    def __init__(self, configuration: Configuration | None = None, spark: Any = None) -> None:
        self._configuration = _cli_defaults()
        if configuration:
            self._configuration.add_all(Configuration(configuration))
        self._spark = spark
        self._checkpoint_config = CheckpointConfig()
        self._state_backend: StateBackend = HashMapStateBackend()
        self._restart_strategy: RestartStrategyConfiguration | None = None
        self._runtime_mode = RuntimeExecutionMode.STREAMING
        self._execution_config = ExecutionConfig()
        self._sinks: list[Transformation] = []
        self._recovery_path: str | None = None
        self._clock: Any = None
        self._observers: list[Any] = []
        self._apply_configuration(self._configuration)

    @staticmethod
    def get_execution_environment(
        configuration: Configuration | None = None, spark: Any = None
    ) -> StreamExecutionEnvironment:
        """A new environment; ``spark`` is an existing SparkSession to run on (cluster jobs)."""
        return StreamExecutionEnvironment(configuration, spark)

    def _apply_configuration(self, conf: Configuration) -> None:
        from streamstate.datastream import config_options as co

        co.apply_configuration(conf, self._checkpoint_config)
        backend = co.state_backend_from_configuration(conf)
        if backend is not None:
            self.set_state_backend(backend)
        rs = co.restart_strategy_from_configuration(conf)
        if rs is not None:
            self._restart_strategy = rs
        p = co.parallelism_from_configuration(conf)
        if p is not None:
            self.set_parallelism(p)
        mp = co.max_parallelism_from_configuration(conf)
        if mp is not None:
            self.set_max_parallelism(mp)
        self._execution_config.apply_configuration(conf)
        rp = co.state_recovery_path_from_configuration(conf)
        if rp is not None:
            self._recovery_path = rp

    # -- configuration ----------------------------------------------------------
    def get_config(self) -> ExecutionConfig:
        return self._execution_config

    def configure(self, configuration: Configuration) -> StreamExecutionEnvironment:
        """Apply more configuration keys (same keys as ``get_execution_environment``)."""
        self._configuration.add_all(configuration)
        self._apply_configuration(configuration)
        return self

    def get_configuration(self) -> Configuration:
        return self._configuration

    def set_parallelism(self, parallelism: int) -> StreamExecutionEnvironment:
        self._execution_config.set_parallelism(parallelism)
        return self

    def get_parallelism(self) -> int:
        p = self._execution_config.get_parallelism()
        return p if p > 0 else self.get_default_local_parallelism()

    def set_max_parallelism(self, max_parallelism: int) -> StreamExecutionEnvironment:
        self._execution_config.set_max_parallelism(max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        from streamstate.runtime.keygroups import compute_default_max_parallelism

        mp = self._max_parallelism
        return mp or compute_default_max_parallelism(self.get_parallelism())

    @property
    def _max_parallelism(self) -> int | None:
        mp = self._execution_config.get_max_parallelism()
        return mp if mp > 0 else None

    def set_runtime_mode(self, execution_mode: RuntimeExecutionMode) -> StreamExecutionEnvironment:
        self._runtime_mode = execution_mode
        return self

    def enable_checkpointing(
        self, interval: Any, mode: CheckpointingMode | None = None
    ) -> StreamExecutionEnvironment:
        """Checkpoint every ``interval`` (ms, ``timedelta`` or ``Duration``), at the first
        epoch boundary after it elapsed."""
        self._checkpoint_config.set_checkpoint_interval(interval)
        if mode is not None:
            self._checkpoint_config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self._checkpoint_config

    def get_checkpoint_interval(self) -> int:
        return self._checkpoint_config.get_checkpoint_interval()

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self._checkpoint_config.get_checkpointing_mode()

    def set_state_backend(self, state_backend: StateBackend) -> StreamExecutionEnvironment:
        if not isinstance(state_backend, StateBackend):
            raise ConfigurationError(
                f"set_state_backend() takes a StateBackend (e.g. HashMapStateBackend()), "
                f"got {type(state_backend).__name__}"
            )
        self._state_backend = state_backend
        implied = state_backend.get_implied_checkpoint_storage()
        if implied is not None:
            self._checkpoint_config.set_checkpoint_storage(implied)
        return self

    def get_state_backend(self) -> StateBackend:
        return self._state_backend

    def enable_changelog_state_backend(self, enabled: bool) -> StreamExecutionEnvironment:
        """Checkpoints write what changed (``state.changelog.enabled``; docs/checkpoints.md)."""
        self._configuration.set_string("state.changelog.enabled", str(bool(enabled)).lower())
        return self

    def is_changelog_state_backend_enabled(self) -> bool:
        return str(self._configuration.get_string("state.changelog.enabled", "false")) == "true"

    def set_restart_strategy(
        self, restart_strategy_configuration: RestartStrategyConfiguration
    ) -> StreamExecutionEnvironment:
        self._restart_strategy = restart_strategy_configuration
        return self

    def get_restart_strategy(self) -> RestartStrategyConfiguration | None:
        return self._restart_strategy

    def set_restore_path(self, path: str | None) -> StreamExecutionEnvironment:
        """Restore the job from this retained checkpoint or savepoint (``execution.state-recovery.path``)."""
        self._recovery_path = path
        return self

    # -- sources ----------------------------------------------------------------
    def _source(self, source: Any, name: str, type_info: Any = None) -> DataStream:
        # type_info: what print() formats the records by (a source's output is not checked)
        t = Transformation(TransformationKind.SOURCE, name, payload=source, output_type=type_info)
        return DataStream(self, t)

    def from_collection(self, collection: Iterable[Any], type_info: Any = None) -> DataStream:
        """A bounded stream of ``collection``'s elements, in order (parallelism 1, as
        PyFlink's; ``set_parallelism(n)`` on the result reads it with ``n`` subtasks that
        read adjacent stripes, so keyed operators still see each key's elements in order).

        With a ``type_info`` the elements are what PyFlink makes of them: each goes through
        the type's serializer (``Types.FLOAT()`` rounds to 32 bits, ``SQL_TIMESTAMP`` /
        ``SQL_DATE`` / ``BIG_DEC`` / ``INSTANT`` / arrays keep their Python types), tuples
        become :class:`Row` objects for ``Types.ROW``/``ROW_NAMED``, a value that does not
        fit the type is an ``OutputTypeError`` naming it, and ``get_type()`` is the type."""
        from streamstate.connectors.collection import CollectionSource

        elements = _converted(_as_rows(collection, type_info), type_info)
        return self._source(CollectionSource(elements), "Collection Source", type_info)

    def from_sequence(self, start: int, end: int) -> DataStream:
        """The numbers ``start`` to ``end`` inclusive, read in parallel."""
        from streamstate.connectors.sequence import SequenceSource

        return self._source(SequenceSource(start, end), "Sequence Source")

    def from_source(
        self,
        source: Any,
        watermark_strategy: Any = None,
        source_name: str = "Source",
        type_info: Any = None,
    ) -> DataStream:
        """A FLIP-27 style source (``NumberSequenceSource``, ``FileSource``, ...)."""
        rt = getattr(source, "_runtime_source", None)
        if rt is None:
            raise ConfigurationError(
                f"from_source() takes a source such as FileSource or NumberSequenceSource, "
                f"got {type(source).__name__}"
            )
        if type_info is None:  # the source's own type (FileSource: its format's), as PyFlink
            type_info = getattr(source, "_produced_type", lambda: None)()
        ds = self._source(rt(), source_name, type_info)
        spec = getattr(watermark_strategy, "_spec", None)
        if spec is not None and (
            spec.out_of_orderness_ms is not None or spec.timestamp_assigner is not None
        ):
            # no_watermarks() without an assigner adds nothing. Otherwise: Flink generates
            # these watermarks inside the source; a chained assigner right after it is
            # equivalent in the epoch model.
            ds = ds.assign_timestamps_and_watermarks(watermark_strategy)
        return ds

    def add_source(
        self, source_func: Any, source_name: str = "Custom Source", type_info: Any = None
    ) -> DataStream:
        """A ``SourceFunction`` / ``ParallelSourceFunction`` (``run(ctx)``, ``cancel()``),
        or a streamstate ``Source`` (a replayable source with checkpointed positions).

        A SourceFunction's ``run`` is sliced into epochs (see ``SourceFunction``);
        ``execution.epoch.source-function.max-wait-ms`` (default: ``execution.epoch.interval``
        if set, else 500) bounds how long an epoch waits for it to fill
        ``execution.epoch.max-records``.
        """
        from streamstate.connectors.base import Source
        from streamstate.datastream.functions import ParallelSourceFunction, SourceFunction

        if isinstance(source_func, SourceFunction):
            from streamstate.connectors.source_function import (
                DEFAULT_MAX_WAIT_MS,
                SourceFunctionSource,
            )

            wait = _source_function_wait_ms(self._configuration, DEFAULT_MAX_WAIT_MS)
            parallel = isinstance(source_func, ParallelSourceFunction)
            return self._source(
                SourceFunctionSource(source_func, parallel, wait), source_name, type_info
            )
        rt = getattr(source_func, "_runtime_source", None)
        src = rt() if rt is not None else source_func
        if not isinstance(src, Source):
            raise ConfigurationError(
                f"add_source() takes a SourceFunction, a ParallelSourceFunction or a streamstate "
                f"Source, got {type(source_func).__name__}"
            )
        return self._source(src, source_name, type_info)

    # -- execution --------------------------------------------------------------
    def _add_sink(self, t: Transformation) -> None:
        self._sinks.append(t)

    def get_execution_plan(self) -> str:
        return build_plan(self._sinks, self.get_parallelism(), self._max_parallelism).describe()

    def execute(self, job_name: str | None = None) -> JobExecutionResult:
        """Run the job until its bounded sources are exhausted (or it is cancelled).

        Raises :class:`~streamstate.errors.JobExecutionError` when the job
        failed and the restart strategy allowed no further attempt; its cause
        is the last failure.
        """
        executor = self._executor(job_name)
        handle = _attach_control(executor, self._configuration)
        try:
            return executor.run()
        finally:
            if handle is not None:
                handle.detach()

    def execute_async(self, job_name: str | None = None) -> JobClient:
        """Start the job in a background thread; the returned :class:`JobClient` can
        wait for it or cancel it (the job stops at the next epoch boundary)."""
        executor = self._executor(job_name)
        return JobClient(executor, _attach_control(executor, self._configuration))

    def add_job_observer(self, observer: Any) -> StreamExecutionEnvironment:
        """Observe the jobs of this environment (a streamstate extension): a
        ``streamstate.runtime.job_status.JobObserver`` gets status changes, every finished
        epoch's statistics and every failure, on the driver, between epochs."""
        self._observers.append(observer)
        return self

    def set_clock(self, clock: Any) -> StreamExecutionEnvironment:
        """The driver's clock for the jobs of this environment (a zero-argument callable
        returning ms since the Unix epoch; default the wall clock). A streamstate extension
        for tests: checkpoint intervals, timeouts, min pauses and processing time read it
        (``streamstate.testing.TickingClock`` advances a fixed step per reading)."""
        self._clock = clock
        return self

    def _executor(self, job_name: str | None) -> Any:
        return _build_executor(self, job_name)


def _build_executor(env: StreamExecutionEnvironment, job_name: str | None) -> Any:
    """The JobExecutor of the job built so far (its sinks are taken from ``env``)."""
    from streamstate.datastream import config_options
    from streamstate.datastream.checkpoint_storage import JobManagerCheckpointStorage
    from streamstate.datastream.config_validation import validate_configuration
    from streamstate.runtime.executor import JobExecutor
    from streamstate.runtime.restart import create_restart_strategy
    from streamstate.runtime.settings import JobSettings

    validate_configuration(env._configuration)
    sinks, env._sinks = env._sinks, []
    if not env._execution_config.has_auto_generated_uids_enabled():
        _check_explicit_uids(sinks)
    plan = build_plan(sinks, env.get_parallelism(), env._max_parallelism)
    batch = _runs_as_batch(env._runtime_mode, plan)
    settings = JobSettings.from_environment(
        job_name=job_name or "streamstate job",
        configuration=env._configuration,
        checkpoint_config=env._checkpoint_config,
        state_backend=env._state_backend,
        job_parameters=env._execution_config.get_global_job_parameters(),
        recovery_path=env._recovery_path,
        clock=env._clock or default_clock(),
        batch=batch,
    )
    storage = env._checkpoint_config.get_checkpoint_storage() or JobManagerCheckpointStorage()
    restart = create_restart_strategy(
        env._restart_strategy,
        config_options.restart_strategy_from_configuration(env._configuration),
        checkpointing_enabled=settings.checkpoint.enabled,
        clock=settings.clock,
    )
    executor = JobExecutor(
        plan,
        settings,
        storage.create_access(working_dir=settings.state_dir),
        restart,
        _make_runner(env._configuration, env._spark),
        observers=(*env._observers, *_progress(env._configuration, settings.job_name)),
    )
    # a bad --from-checkpoint is one error, before the job's address or status is printed
    try:
        executor.load_restore_point()
    except BaseException:
        executor.parts.storage.release_job()
        raise
    return executor


def _check_explicit_uids(sinks: list[Transformation]) -> None:
    """``disable_auto_generated_uids()``: every operator needs ``.uid(...)`` (Flink's rule)."""
    seen: dict[int, Transformation] = {}
    stack = list(sinks)
    while stack:
        t = stack.pop()
        if t.id not in seen:
            seen[t.id] = t
            stack.extend(t.inputs)
    missing = [
        t.name
        for _, t in sorted(seen.items())
        if t.kind not in _NO_OPERATOR and not (t.uid or t.uid_hash)
    ]
    if missing:
        names = ", ".join(repr(n) for n in missing)
        raise ConfigurationError(
            f"operators {names} have no uid and auto-generated uids are disabled "
            f"(ExecutionConfig.disable_auto_generated_uids()): call .uid('...') on each"
        )


_NO_OPERATOR = (
    TransformationKind.UNION,
    TransformationKind.PARTITION,
    TransformationKind.SIDE_OUTPUT,
)


def _runs_as_batch(mode: RuntimeExecutionMode, plan: Any) -> bool:
    """BATCH, or AUTOMATIC with only bounded sources (Flink's rule for AUTOMATIC)."""
    if mode is RuntimeExecutionMode.AUTOMATIC:
        return all(st.source.bounded for st in plan.sources)
    if mode is RuntimeExecutionMode.BATCH:
        _check_bounded(plan)
        return True
    return False


def _check_bounded(plan: Any) -> None:
    """BATCH mode needs bounded sources (Flink refuses an unbounded one, as here)."""
    for st in plan.sources:
        if not st.source.bounded:
            name = next(iter(st.nodes.values())).name if st.nodes else type(st.source).__name__
            raise ConfigurationError(
                f"source {name!r} is unbounded ({type(st.source).__name__}) and the runtime "
                f"mode is BATCH, which needs bounded inputs: use a bounded source "
                f"(from_collection, from_sequence, a FileSource without monitor_continuously) "
                f"or env.set_runtime_mode(RuntimeExecutionMode.STREAMING)"
            )


REBUILD_INSTANCES = "execution.runner.local.rebuild-instances"


def _progress(configuration: Configuration, job_name: str) -> tuple[Any, ...]:
    """The progress observer of ``execution.progress`` (none, or one)."""
    from streamstate.control.progress import PROGRESS_KEY, progress_observer

    observer = progress_observer(configuration.get_string(PROGRESS_KEY, None), job_name)
    return () if observer is None else (observer,)


def _attach_control(executor: Any, configuration: Configuration) -> Any:
    """Serve the job over the driver's REST API and register it (``rest.*`` keys); the
    handle's ``detach()`` ends that when the job ends. None with ``rest.enabled: false``."""
    from streamstate.control import attach_job

    return attach_job(executor, configuration.to_dict())


def _make_runner(configuration: Configuration, spark: Any) -> Any:
    """The EpochRunner of ``execution.runner``: ``local`` (in-process), or a Spark runner
    by name (``spark``: the session decides; ``rdd``; ``dataframe``: ``spark/runners.py``).

    ``execution.runner.local.rebuild-instances: true`` makes the in-process runner rebuild
    every subtask from its state versions in every epoch, as if each moved to another
    worker (for tests of state versions and restores)."""
    kind = (configuration.get_string("execution.runner", "spark") or "spark").strip().lower()
    if kind == "local":
        from streamstate.runtime.local_runner import LocalEpochRunner

        rebuild = configuration.get_string(REBUILD_INSTANCES, "false")
        return LocalEpochRunner(drop_cache_each_epoch=str(rebuild).strip().lower() == "true")
    from streamstate.spark.runners import make_spark_runner

    return make_spark_runner(kind, spark, configuration)


def _source_function_wait_ms(configuration: Configuration, default: int) -> int:
    """How long an epoch waits for a SourceFunction (ms): ``...source-function.max-wait-ms``,
    else the epoch interval, else ``default``."""
    raw = configuration.get_string("execution.epoch.source-function.max-wait-ms", None)
    if raw is None:
        interval = configuration.get_string("execution.epoch.interval", None)
        return default if interval is None else parse_duration_ms(interval)
    try:
        return int(str(raw).strip())
    except ValueError as e:
        raise ConfigurationError(
            f"execution.epoch.source-function.max-wait-ms must be an integer, got {raw!r}"
        ) from e


def _converted(elements: list[Any], type_info: Any) -> list[Any]:
    """Each element after a round trip through ``type_info``'s serializer (PyFlink's
    conversions; pickled types are left as they are)."""
    from streamstate.common.typeinfo import PickledBytesTypeInfo
    from streamstate.errors import OutputTypeError
    from streamstate.runtime.serializers.registry import serializer_for

    if type_info is None or isinstance(type_info, PickledBytesTypeInfo):
        return elements
    ser = serializer_for(type_info)
    out = []
    for i, e in enumerate(elements):
        try:
            out.append(ser.deserialize(ser.serialize(e)))
        except (TypeError, ValueError, OverflowError, AttributeError, KeyError) as err:
            raise OutputTypeError(
                f"from_collection: element {i} ({e!r}, a {type(e).__name__}) does not fit "
                f"the type {type_info!r}: {err}. Give values of that type, or no type_info"
            ) from err
    return out


def _as_rows(collection: Iterable[Any], type_info: Any) -> list[Any]:
    """The elements, tuples turned into Rows when ``type_info`` is a row type."""
    from streamstate.common.row import Row
    from streamstate.common.typeinfo import RowTypeInfo

    elements = list(collection)
    if not isinstance(type_info, RowTypeInfo):
        return elements
    names = type_info.get_field_names()  # f0, f1, ... for Types.ROW (PyFlink's row fields)
    out = []
    for e in elements:
        if isinstance(e, (tuple, list)) and not isinstance(e, Row):
            if len(e) != len(type_info.field_types):
                raise ConfigurationError(
                    f"from_collection: element {e!r} has {len(e)} fields, the row type "
                    f"{type_info!r} has {len(type_info.field_types)}"
                )
            e = Row(**dict(zip(names, e, strict=True)))
        out.append(e)
    return out


if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
