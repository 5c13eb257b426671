"""The contract of a store: how a write becomes visible to readers, and the registry.

Every file streamstate writes for others to read (checkpoint state files, ``_metadata``,
epoch versions, shared SSTs, savepoints, sink part files and markers) is written through
the :class:`Store` of its file system, chosen by the fsspec protocol
(:func:`~streamstate.runtime.stores.registry.store_for`). The store decides *how* a write is made atomic, because that
differs per kind of storage:

* a POSIX file system (local disk, NFS) renames a finished temporary file over the name;
* an object store (S3) has no rename, but a single PUT (and the completion of a multipart
  upload) makes a whole object visible at once: it writes the final key directly;
* fsspec's in-process ``memory://`` sets the whole value at once.

:meth:`Store.write_once` creates a file only if it does not exist (``_metadata``, the job
directory's lock): an exclusive link on a file system, a conditional PUT
(``If-None-Match: *``) on an object store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, ClassVar

__all__ = ["Store", "StoreKind"]


class StoreKind(Enum):
    """What kind of storage a store is (docs/guarantees.md has a section for each)."""

    FILE_SYSTEM = "file system"
    OBJECT_STORE = "object store"
    MEMORY = "memory"


class Store(ABC):
    """How bytes become visible on one kind of storage (one instance per kind).

    Contract, for every implementation: after :meth:`write_atomic` or a successful
    :meth:`write_once` returns, every reader sees all of ``data`` at ``path``; before it
    returns, a reader sees the previous content or nothing, never a part; a failed write
    leaves no visible file (at most a hidden leftover a cleanup removes).
    """

    kind: ClassVar[StoreKind]
    #: the fsspec protocols this store serves
    protocols: ClassVar[tuple[str, ...]]

    @abstractmethod
    def write_atomic(self, fs: Any, path: str, data: bytes) -> None:
        """Write ``data`` at ``path`` (replacing a previous file) atomically for readers."""

    @abstractmethod
    def write_once(self, fs: Any, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` atomically unless it exists; ``False`` if it did
        (then nothing was written)."""

    def explain(self, url: str, error: BaseException) -> BaseException | None:
        """A typed error naming the setting behind ``error`` (wrong credentials, an
        endpoint that does not answer), or ``None`` when this store has nothing to add."""
        return None
