"""Flink configuration keys -> CheckpointConfig, storage, state backend, restart strategy."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from streamstate.common import Configuration, Duration, Time
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import config_options as co
from streamstate.datastream.checkpoint_config import (
    CheckpointConfig,
    ExternalizedCheckpointCleanup,
    ExternalizedCheckpointRetention,
)
from streamstate.datastream.checkpoint_storage import (
    FileSystemCheckpointStorage,
    JobManagerCheckpointStorage,
)
from streamstate.datastream.checkpointing_mode import CheckpointingMode
from streamstate.datastream.state_backend import (
    FsStateBackend,
    HashMapStateBackend,
    MemoryStateBackend,
)
from streamstate.errors import ConfigurationError

# -- CheckpointConfig API ----------------------------------------------------------------------


def test_defaults_are_flinks():
    cc = CheckpointConfig()
    assert not cc.is_checkpointing_enabled()
    assert cc.get_checkpoint_interval() == -1
    assert cc.get_checkpointing_mode() is CheckpointingMode.EXACTLY_ONCE
    assert cc.get_checkpoint_timeout() == 600_000
    assert cc.get_min_pause_between_checkpoints() == 0
    assert cc.get_max_concurrent_checkpoints() == 1
    assert cc.get_tolerable_checkpoint_failure_number() == 0
    assert cc.is_fail_on_checkpointing_errors()
    assert cc.get_num_retained_checkpoints() == 1
    assert cc.get_externalized_checkpoint_cleanup() is None
    assert not cc.is_externalized_checkpoints_enabled()
    assert cc.get_checkpoint_storage() is None


@pytest.mark.parametrize(
    "value", [5000, timedelta(seconds=5), Time.seconds(5), Duration.of_seconds(5)]
)
def test_durations_accept_timedelta_time_duration(value):
    cc = CheckpointConfig()
    cc.set_checkpoint_interval(value).set_checkpoint_timeout(value)
    cc.set_min_pause_between_checkpoints(value)
    assert cc.is_checkpointing_enabled()
    assert cc.get_checkpoint_interval() == cc.get_checkpoint_timeout() == 5000
    assert cc.get_min_pause_between_checkpoints() == 5000


@pytest.mark.parametrize(
    ("setter", "value"),
    [
        ("set_checkpoint_interval", -1),
        ("set_checkpoint_interval", 0),
        ("set_checkpoint_interval", timedelta(seconds=-1)),
        ("set_checkpoint_interval", 1.5),
        ("set_checkpoint_timeout", 0),
        ("set_checkpoint_timeout", -5),
        ("set_min_pause_between_checkpoints", -1),
        ("set_max_concurrent_checkpoints", 0),
        ("set_tolerable_checkpoint_failure_number", -1),
        ("set_num_retained_checkpoints", 0),
        ("set_checkpointing_mode", "EXACTLY_ONCE"),
        ("set_externalized_checkpoint_cleanup", "RETAIN_ON_CANCELLATION"),
        ("set_checkpoint_storage", 42),
    ],
)
def test_validation(setter, value):
    with pytest.raises(ConfigurationError):
        getattr(CheckpointConfig(), setter)(value)


def test_fail_on_checkpointing_errors_maps_to_tolerable_number():
    cc = CheckpointConfig().set_fail_on_checkpointing_errors(False)
    assert cc.get_tolerable_checkpoint_failure_number() == 2**31 - 1
    assert not cc.is_fail_on_checkpointing_errors()
    cc.set_fail_on_checkpointing_errors(True)
    assert cc.get_tolerable_checkpoint_failure_number() == 0


def test_externalized_cleanup_and_storage_setters(tmp_path):
    cc = CheckpointConfig()
    cc.enable_externalized_checkpoints(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    assert cc.is_externalized_checkpoints_enabled()
    cc.set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS
    )
    assert not cc.is_externalized_checkpoints_enabled()
    assert (
        cc.get_externalized_checkpoint_retention()
        is ExternalizedCheckpointCleanup.NO_EXTERNALIZED_CHECKPOINTS
    )
    cc.set_checkpoint_storage_dir("memory://x")
    assert cc.get_checkpoint_storage() == FileSystemCheckpointStorage("memory://x")
    cc.set_checkpoint_storage(str(tmp_path))
    assert cc.get_checkpoint_storage() == FileSystemCheckpointStorage(str(tmp_path))
    cc.set_checkpoint_storage(JobManagerCheckpointStorage())
    assert isinstance(cc.get_checkpoint_storage(), JobManagerCheckpointStorage)


# -- apply_configuration -----------------------------------------------------------------------


def full_configuration(directory: str) -> Configuration:
    return Configuration(
        {
            "execution.checkpointing.interval": "10 s",
            "execution.checkpointing.mode": "AT_LEAST_ONCE",
            "execution.checkpointing.timeout": "1 min",
            "execution.checkpointing.min-pause": "500ms",
            "execution.checkpointing.max-concurrent-checkpoints": "2",
            "execution.checkpointing.tolerable-failed-checkpoints": "3",
            "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
            "execution.checkpointing.dir": directory,
            "execution.checkpointing.num-retained": "4",
        }
    )


def test_apply_configuration(tmp_path):
    cc = CheckpointConfig()
    co.apply_configuration(full_configuration(str(tmp_path)), cc)
    assert cc.get_checkpoint_interval() == 10_000
    assert cc.get_checkpointing_mode() is CheckpointingMode.AT_LEAST_ONCE
    assert cc.get_checkpoint_timeout() == 60_000
    assert cc.get_min_pause_between_checkpoints() == 500
    assert cc.get_max_concurrent_checkpoints() == 2
    assert cc.get_tolerable_checkpoint_failure_number() == 3
    assert (
        cc.get_externalized_checkpoint_cleanup()
        is ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    )
    assert cc.get_num_retained_checkpoints() == 4
    assert cc.get_checkpoint_storage() == FileSystemCheckpointStorage(str(tmp_path))


def test_round_trip(tmp_path):
    cc = CheckpointConfig()
    co.apply_configuration(full_configuration(str(tmp_path)), cc)
    conf = co.checkpoint_config_to_configuration(cc)
    cc2 = CheckpointConfig()
    co.apply_configuration(conf, cc2)
    assert repr(cc2) == repr(cc)
    assert co.checkpoint_config_to_configuration(cc2) == conf


def test_absent_keys_change_nothing():
    cc = CheckpointConfig()
    before = repr(cc)
    co.apply_configuration(Configuration(), cc)
    co.apply_configuration({}, cc)
    assert repr(cc) == before


def test_plain_mapping_and_legacy_keys(tmp_path):
    cc = CheckpointConfig()
    co.apply_configuration(
        {
            "execution.checkpointing.interval": 2000,  # plain ms
            "execution.checkpointing.mode": "exactly-once",
            "state.checkpoints.dir": str(tmp_path),
            "state.checkpoints.num-retained": "3",
        },
        cc,
    )
    assert cc.get_checkpoint_interval() == 2000
    assert cc.get_checkpointing_mode() is CheckpointingMode.EXACTLY_ONCE
    assert cc.get_checkpoint_storage() == FileSystemCheckpointStorage(str(tmp_path))
    assert cc.get_num_retained_checkpoints() == 3
    # the new key wins over the legacy one
    both = {"execution.checkpointing.num-retained": "5", "state.checkpoints.num-retained": "3"}
    co.apply_configuration(both, cc)
    assert cc.get_num_retained_checkpoints() == 5


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("execution.checkpointing.mode", "SOMETIMES", "AT_LEAST_ONCE, EXACTLY_ONCE"),
        (
            "execution.checkpointing.externalized-checkpoint-retention",
            "KEEP",
            "RETAIN_ON_CANCELLATION",
        ),
        ("execution.checkpointing.storage", "s3", "filesystem, jobmanager"),
        ("execution.checkpointing.interval", "10 parsecs", "interval"),
        ("execution.checkpointing.max-concurrent-checkpoints", "many", "integer"),
        ("execution.checkpointing.tolerable-failed-checkpoints", "-1", ">= 0"),
    ],
)
def test_unknown_values_list_accepted(key, value, match):
    with pytest.raises(ConfigurationError, match=match):
        co.apply_configuration({key: value}, CheckpointConfig())


def test_storage_selection(tmp_path):
    d = str(tmp_path)
    assert co.checkpoint_storage_from_configuration({}) is None
    assert co.checkpoint_storage_from_configuration(
        {"execution.checkpointing.storage": "jobmanager"}
    ) == (JobManagerCheckpointStorage())
    jm = co.checkpoint_storage_from_configuration(
        {"execution.checkpointing.storage": "jobmanager", "execution.checkpointing.dir": d}
    )
    assert jm == JobManagerCheckpointStorage(d)
    with pytest.raises(ConfigurationError, match="needs a directory"):
        co.checkpoint_storage_from_configuration({"execution.checkpointing.storage": "filesystem"})
    legacy = co.checkpoint_storage_from_configuration({"state.backend.type": "jobmanager"})
    assert isinstance(legacy, JobManagerCheckpointStorage)


# -- state backend -----------------------------------------------------------------------------


def test_state_backend_from_configuration(tmp_path):
    d = str(tmp_path)
    assert co.state_backend_from_configuration({}) is None
    assert (
        co.state_backend_from_configuration({"state.backend.type": "hashmap"})
        == HashMapStateBackend()
    )
    assert (
        co.state_backend_from_configuration({"state.backend.type": "HashMap"})
        == HashMapStateBackend()
    )
    mem = co.state_backend_from_configuration({"state.backend.type": "jobmanager"})
    assert isinstance(mem, MemoryStateBackend) and mem.backend_name == "hashmap"
    fs = co.state_backend_from_configuration(
        {"state.backend": "filesystem", "state.checkpoints.dir": d}
    )
    assert isinstance(fs, FsStateBackend)
    assert fs.get_implied_checkpoint_storage() == FileSystemCheckpointStorage(d)
    with pytest.raises(ConfigurationError, match="needs a checkpoint directory"):
        co.state_backend_from_configuration({"state.backend.type": "filesystem"})
    with pytest.raises(
        ConfigurationError, match="accepted: filesystem, hashmap, jobmanager, rocksdb"
    ):
        co.state_backend_from_configuration({"state.backend.type": "forst"})


def test_register_state_backend_type():
    co.register_state_backend_type("test-only", lambda conf: HashMapStateBackend())
    assert (
        co.state_backend_from_configuration({"state.backend.type": "test-only"})
        == HashMapStateBackend()
    )


# -- restart strategy --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["none", "off", "disable", "NONE"])
def test_restart_none(name):
    assert (
        co.restart_strategy_from_configuration({"restart-strategy.type": name})
        == RestartStrategies.no_restart()
    )


def test_restart_fixed_delay():
    conf = {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "5",
        "restart-strategy.fixed-delay.delay": "10 s",
    }
    assert co.restart_strategy_from_configuration(conf) == RestartStrategies.fixed_delay_restart(
        5, timedelta(seconds=10)
    )
    defaults = co.restart_strategy_from_configuration({"restart-strategy.type": "fixeddelay"})
    assert defaults == RestartStrategies.fixed_delay_restart(1, 1000)


def test_restart_failure_rate():
    conf = {
        "restart-strategy.type": "failure-rate",
        "restart-strategy.failure-rate.max-failures-per-interval": "3",
        "restart-strategy.failure-rate.failure-rate-interval": "5 min",
        "restart-strategy.failure-rate.delay": "2 s",
    }
    expected = RestartStrategies.failure_rate_restart(3, timedelta(minutes=5), timedelta(seconds=2))
    assert co.restart_strategy_from_configuration(conf) == expected
    defaults = co.restart_strategy_from_configuration({"restart-strategy.type": "failure-rate"})
    assert defaults == RestartStrategies.failure_rate_restart(1, 60_000, 1000)


def test_restart_round_trip():
    for cfg in [
        RestartStrategies.no_restart(),
        RestartStrategies.fixed_delay_restart(4, timedelta(seconds=3)),
        RestartStrategies.failure_rate_restart(2, timedelta(minutes=1), 10),
    ]:
        conf = co.restart_strategy_to_configuration(cfg)
        assert co.restart_strategy_from_configuration(conf) == cfg


def test_restart_errors():
    assert co.restart_strategy_from_configuration({}) is None
    with pytest.raises(ConfigurationError, match="jitter-factor must be a number"):
        co.restart_strategy_from_configuration(
            {
                "restart-strategy.type": "exponential-delay",
                "restart-strategy.exponential-delay.jitter-factor": "lots",
            }
        )
    with pytest.raises(ConfigurationError, match="none .*fixed-delay, failure-rate, exponential"):
        co.restart_strategy_from_configuration({"restart-strategy.type": "sometimes"})


# -- parallelism and recovery ------------------------------------------------------------------


def test_parallelism_and_recovery_path(tmp_path):
    assert co.parallelism_from_configuration({}) is None
    assert co.parallelism_from_configuration({"parallelism.default": "4"}) == 4
    with pytest.raises(ConfigurationError):
        co.parallelism_from_configuration({"parallelism.default": "0"})
    assert co.max_parallelism_from_configuration({"pipeline.max-parallelism": "-1"}) is None
    assert co.max_parallelism_from_configuration({"pipeline.max-parallelism": "256"}) == 256
    with pytest.raises(ConfigurationError):
        co.max_parallelism_from_configuration({"pipeline.max-parallelism": "0"})
    p = os.path.join(str(tmp_path), "chk-3")
    assert co.state_recovery_path_from_configuration({"execution.state-recovery.path": p}) == p
    assert co.state_recovery_path_from_configuration({"execution.savepoint.path": p}) == p
    assert co.state_recovery_path_from_configuration({}) is None
