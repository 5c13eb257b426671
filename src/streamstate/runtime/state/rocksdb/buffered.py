"""A column family with an in-memory layer: an epoch's reads and writes of a key batched.

A call into RocksDB from Python costs microseconds (rocksdict builds its options and
crosses the GIL on every ``get`` and ``put``), and a keyed operator touches the same keys
many times an epoch. A :class:`BufferedColumnFamily` keeps the stored bytes of every key
read or written through it in a dict: a read of a known key is a dict lookup, a write a
dict store, and the written entries reach RocksDB as one write batch at the next
:meth:`~BufferedColumnFamily.flush`. It holds *bytes*, so a read still deserializes a
copy and a write still serializes (and fails, typed) at once, as without it.

Coherence: every write to the column family goes through its wrapper (accesses, bulk
writes of restores, migrations and TTL passes), and everything that reads RocksDB other
than by key flushes first: an iterator (:meth:`~BufferedColumnFamily.iter`: snapshots,
listings, map state scans, TTL passes) and the backend's database-level operations
(a checkpoint of its files, see ``RocksDBKeyedStateBackend.flush_buffers``). Memory is
bounded: past ``limit`` entries the layer flushes and forgets every entry. Nothing
buffered needs to survive a crash: RocksDB runs without a write-ahead log here, and
recovery is from checkpoints, which always flush first.

Decoded values: for a state whose value serializer round-trips some types exactly
(immutable values: ``ExactValues``, e.g. ``Types.LONG()``'s ints), the layer also keeps
the decoded object of an entry next to its bytes (``objects``), so a read of a known key
returns it without deserializing; :meth:`~BufferedColumnFamily.put_object` writes bytes
and object together, and every other write of the key forgets the object. Accesses bind
``entries``, ``changed`` and ``objects`` once and inline ``put_object`` on their hot
path: the three are cleared, never replaced. The rules thus live here and in
``access.py``: ``tests/unit/runtime/state/rocksdb/test_layer_coherence.py`` runs random
sequences of writes, clears, flushes, evictions and restores through both paths (and the
heap backend as the model) and compares every read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rocksdict import ReadOptions

__all__ = ["DEFAULT_LIMIT", "BufferedColumnFamily"]

#: entries a column family's layer keeps before it flushes and forgets them
DEFAULT_LIMIT = 131_072


class BufferedColumnFamily:
    """One rocksdict column family ``cf`` (named ``name``, kept as ``raw``) behind a dict
    of its entries.

    ``write_batch(name, pairs)`` writes ``(key, value or None for delete)`` pairs into
    the column family as one batch (the backend's, raising its typed I/O error).
    ``lookup`` is the layer's ``dict.get``, bound once for accesses' hot path:
    ``lookup(key, marker)`` is the known bytes (``None``: absent) or ``marker``.
    """

    def __init__(
        self,
        cf: Any,
        name: str,
        write_batch: Callable[[str, list[tuple[bytes, bytes | None]]], None],
        limit: int = DEFAULT_LIMIT,
    ) -> None:
        self.raw = cf
        self.name = name
        self.limit = limit
        self._write_batch = write_batch
        #: RocksDB key -> its stored bytes as last read or written (``None``: absent)
        self.entries: dict[bytes, bytes | None] = {}
        #: the keys of ``entries`` written since the last flush
        self.changed: set[bytes] = set()
        self.lookup = self.entries.get
        #: RocksDB key -> the decoded object of ``entries[key]``, for values that round-trip
        #: exactly (see the module docstring); a subset of ``entries``' keys
        self.objects: dict[bytes, Any] = {}

    def get(self, key: bytes) -> bytes | None:
        entries = self.entries
        data = entries.get(key, entries)  # the dict itself: a marker no entry holds
        if data is not entries:
            return data  # type: ignore[return-value]  # bytes or None, never the marker
        data = self.raw.get(key)
        if len(entries) >= self.limit:
            self.flush(forget=True)
        entries[key] = data
        return data

    def put(self, key: bytes, data: bytes | None) -> None:
        """Set ``key``'s bytes (``None``: delete it) at the next flush."""
        entries = self.entries
        entries[key] = data
        self.changed.add(key)
        if self.objects:
            self.objects.pop(key, None)
        if len(entries) > self.limit:
            self.flush(forget=True)

    def put_object(self, key: bytes, data: bytes | None, obj: Any) -> None:
        """:meth:`put`, and ``obj`` is what ``data`` decodes to (an exact round trip)."""
        entries = self.entries
        entries[key] = data
        self.changed.add(key)
        self.objects[key] = obj
        if len(entries) > self.limit:
            self.flush(forget=True)

    def delete(self, key: bytes) -> None:
        self.put(key, None)

    def iter(self) -> Any:
        """A RocksDB iterator over the column family, after a flush."""
        self.flush()
        return self.raw.iter()

    def items(self, lo: bytes, hi: bytes | None) -> list[tuple[bytes, bytes]]:
        """Every ``(key, value)`` from ``lo`` up to ``hi`` (excluded; ``None``: the end),
        after a flush: one call into RocksDB instead of an iterator's four per entry."""
        self.flush()
        read_options = ReadOptions()
        if hi is not None:
            read_options.set_iterate_upper_bound(hi)
        return list(self.raw.items(from_key=lo, read_opt=read_options))

    def write_many(self, pairs: list[tuple[bytes, bytes | None]]) -> None:
        """Bulk writes (restores, migrations, TTL passes): straight to RocksDB as one
        batch, after a flush; the layer forgets what it held."""
        self.flush(forget=True)
        self._write_batch(self.name, pairs)

    def flush(self, forget: bool = False) -> None:
        """Write the changed entries to RocksDB as one batch; ``forget``: then drop every
        entry (else they stay, now clean, for the next reads)."""
        changed = self.changed
        if changed:
            entries = self.entries
            self._write_batch(self.name, [(key, entries[key]) for key in changed])
            changed.clear()
        if forget:
            self.entries.clear()
            self.objects.clear()

    def discard(self) -> None:
        """Drop every entry, written or not (the backend is disposed)."""
        self.changed.clear()
        self.entries.clear()
        self.objects.clear()
        self.raw = None
