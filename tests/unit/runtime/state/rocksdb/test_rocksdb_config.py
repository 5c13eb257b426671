"""Public RocksDB state backends (PyFlink names) and the state.backend.rocksdb.* options."""

from __future__ import annotations

import pickle
import shutil

import pytest

from streamstate.common import Configuration
from streamstate.datastream import (
    EmbeddedRocksDBStateBackend,
    FsStateBackend,
    PredefinedOptions,
    RocksDBStateBackend,
    StreamExecutionEnvironment,
)
from streamstate.datastream import config_options as co
from streamstate.datastream.checkpoint_storage import FileSystemCheckpointStorage
from streamstate.errors import ConfigurationError
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.state.rocksdb.backend import RocksDBKeyedStateBackend
from tests.support.backends import fast_local_dir


def test_embedded_backend_defaults_and_setters() -> None:
    b = EmbeddedRocksDBStateBackend()
    assert b.backend_name == "rocksdb" and not b.is_incremental_checkpoints_enabled()
    assert b.get_predefined_options() is PredefinedOptions.DEFAULT
    assert b.get_db_storage_paths() == [] and b.get_options() is None
    b = EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True)
    b.set_db_storage_paths("/a", "/b")
    b.set_predefined_options(PredefinedOptions.SPINNING_DISK_OPTIMIZED_HIGH_MEM)
    b.set_options("level0_file_num_compaction_trigger=8; max_write_buffer_number = 3")
    b.set_write_buffer_size(1 << 20)
    b.set_block_cache_size(1 << 22)
    assert b.is_incremental_checkpoints_enabled()
    assert b.get_options() == {
        "level0_file_num_compaction_trigger": "8",
        "max_write_buffer_number": "3",
    }
    assert b.backend_options() == {
        "local_dir": "/a",
        "incremental": True,
        "predefined_options": "SPINNING_DISK_OPTIMIZED_HIGH_MEM",
        "write_buffer_size": 1 << 20,
        "block_cache_size": 1 << 22,
        "raw_options": {"level0_file_num_compaction_trigger": "8", "max_write_buffer_number": "3"},
    }
    assert pickle.loads(pickle.dumps(b)) == b


@pytest.mark.parametrize(
    "bad",
    [
        lambda: EmbeddedRocksDBStateBackend("yes"),  # type: ignore[arg-type]
        lambda: EmbeddedRocksDBStateBackend().set_predefined_options("DEFAULT"),  # type: ignore[arg-type]
        lambda: EmbeddedRocksDBStateBackend().set_options("no-equals-sign"),
        lambda: EmbeddedRocksDBStateBackend().set_write_buffer_size(0),
        lambda: RocksDBStateBackend(),
    ],
)
def test_bad_arguments_are_configuration_errors(bad) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigurationError):
        bad()


def test_legacy_rocksdb_state_backend_implies_file_system_storage(tmp_path) -> None:  # type: ignore[no-untyped-def]
    b = RocksDBStateBackend(str(tmp_path), True)
    storage = b.get_implied_checkpoint_storage()
    assert isinstance(storage, FileSystemCheckpointStorage)
    assert b.is_incremental_checkpoints_enabled()
    assert isinstance(b.get_checkpoint_backend(), FsStateBackend)
    b2 = RocksDBStateBackend(checkpoint_stream_backend=FsStateBackend(str(tmp_path)))
    assert (
        b2.get_implied_checkpoint_storage().get_checkpoint_path() == storage.get_checkpoint_path()
    )
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_state_backend(b)
    assert env.get_state_backend() is b


def test_configuration_keys() -> None:
    conf = {
        "state.backend.type": "rocksdb",
        "state.backend.incremental": "true",
        "state.backend.rocksdb.localdir": "/tmp/x,/tmp/y",
        "state.backend.rocksdb.predefined-options": "flash_ssd_optimized",
        "state.backend.rocksdb.writebuffer.size": "8mb",
        "state.backend.rocksdb.block.cache-size": "512kb",
        "state.backend.rocksdb.options": "level0_file_num_compaction_trigger=8",
    }
    b = co.state_backend_from_configuration(conf)
    assert isinstance(b, EmbeddedRocksDBStateBackend)
    assert b.is_incremental_checkpoints_enabled()
    assert b.get_db_storage_paths() == ["/tmp/x", "/tmp/y"]
    assert b.get_predefined_options() is PredefinedOptions.FLASH_SSD_OPTIMIZED
    opts = b.backend_options()
    assert opts["write_buffer_size"] == 8 << 20 and opts["block_cache_size"] == 512 << 10
    c = Configuration()
    c.set_string("state.backend.type", "rocksdb")
    env = StreamExecutionEnvironment.get_execution_environment(c)
    assert isinstance(env.get_state_backend(), EmbeddedRocksDBStateBackend)
    assert not env.get_state_backend().is_incremental_checkpoints_enabled()


@pytest.mark.parametrize(
    "key,value",
    [
        ("state.backend.incremental", "maybe"),
        ("state.backend.rocksdb.predefined-options", "FASTEST"),
        ("state.backend.rocksdb.writebuffer.size", "lots"),
        ("state.backend.rocksdb.options", "x"),
    ],
)
def test_bad_configuration_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=key.replace(".", r"\.")):
        co.state_backend_from_configuration({"state.backend.type": "rocksdb", key: value})


@pytest.mark.parametrize("profile", list(PredefinedOptions))
def test_every_profile_opens_a_working_database(profile: PredefinedOptions) -> None:
    d = fast_local_dir()
    try:
        b = EmbeddedRocksDBStateBackend()
        b.set_db_storage_paths(d)
        b.set_predefined_options(profile)
        b.set_write_buffer_size(1 << 20)
        b.set_options({"level0_file_num_compaction_trigger": "8"})
        kb = b.create_keyed_backend(
            operator_name="op",
            key_group_range=KeyGroupRange(0, 3),
            max_parallelism=4,
            key_serializer=PickleSerializer(),
        )
        assert isinstance(kb, RocksDBKeyedStateBackend) and kb.path.startswith(d)
        from streamstate.datastream.state import ValueStateDescriptor

        v = kb.get_partitioned_state(ValueStateDescriptor("v"))
        kb.set_current_key("k", 1)
        v.update(41)
        assert v.value() == 41
        kb.dispose()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_unknown_raw_option_is_a_configuration_error() -> None:
    d = fast_local_dir()
    try:
        with pytest.raises(ConfigurationError, match="no_such_option"):
            RocksDBKeyedStateBackend(
                "op",
                KeyGroupRange(0, 3),
                4,
                PickleSerializer(),
                local_dir=d,
                raw_options={"no_such_option": "1"},
            )
    finally:
        shutil.rmtree(d, ignore_errors=True)
