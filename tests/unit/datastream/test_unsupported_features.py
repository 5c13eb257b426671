"""A PyFlink name streamstate does not support raises UnsupportedFeatureError (never a
bare AttributeError / ImportError), naming the feature and docs/pyflink-compat.md."""

from __future__ import annotations

import pytest

import streamstate.datastream as ds_module
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.errors import StreamStateError, UnsupportedFeatureError


def test_unsupported_method_raises_typed_error_on_class_and_instance():
    with pytest.raises(UnsupportedFeatureError) as info:
        StreamExecutionEnvironment.add_jars  # noqa: B018 - the lookup itself raises
    err = info.value
    assert not isinstance(err, AttributeError)
    assert isinstance(err, StreamStateError)
    assert err.feature == "StreamExecutionEnvironment.add_jars"
    assert "docs/pyflink-compat.md" in str(err)
    assert "spark-submit --jars" in str(err)  # what to do instead
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(UnsupportedFeatureError):
        env.add_jars("file:///tmp/x.jar")


def test_unsupported_class_import_raises_typed_error_not_import_error():
    with pytest.raises(UnsupportedFeatureError, match="CustomStateBackend"):
        from streamstate.datastream import CustomStateBackend  # noqa: F401
    with pytest.raises(UnsupportedFeatureError, match="CustomCheckpointStorage"):
        ds_module.CustomCheckpointStorage  # noqa: B018 - the lookup itself raises


def test_names_pyflink_does_not_have_stay_attribute_errors():
    assert not hasattr(ds_module, "NoSuchThing")
    assert not hasattr(StreamExecutionEnvironment, "no_such_method")
    with pytest.raises(ImportError):
        from streamstate.datastream import NoSuchThing  # noqa: F401


def test_unsupported_pyflink_modules_raise_typed_error_on_import():
    with pytest.raises(UnsupportedFeatureError, match="Kafka connector is Java"):
        from streamstate.datastream.connectors.kafka import KafkaSource  # noqa: F401
    with pytest.raises(UnsupportedFeatureError, match="Table API"):
        import streamstate.table.expressions
    with pytest.raises(ModuleNotFoundError):
        import streamstate.no_such_module  # noqa: F401


def test_every_unsupported_name_raises_the_typed_error_where_pyflink_has_it():
    import importlib

    from streamstate.common._unsupported import unsupported_names
    from tools import pyflink_compat as compat

    manifest = compat.load_manifest()
    where: dict[str, str] = {}  # short class name -> a streamstate module exporting it
    for module, names in manifest["modules"].items():
        for name in names:
            where.setdefault(name, module.replace("pyflink", "streamstate", 1))
    checked = 0
    for key in unsupported_names():
        head, _, rest = key.partition(".")
        module = importlib.import_module(where[head])
        with pytest.raises(UnsupportedFeatureError):
            obj = getattr(module, head)
            for part in rest.split(".") if rest else []:
                obj = getattr(obj, part)
        checked += 1
    assert checked == len(unsupported_names()) > 25  # every one was looked up


def test_unsupported_submodule_as_an_attribute_raises_typed_error():
    import streamstate.datastream.connectors as connectors

    with pytest.raises(UnsupportedFeatureError, match="Kafka"):
        connectors.kafka  # noqa: B018 - the lookup itself raises
