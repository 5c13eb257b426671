"""The embedded RocksDB keyed state backend (``"rocksdb"``); see :mod:`.backend`."""

from streamstate.runtime.state.rocksdb.backend import RocksDBKeyedStateBackend, RocksDBStorageError
from streamstate.runtime.state.rocksdb.encoding import MAX_VALUE_BYTES

__all__ = ["MAX_VALUE_BYTES", "RocksDBKeyedStateBackend", "RocksDBStorageError"]
