"""Stores that have a rename: POSIX file systems, fsspec's ``memory://``, and the renaming
fallback for every other fsspec file system (HDFS, ...)."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from typing import Any, ClassVar

from streamstate.runtime.stores.base import Store, StoreKind

__all__ = ["LocalFileStore", "MemoryStore", "RenamingStore", "hidden_sibling", "link_file"]


def hidden_sibling(path: str) -> str:
    """A fresh hidden name next to ``path`` (same directory, so a rename stays within one
    file system); listings and cleanups skip ``.*.inprogress`` names."""
    parent, _, name = path.rpartition("/")
    return f"{parent or ''}/.{name}.{uuid.uuid4().hex}.inprogress"


def link_file(fs: Any, local_path: str, path: str) -> bool:
    """Hard-link the local file ``local_path`` as ``path`` on the local ``fs`` (atomically:
    a temporary name, then a rename); ``False`` when it cannot (another file system, no
    hard links there): the caller copies."""
    tmp = hidden_sibling(path)
    try:
        fs.makedirs(fs._parent(path), exist_ok=True)
        os.link(local_path, tmp)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


class RenamingStore(Store):
    """Any fsspec file system with a rename: a temporary sibling, then ``fs.mv`` over the
    name. Atomic where that file system's rename is (HDFS: yes); :meth:`write_once`
    checks and then renames, which two writers racing can both pass (docs/limitations.md)."""

    kind = StoreKind.FILE_SYSTEM
    protocols: ClassVar[tuple[str, ...]] = ("*",)

    def write_atomic(self, fs: Any, path: str, data: bytes) -> None:
        tmp = hidden_sibling(path)
        try:
            fs.makedirs(fs._parent(path), exist_ok=True)
            with fs.open(tmp, "wb") as f:
                f.write(data)
            fs.mv(tmp, path)
        except BaseException:
            with contextlib.suppress(Exception):
                if fs.exists(tmp):
                    fs.rm(tmp)
            raise

    def write_once(self, fs: Any, path: str, data: bytes) -> bool:
        if fs.exists(path):
            return False
        self.write_atomic(fs, path, data)
        return True


class LocalFileStore(RenamingStore):
    """The local file system (and NFS mounted on it): ``rename(2)`` replaces atomically;
    a write-once file is linked to its name (``link(2)`` fails if the name exists), so it
    appears complete or not at all, also when two processes race."""

    protocols = ("file", "local")

    def write_once(self, fs: Any, path: str, data: bytes) -> bool:
        tmp = hidden_sibling(path)
        os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


class MemoryStore(Store):
    """fsspec's ``memory://`` (one process; tests): a write sets the whole value at once."""

    kind = StoreKind.MEMORY
    protocols: ClassVar[tuple[str, ...]] = ("memory",)
    _lock = threading.Lock()

    def write_atomic(self, fs: Any, path: str, data: bytes) -> None:
        fs.pipe_file(path, bytes(data))

    def write_once(self, fs: Any, path: str, data: bytes) -> bool:
        with self._lock:
            if fs.exists(path):
                return False
            fs.pipe_file(path, bytes(data))
            return True
