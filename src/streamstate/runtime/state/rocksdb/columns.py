"""One state's column family in the RocksDB backend (see ``states.py`` for the layout)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from streamstate.runtime.errors import CorruptCheckpointError, StateSerializationError
from streamstate.runtime.state.base import VOID_NAMESPACE
from streamstate.runtime.state.heap.table import StateSerializers
from streamstate.runtime.state.rocksdb.states import (
    MAX_VALUE_BYTES,
    DirtyValues,
    Entries,
    Sinks,
    frame_elements,
    map_key_matches,
    unframe_elements,
)
from streamstate.runtime.state.rocksdb.states import (
    MISSING as _MISSING,
)

if TYPE_CHECKING:
    from streamstate.runtime.state.rocksdb.backend import RocksDBKeyedStateBackend

__all__ = ["StateColumn"]

_KG = struct.Struct(">H")
_U32 = struct.Struct(">I")


class StateColumn:
    """One state's column family; duck-types the heap ``StateTable`` for the heap formats.

    ``serializers`` are the ones the stored bytes are written with. ``entries``,
    ``dirty``, ``namespaces`` and ``has_changes`` serve the heap writers; ``maps``
    serves the heap readers (it returns sinks writing into RocksDB).
    """

    def __init__(
        self, backend: RocksDBKeyedStateBackend, name: str, kind: str, cf: Any, sers: Any
    ) -> None:
        self.backend = backend
        self.name = name
        self.kind = kind
        self.cf = cf
        self.serializers: StateSerializers = sers
        self.dirty: dict[Any, dict[Any, int]] = {VOID_NAMESPACE: {}}
        self.namespaces = {VOID_NAMESPACE: DirtyValues(self)}
        self.restored_meta: dict[str, Any] | None = None

    # ---------------------------------------------------------------- encoding
    def encode(self, obj: Any) -> bytes:
        """Stored bytes of a value/list object (not map state)."""
        sers = self.serializers
        data = frame_elements(sers.value, obj) if self.kind == "list" else sers.value.serialize(obj)
        if len(data) > MAX_VALUE_BYTES:
            raise StateSerializationError(
                self.name,
                self.backend.operator_name,
                type(obj).__qualname__,
                f"{len(data)} bytes is more than the {MAX_VALUE_BYTES} bytes a value may have",
            )
        return data

    def decode(self, data: bytes) -> Any:
        if self.kind == "list":
            return unframe_elements(self.serializers.value, data)
        return self.serializers.value.deserialize(data)

    def _scan(self, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        it = self.cf.iter()
        it.seek(lo)
        while it.valid():
            rk = it.key()
            if hi is not None and rk >= hi:
                break
            if not rk.startswith(lo) and hi is None:
                break
            yield rk, it.value()
            it.next()

    def read(self, kb: bytes) -> Any:
        """The stored object of RocksDB key prefix ``kb`` (a dict for map state) or ``_MISSING``."""
        if self.kind != "map":
            data = self.cf.get(kb)
            return _MISSING if data is None else self.decode(data)
        uk, val = self.serializers.user_key.deserialize, self.serializers.value.deserialize  # type: ignore[union-attr]
        out = {}
        for rk, v in self._scan(kb, None):
            if map_key_matches(rk, len(kb)) >= 0:
                out[uk(rk[len(kb) : len(rk) - 4])] = val(v)
        return out if out else _MISSING

    def write(self, batch: Any, kb: bytes, obj: Any) -> None:
        """Replace the object at ``kb`` (used by restore and delta replay)."""
        if self.kind != "map":
            batch.append((kb, self.encode(obj)))
            return
        self.delete(batch, kb)
        sers = self.serializers
        for k, v in obj.items():
            ukb = sers.user_key.serialize(k)  # type: ignore[union-attr]
            batch.append((kb + ukb + _U32.pack(len(ukb)), sers.value.serialize(v)))

    def delete(self, batch: Any, kb: bytes) -> None:
        if self.kind != "map":
            batch.append((kb, None))
            return
        for rk, _ in self._scan(kb, None):
            if map_key_matches(rk, len(kb)) >= 0:
                batch.append((rk, None))

    def decode_key(self, rk: bytes) -> tuple[bytes, Any]:
        """``(key bytes, key)`` of a stored RocksDB key."""
        if self.kind == "map":
            (ulen,) = _U32.unpack_from(rk, len(rk) - 4)
            kb = rk[: len(rk) - 4 - ulen]
        else:
            kb = rk
        return kb, self.serializers.key.deserialize(kb[2:])

    # ---------------------------------------------------------------- heap writer API
    def entries(self, kgi: int) -> Iterator[tuple[Any, Entries]]:
        """``(namespace, entries)`` of key group index ``kgi`` (non-empty only)."""
        kg = self.backend._start + kgi
        lo = _KG.pack(kg)
        hi = _KG.pack(kg + 1) if kg < 0xFFFF else None
        e = Entries()
        if self.kind != "map":
            for rk, v in self._scan(lo, hi):
                e.keys.append(self.decode_key(rk)[1])
                e.vals.append(self.decode(v))
        else:
            sers = self.serializers
            groups: dict[bytes, Any] = {}
            for rk, v in self._scan(lo, hi):
                kb, key = self.decode_key(rk)
                d = groups.get(kb)
                if d is None:
                    d = groups[kb] = {}
                    e.keys.append(key)
                    e.vals.append(d)
                d[sers.user_key.deserialize(rk[len(kb) : len(rk) - 4])] = sers.value.deserialize(v)  # type: ignore[union-attr]
        if e:
            yield VOID_NAMESPACE, e

    def has_changes(self) -> bool:
        return bool(self.dirty[VOID_NAMESPACE])

    def clear_dirty(self) -> None:
        self.dirty[VOID_NAMESPACE].clear()

    def meta(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, **self.serializers.to_meta()}

    # ---------------------------------------------------------------- heap reader API
    def maps(self, namespace: Any) -> Sinks:
        if namespace is not VOID_NAMESPACE:
            raise CorruptCheckpointError(
                f"state {self.name!r}: the RocksDB backend supports the void namespace only "
                f"(checkpoint has {namespace!r})"
            )
        return Sinks(self)

    def keys(self) -> list[Any]:
        seen: dict[bytes, Any] = {}
        for rk, _ in self._scan(b"", None):
            kb, key = self.decode_key(rk)
            if kb not in seen:
                seen[kb] = key
        return list(seen.values())
