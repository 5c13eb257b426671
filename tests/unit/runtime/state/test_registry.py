"""The registry of keyed state backends: abilities checked once, at registration, and
asked of the registration (never probed on the object, never a name compared)."""

from __future__ import annotations

from typing import Any

import pytest

from streamstate.errors import ConfigurationError
from streamstate.runtime.checkpoint.handles import ByteStreamStateHandle, KeyGroupsStateHandle
from streamstate.runtime.checkpoint.incremental import IncrementalKeyedStateHandle
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import PickleSerializer
from streamstate.runtime.settings import JobSettings
from streamstate.runtime.state import registry
from streamstate.runtime.state.heap.backend import HeapKeyedStateBackend
from streamstate.runtime.state.registry import (
    native_snapshots,
    register_keyed_backend,
    registration,
    registration_of,
    restoring_backend,
)
from tests.support.backends import Made


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test are gone after it."""
    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))


def test_native_snapshots_is_the_registered_ability(made: Made) -> None:
    b = made.backend()
    own_files = native_snapshots(b)
    assert (own_files is not None) == registration_of(b).native_snapshots
    if own_files is not None:
        assert own_files is b
        assert own_files.snapshot_incremental(object(), 1, "scope") is None  # not enabled


def test_a_backend_claiming_native_files_must_implement_them(scratch_registry: None) -> None:
    class Pretender(HeapKeyedStateBackend):
        pass

    with pytest.raises(ConfigurationError, match="NativeSnapshots"):
        register_keyed_backend("pretender", Pretender, native_versions=True)
    with pytest.raises(ConfigurationError, match="KeyedStateBackend subclass"):
        register_keyed_backend("not-a-backend", dict)  # type: ignore[arg-type]  # the wrong type is the point


def test_a_registered_subclass_gets_its_own_registration(scratch_registry: None) -> None:
    class Custom(HeapKeyedStateBackend):
        pass

    register_keyed_backend("custom", Custom, changelog_options={"changelog": True})
    b = registry.create_keyed_backend(
        "CUSTOM",
        operator_name="op",
        key_group_range=KeyGroupRange(0, 0),
        max_parallelism=1,
        key_serializer=PickleSerializer(),
    )
    try:
        assert isinstance(b, Custom) and registration_of(b).name == "custom"
    finally:
        b.dispose()
    assert "custom" in registry.registered_keyed_backends()


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match="hashmap.*rocksdb"):
        registration("nope")


def test_handles_only_one_backend_restores_name_it() -> None:
    canonical = KeyGroupsStateHandle(ByteStreamStateHandle.of(b""), KeyGroupRange(0, 1), {}, {})
    native = IncrementalKeyedStateHandle(KeyGroupRange(0, 1), (), ByteStreamStateHandle.of(b""), {})
    assert restoring_backend([canonical]) is None
    assert restoring_backend([canonical, native]) == registration("rocksdb").name


class _Configured:
    """A public StateBackend as the runtime sees it (``ConfiguredBackend``)."""

    def __init__(self, name: str) -> None:
        self.backend_name = name

    def backend_options(self) -> dict[str, Any]:
        return {"given": 1}


@pytest.mark.parametrize("name", registry.registered_keyed_backends())
def test_changelog_enabled_adds_the_registered_options(name: str) -> None:
    from streamstate.common import Configuration

    conf = Configuration()
    conf.set_string("state.changelog.enabled", "true")
    settings = JobSettings.from_environment(
        job_name="j",
        configuration=conf,
        checkpoint_config=None,
        state_backend=_Configured(name),
        batch=True,  # no checkpoint config needed: the backend options are the same
    )
    assert settings.backend_name == name
    assert dict(settings.backend_options) == {"given": 1, **registration(name).changelog_options}
