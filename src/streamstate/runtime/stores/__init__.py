"""Where streamstate's bytes go: one :class:`Store` per kind of storage (a POSIX file
system, an S3-compatible object store, fsspec's memory), each making every write that
others read atomic in the way its storage allows, and the storage options (endpoint,
credentials) of a job. docs/guarantees.md says what each store guarantees."""

from streamstate.runtime.stores.base import Store, StoreKind
from streamstate.runtime.stores.objects import MIN_PART_SIZE, MultipartUploads
from streamstate.runtime.stores.options import StorageOptions
from streamstate.runtime.stores.registry import explained, register_store, store_for, url_to_fs

__all__ = [
    "MIN_PART_SIZE",
    "MultipartUploads",
    "StorageOptions",
    "Store",
    "StoreKind",
    "explain_access_error",
    "explained",
    "register_store",
    "store_for",
    "url_to_fs",
    "write_atomic",
    "write_once",
]


def write_atomic(fs: object, path: str, data: bytes) -> None:
    """``data`` at ``path``, atomically for readers, by the store of ``fs``."""
    store_for(fs).write_atomic(fs, path, data)


def write_once(fs: object, path: str, data: bytes) -> bool:
    """Create ``path`` with ``data`` unless it exists (``False`` then), atomically."""
    return store_for(fs).write_once(fs, path, data)


def explain_access_error(fs: object, url: str, error: BaseException) -> BaseException | None:
    """The store's typed error naming the setting behind ``error``, if it knows one."""
    return store_for(fs).explain(url, error)
