"""The stores by fsspec protocol, and the one way streamstate turns a URL into a file
system (with the job's storage options and typed errors)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from streamstate.errors import ConfigurationError, StoreNotInstalledError
from streamstate.runtime.stores.base import Store
from streamstate.runtime.stores.files import LocalFileStore, MemoryStore, RenamingStore
from streamstate.runtime.stores.objects import S3Store
from streamstate.runtime.stores.options import ensure_installed

__all__ = ["explained", "protocols_of", "register_store", "store_for", "url_to_fs"]

#: protocol -> store
_STORES: dict[str, Store] = {}


def register_store(store: Store) -> None:
    """Serve ``store.protocols`` with ``store`` (a later registration replaces)."""
    for protocol in store.protocols:
        _STORES[protocol] = store


def protocols_of(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return tuple(protocol) if isinstance(protocol, (tuple, list)) else (protocol,)


def store_for(fs: Any) -> Store:
    """The store of the fsspec file system ``fs``; a file system no store is registered
    for gets the renaming store (atomic where that file system's rename is)."""
    for protocol in protocols_of(fs):
        store = _STORES.get(protocol)
        if store is not None:
            return store
    return _STORES["*"]


def url_to_fs(url: str) -> tuple[Any, str]:
    """``(file system, path)`` of ``url`` with the installed storage options
    (:mod:`.options`). A URL whose file system is not installed raises
    :class:`StoreNotInstalledError` naming the package; a malformed one
    :class:`ConfigurationError`."""
    import fsspec

    ensure_installed()
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as e:
        protocol = url.split("://", 1)[0] if "://" in url else "file"
        package = _PACKAGES.get(protocol)
        fix = (
            f"pip install {package} (or streamstate[{_EXTRAS[package]}])"
            if package in _EXTRAS
            else f"install {package}"
            if package
            else "install its fsspec implementation"
        )
        raise StoreNotInstalledError(
            f"cannot access {url!r}: the {protocol}:// file system is not installed ({e}). "
            f"{fix} on the driver and on every Spark executor"
        ) from e
    except ValueError as e:
        raise ConfigurationError(
            f"cannot access {url!r}: {e}. Use a local path or an fsspec URL "
            f"(file://, s3://, memory://, ...)"
        ) from e
    return fs, path.rstrip("/") or "/"


@contextlib.contextmanager
def explained(fs: Any, url: str) -> Iterator[None]:
    """Run a block of store accesses to ``url``; an error the store can explain (refused
    credentials, an unreachable endpoint, a missing bucket) becomes its typed error naming
    the setting (:meth:`Store.explain`); others pass unchanged."""
    try:
        yield
    except Exception as e:
        typed = store_for(fs).explain(url, e)
        if typed is None:
            raise
        raise typed from e


#: fsspec protocol -> the package implementing it
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "hdfs": "pyarrow"}
#: package -> streamstate's extra that installs it
_EXTRAS = {"s3fs": "s3"}


for _store in (RenamingStore(), LocalFileStore(), MemoryStore(), S3Store()):
    register_store(_store)
