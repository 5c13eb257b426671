"""The one way tests build a StreamExecutionEnvironment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamstate.common import Configuration, RestartStrategies
from streamstate.datastream import ExternalizedCheckpointCleanup, StreamExecutionEnvironment

__all__ = ["REBUILD_INSTANCES", "checkpoint_every_epoch", "make_env", "rebuild_instances"]

REBUILD_INSTANCES = "execution.runner.local.rebuild-instances"
#: what make_env sets REBUILD_INSTANCES to when not told (tests flip it with monkeypatch)
REBUILD_INSTANCES_DEFAULT = False


def rebuild_instances(env: StreamExecutionEnvironment, on: bool = True) -> None:
    """The in-process runner rebuilds every subtask from its state versions every epoch
    (as if each moved to another Python worker)."""
    env.configure(Configuration().set_string(REBUILD_INSTANCES, "true" if on else "false"))


def make_env(
    parallelism: int = 2,
    *,
    spark: Any = None,
    max_records: int | None = None,
    max_epochs: int | None = None,
    restarts: int | None = None,
    conf: Mapping[str, str] | None = None,
    **keys: str,
) -> StreamExecutionEnvironment:
    """An environment on the in-process runner, or on ``spark`` when given.

    ``max_records``/``max_epochs``: ``execution.epoch.max-records``/``max-epochs``.
    ``restarts``: a fixed-delay strategy with that many attempts and no delay (a
    deterministic bug must fail the test, not restart forever). ``conf`` and ``keys``
    are further configuration keys (in ``keys``, ``_`` stands for ``.``).
    """
    c = Configuration()
    if spark is None:
        c.set_string("execution.runner", "local")
    if max_records is not None:
        c.set_string("execution.epoch.max-records", str(max_records))
    if max_epochs is not None:
        c.set_string("execution.epoch.max-epochs", str(max_epochs))
    if spark is None and REBUILD_INSTANCES_DEFAULT:
        c.set_string(REBUILD_INSTANCES, "true")
    for k, v in {**(conf or {}), **{k.replace("_", "."): v for k, v in keys.items()}}.items():
        c.set_string(k, v)
    env = StreamExecutionEnvironment.get_execution_environment(c, spark=spark)
    env.set_parallelism(parallelism)
    if restarts is not None:
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 0))
    return env


def checkpoint_every_epoch(
    env: StreamExecutionEnvironment, directory: Any, *, retain: bool = False
) -> StreamExecutionEnvironment:
    """A checkpoint at every epoch, into ``directory``; ``retain``: the checkpoints stay
    when the job ends (RETAIN_ON_CANCELLATION), for reading them back."""
    env.enable_checkpointing(1)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(str(directory))
    if retain:
        cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    return env
