"""Schema migration of a RocksDB state: its column families rewritten eagerly, as Flink.

:func:`migrate_column` reads every stored entry of a state (both its column
families: the void namespace's and the windows') with the recorded serializers,
converts it (``runtime/state/migration.py``) and writes it back with the new
ones, in batches. Only the backend's local database is written: the checkpoint
it was restored from is never touched, so a conversion that fails half way
fails the restore (``StateMigrationError``) and a later restore starts again
from the unchanged checkpoint.
"""

from __future__ import annotations

import struct
from typing import Any

from streamstate.runtime.serializers.base import MigratesBytes
from streamstate.runtime.state.format.serializers import StateSerializers
from streamstate.runtime.state.migration import (
    migrate_holder,
    migration_error,
    needs_rewrite,
    object_migrator,
)
from streamstate.runtime.state.rocksdb.encoding import frame_elements

__all__ = ["migrate_column", "migrate_restored"]

_U32 = struct.Struct(">I")
#: entries per write batch
_BATCH = 8192
_ERRORS = (TypeError, ValueError, KeyError, AttributeError, ArithmeticError)


def migrate_column(backend: Any, col: Any, new: StateSerializers) -> int:
    """Rewrite every stored entry of ``col`` from ``col.serializers`` to ``new``;
    returns the number of entries rewritten (map state: user entries)."""
    old: StateSerializers = col.serializers
    convert = object_migrator(col.kind, old, new)
    kind = col.kind
    value_out = new.value.serialize
    # records (rows, dataclasses) rewrite bytes to bytes, without building objects
    rewrite = (
        new.value.migrate_bytes
        if isinstance(new.value, MigratesBytes) and kind not in ("list", "map")
        else None
    )
    count = 0
    for cf in (col.cf, col.ns_cf):
        if cf is None:
            continue
        batch: list[tuple[bytes, bytes | None]] = []
        for rk, v in col.scan(b"", None, cf):
            try:
                if kind == "map":
                    prefix = col.prefix_of(rk)
                    user_key = old.user_key.deserialize(rk[len(prefix) : len(rk) - 4])  # type: ignore[union-attr]  # map state always has a user-key serializer
                    ((nk, nv),) = convert({user_key: old.value.deserialize(v)}).items()
                    user_key_bytes = new.user_key.serialize(nk)  # type: ignore[union-attr]  # map state always has a user-key serializer
                    nrk = prefix + user_key_bytes + _U32.pack(len(user_key_bytes))
                    if nrk != rk:
                        batch.append((rk, None))
                    batch.append((nrk, value_out(nv)))
                elif kind == "list":
                    batch.append((rk, frame_elements(new.value, convert(col.decode(v)))))
                else:
                    nv = rewrite(v, old.value) if rewrite is not None else None
                    batch.append((rk, nv if nv is not None else value_out(convert(col.decode(v)))))
            except _ERRORS as e:
                raise migration_error(backend.operator_name, col.name, old, new, rk, e) from e
            count += 1
            if len(batch) >= _BATCH:
                col.apply(batch, cf)
                batch = []
        if batch:
            col.apply(batch, cf)
    return count


def migrate_restored(backend: Any, col: Any, new: StateSerializers) -> None:
    """Give restored column ``col`` the serializers ``new``, rewriting its column
    families first when the stored form changes (registration of a changed
    descriptor, or a delta written after a schema change on top of an older base)."""
    if needs_rewrite(col.serializers, new):
        migrate_holder(backend, col, new, migrate_column)
    col.serializers = new
