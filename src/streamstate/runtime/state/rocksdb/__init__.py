"""The embedded RocksDB keyed state backend (``"rocksdb"``); see :mod:`.backend`."""

from streamstate.runtime.state.rocksdb.backend import RocksDBKeyedStateBackend, RocksDBStorageError
from streamstate.runtime.state.rocksdb.states import MAX_VALUE_BYTES

__all__ = ["MAX_VALUE_BYTES", "RocksDBKeyedStateBackend", "RocksDBStorageError"]
