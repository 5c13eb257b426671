"""The last PyFlink parity gaps, as PyFlink's own tests and programs use the names."""

from __future__ import annotations

import importlib

import pytest

from streamstate.common import Configuration, JobStatus, Row, Types
from streamstate.datastream import CheckpointConfig, FsStateBackend, MemoryStateBackend
from streamstate.errors import UnsupportedFeatureError
from tests.support import envs


def test_job_status_is_an_enum_that_prints_its_name():
    assert str(JobStatus.RUNNING) == "JobStatus.RUNNING"
    assert f"{JobStatus.FAILED}" == "JobStatus.FAILED"
    assert JobStatus(1) is JobStatus.RUNNING and JobStatus.RUNNING.value == 1
    assert JobStatus.FINISHED.is_globally_terminal_state()


def test_an_unsupported_module_is_an_import_error_too():
    try:
        import streamstate.table  # noqa: F401
    except ImportError as e:  # the usual optional-import fallback
        assert isinstance(e, ModuleNotFoundError) and isinstance(e, UnsupportedFeatureError)
        assert e.name == "streamstate.table" and "Table API" in str(e)
    else:  # pragma: no cover - the import must fail
        pytest.fail("streamstate.table imported")
    with pytest.raises(ImportError, match="Kafka"):
        importlib.import_module("streamstate.datastream.connectors.kafka")


def test_prefer_checkpoint_for_recovery_is_kept_and_read_back():
    config = CheckpointConfig()
    assert config.is_prefer_checkpoint_for_recovery() is False  # PyFlink 1.x's default
    assert config.set_prefer_checkpoint_for_recovery(True) is config
    assert config.is_prefer_checkpoint_for_recovery() is True


def test_configuration_items():
    conf = Configuration().set_string("a.b", "1").set_integer("c", 2)
    assert conf.items() == [("a.b", "1"), ("c", "2")]
    assert dict(conf.items()) == conf.to_dict()


def test_legacy_backends_say_their_snapshots_are_synchronous():
    assert MemoryStateBackend().is_using_asynchronous_snapshots() is False
    assert FsStateBackend("file:///tmp/x").is_using_asynchronous_snapshots() is False


def test_a_tuple_typed_stream_of_rows_collects_tuples():
    """PyFlink's test_execute_and_collect: a Types.TUPLE stream hands on tuples, whatever
    the function returned (its tuple serializer makes them)."""
    env = envs.make_env(2)
    pair = Types.TUPLE([Types.OBJECT_ARRAY(Types.STRING()), Types.OBJECT_ARRAY(Types.DOUBLE())])
    data = [(["test", "test"], [0.0, 0.0]), ([None], [0.0, 0.0])]
    rows = env.from_collection(data, type_info=pair).map(lambda t: Row(t[0], t[1]), pair)
    out = list(rows.execute_and_collect())
    assert sorted(out, key=repr) == sorted(data, key=repr)
    assert all(type(v) is tuple for v in out)
    simple = Types.TUPLE([Types.STRING(), Types.INT()])
    env = envs.make_env(1)
    from_rows = env.from_collection([Row("a", 1), Row("b", 2)], type_info=simple)
    assert list(from_rows.map(lambda r: Row(*r), simple).execute_and_collect()) == [
        ("a", 1),
        ("b", 2),
    ]
