"""The stores (runtime/stores/): how each makes a write atomic, write-once, the registry,
the storage options from configuration keys. The S3 store against a real server is in
tests/integration/test_s3_stores.py."""

from __future__ import annotations

import sys
import threading

import fsspec
import pytest

from streamstate.errors import ConfigurationError, StoreNotInstalledError
from streamstate.runtime.stores import (
    StorageOptions,
    StoreKind,
    store_for,
    url_to_fs,
    write_atomic,
    write_once,
)


def test_each_protocol_has_its_store():
    assert store_for(fsspec.filesystem("file")).kind is StoreKind.FILE_SYSTEM
    assert store_for(fsspec.filesystem("memory")).kind is StoreKind.MEMORY
    assert store_for(fsspec.filesystem("s3", anon=True)).kind is StoreKind.OBJECT_STORE


def test_local_write_once_creates_once_and_leaves_nothing_hidden(tmp_path):
    fs, root = url_to_fs(str(tmp_path))
    path = f"{root}/d/_metadata"
    assert write_once(fs, path, b"first")
    assert not write_once(fs, path, b"second")
    assert (tmp_path / "d" / "_metadata").read_bytes() == b"first"
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["_metadata"]


def test_local_write_once_has_one_winner_among_racing_writers(tmp_path):
    fs, root = url_to_fs(str(tmp_path))
    path = f"{root}/_lock"
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        results.append(write_once(fs, path, f"writer {i}".encode()))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert (tmp_path / "_lock").read_bytes().startswith(b"writer ")


def test_local_write_atomic_replaces_and_leaves_no_temporary(tmp_path):
    fs, root = url_to_fs(str(tmp_path))
    write_atomic(fs, f"{root}/x/f", b"one")
    write_atomic(fs, f"{root}/x/f", b"two")
    assert (tmp_path / "x" / "f").read_bytes() == b"two"
    assert [p.name for p in (tmp_path / "x").iterdir()] == ["f"]


def test_memory_store_write_once():
    fs, root = url_to_fs("memory://stores-test/once")
    assert write_once(fs, f"{root}/m", b"1")
    assert not write_once(fs, f"{root}/m", b"2")
    assert fs.cat_file(f"{root}/m") == b"1"
    fs.rm(root, recursive=True)


def test_s3_url_without_s3fs_names_the_package(monkeypatch):
    registry = sys.modules["fsspec.registry"]
    monkeypatch.setitem(sys.modules, "s3fs", None)  # import s3fs fails, as when missing
    monkeypatch.delitem(registry._registry, "s3", raising=False)
    with pytest.raises(StoreNotInstalledError, match=r"pip install s3fs .*streamstate\[s3\]"):
        url_to_fs("s3://bucket/checkpoints")


def test_options_from_flink_keys():
    options = StorageOptions.from_configuration(
        {
            "s3.endpoint": "http://10.0.0.5:8333",
            "s3.access-key": "AK",
            "s3.secret-key": "SK",
            "s3.endpoint.region": "eu-west-1",
            "s3.path.style.access": "true",
            "fsspec.s3.requester_pays": "true",
            "fsspec.s3.client_kwargs": '{"verify": false}',
        }
    )
    s3 = options.for_protocol("s3")
    assert s3["key"] == "AK" and s3["secret"] == "SK"
    assert s3["client_kwargs"] == {
        "endpoint_url": "http://10.0.0.5:8333",
        "region_name": "eu-west-1",
        "verify": False,
    }
    assert s3["config_kwargs"] == {"s3": {"addressing_style": "path"}}
    assert s3["requester_pays"] is True
    assert s3["use_listings_cache"] is False  # a driver lists what executors wrote
    assert "SK" not in repr(options)


def test_endpoint_without_scheme_is_https():
    options = StorageOptions.from_configuration({"s3.endpoint": "s3.example.com"})
    assert options.for_protocol("s3")["client_kwargs"]["endpoint_url"] == "https://s3.example.com"


@pytest.mark.parametrize(
    "conf, message",
    [
        ({"s3.access-key": "AK"}, "s3.access-key is set but s3.secret-key is not"),
        ({"s3.secret-key": "SK"}, "s3.secret-key is set but s3.access-key is not"),
        ({"s3.path.style.access": "yes"}, "s3.path.style.access must be true or false"),
        ({"fsspec.s3": "x"}, "fsspec.<protocol>.<option>"),
    ],
)
def test_bad_options_name_the_key(conf, message):
    with pytest.raises(ConfigurationError, match=message.replace(".", r"\.").replace("<", ".")):
        StorageOptions.from_configuration(conf)


def test_install_sets_fsspec_defaults_and_restores_the_users_own(monkeypatch):
    import fsspec.config

    monkeypatch.setattr(fsspec.config, "conf", {"s3": {"anon": True}})
    monkeypatch.setattr("streamstate.runtime.stores.options._BEFORE", {})
    StorageOptions.from_configuration({"s3.endpoint": "http://a:1"}).install()
    assert fsspec.config.conf["s3"]["client_kwargs"] == {"endpoint_url": "http://a:1"}
    assert fsspec.config.conf["s3"]["anon"] is True
    StorageOptions.from_configuration({"s3.endpoint": "http://b:2"}).install()
    assert fsspec.config.conf["s3"] == {
        "anon": True,
        "use_listings_cache": False,
        "client_kwargs": {"endpoint_url": "http://b:2"},
    }
    StorageOptions().install()
    assert fsspec.config.conf["s3"] == {"anon": True, "use_listings_cache": False}
