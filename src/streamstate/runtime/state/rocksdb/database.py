"""Opening a RocksDB backend's database and creating its directory (errors name the path)."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

from rocksdict import Rdict

from streamstate.errors import ConfigurationError, StateAccessError

if TYPE_CHECKING:
    from streamstate.runtime.state.rocksdb.backend import RocksDBKeyedStateBackend

__all__ = [
    "RocksDBStorageError",
    "close_database",
    "default_local_dir",
    "make_database_dir",
    "open_database",
]


class RocksDBStorageError(StateAccessError, OSError):
    """The local RocksDB directory cannot be created, opened or written (names the path)."""


def default_local_dir() -> str:
    """The executor's local disk: the first of Spark's ``SPARK_LOCAL_DIRS`` (set by the
    cluster manager on executors), else the system temporary directory."""
    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d.strip()]
    return dirs[0].strip() if dirs else tempfile.gettempdir()


def open_database(
    backend: RocksDBKeyedStateBackend, path: str, column_families: dict[str, Any]
) -> Rdict:
    """Open (or create) the database at ``path``; I/O errors name the path."""
    try:
        db = Rdict(path, backend.options, column_families=column_families or None)
    except Exception as e:
        shutil.rmtree(path, ignore_errors=True)
        raise backend.io_error("open the database", e, path) from e
    if backend.raw_options:
        try:
            db.set_options(backend.raw_options)
        except Exception as e:
            db.close()
            raise ConfigurationError(
                f"RocksDB rejected the raw options {backend.raw_options!r} "
                f"({type(e).__name__}: {e}); pass mutable RocksDB option names with "
                f"string values, e.g. {{'level0_file_num_compaction_trigger': '8'}}"
            ) from e
    return db


def close_database(backend: RocksDBKeyedStateBackend) -> None:
    """Close ``backend``'s database if it was opened (see ``opened_database``)."""
    if backend.db is not None:
        backend.db.close()


def make_database_dir(local_dir: str | None, operator_name: str) -> str:
    prefix = "rocksdb-" + "".join(c if c.isalnum() else "_" for c in operator_name)[:40] + "-"
    where = local_dir if local_dir is not None else tempfile.gettempdir()
    try:
        os.makedirs(where, exist_ok=True)
        return tempfile.mkdtemp(prefix=prefix, dir=where)
    except OSError as e:
        raise RocksDBStorageError(
            f"RocksDB state backend: cannot create its directory under {where!r} "
            f"({type(e).__name__}: {e.strerror or e}); check that the local directory "
            f"(state.backend.rocksdb.localdir) exists, is writable and has free space"
        ) from e
