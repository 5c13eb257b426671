"""One state's column families in the RocksDB backend (see ``states.py`` for the layout).

A state has one column family for the void namespace (named as the state) and,
created on the first access in another namespace (a window), a second one
named ``<state name>`` + :data:`NS_CF_SUFFIX` for every other namespace.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from streamstate.errors import StateSerializationError
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.format.serializers import StateSerializers
from streamstate.runtime.state.rocksdb.adapters import DirtyValues, Entries, Sinks
from streamstate.runtime.state.rocksdb.encoding import (
    MAX_VALUE_BYTES,
    frame_elements,
    map_key_matches,
    unframe_elements,
)
from streamstate.runtime.state.rocksdb.encoding import (
    MISSING as _MISSING,
)

if TYPE_CHECKING:
    from streamstate.runtime.state.rocksdb.backend import RocksDBKeyedStateBackend

__all__ = ["NS_CF_SUFFIX", "StateColumn"]

_KG = struct.Struct(">H")
_U32 = struct.Struct(">I")
#: name suffix of a state's namespaced column family (RocksDB rejects NUL in names)
NS_CF_SUFFIX = "\x1fnamespaces"
#: bound of the per-column cache of serialized namespaces (cleared when full)
_NS_CACHE_MAX = 4096


class _Namespaces:
    """``namespaces[ns]`` for the heap delta writer: :class:`DirtyValues` of any namespace."""

    __slots__ = ("col",)

    def __init__(self, col: StateColumn) -> None:
        self.col = col

    def __getitem__(self, namespace: Any) -> DirtyValues:
        return DirtyValues(self.col, namespace)


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
        #: the column family of every non-void namespace (``None`` until first needed)
        self.ns_cf: Any = None
        self.serializers: StateSerializers = sers
        #: namespace -> {key: kgi} changed since the last snapshot/delta
        self.dirty: dict[Any, dict[Any, int]] = {VOID_NAMESPACE: {}}
        self.namespaces = _Namespaces(self)
        self.restored_meta: dict[str, Any] | None = None
        #: state handles bound to this column (re-bound when ``clear_dirty`` prunes)
        self.handles: list[Any] = []
        self._ns_suffix: dict[Any, bytes] = {}

    @property
    def ns_cf_name(self) -> str:
        return self.name + NS_CF_SUFFIX

    # ---------------------------------------------------------------- namespaces
    def ns_suffix(self, namespace: Any) -> bytes:
        """What follows ``kg + key`` in a RocksDB key of ``namespace``.

        Empty for the void namespace; else the namespace serializer's bytes and
        their length (``u32``), so every key of the namespaced column family
        decodes on its own (the key serializer need not be prefix-free).
        """
        if namespace is VOID_NAMESPACE:
            return b""
        cache = self._ns_suffix
        try:
            sfx = cache.get(namespace)
        except TypeError:  # unhashable namespace: serialize every time
            sfx = None
            cache = None  # type: ignore[assignment]  # no cache: every lookup serializes
        if sfx is None:
            try:
                nsb = self.serializers.namespace.serialize(namespace)
            except Exception as e:
                raise StateSerializationError(
                    self.name,
                    self.backend.operator_name,
                    type(namespace).__qualname__,
                    f"the namespace cannot be serialized ({type(e).__name__}: {e})",
                ) from e
            sfx = nsb + _U32.pack(len(nsb))
            if cache is not None:
                if len(cache) >= _NS_CACHE_MAX:
                    cache.clear()
                cache[namespace] = sfx
        return sfx

    def cf_for(self, namespace: Any) -> Any:
        """The column family holding ``namespace`` (creates the namespaced one if needed)."""
        if namespace is VOID_NAMESPACE:
            return self.cf
        return self.ns_cf if self.ns_cf is not None else self.namespaced_cf()

    def namespaced_cf(self) -> Any:
        """The column family of the non-void namespaces (created on first use)."""
        if self.ns_cf is None:
            self.ns_cf = self.backend._ns_column_family(self)
        return self.ns_cf

    def dirty_of(self, namespace: Any) -> dict[Any, int]:
        d = self.dirty.get(namespace)
        if d is None:
            d = self.dirty[namespace] = {}
        return d

    def decode_ns_prefix(self, prefix: bytes) -> tuple[Any, Any]:
        """``(key, namespace)`` of a namespaced column family's ``kg + key + ns + u32`` prefix."""
        (nlen,) = _U32.unpack_from(prefix, len(prefix) - 4)
        end = len(prefix) - 4 - nlen
        ns = self.serializers.namespace.deserialize(prefix[end : len(prefix) - 4])
        return self.serializers.key.deserialize(prefix[2:end]), ns

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

    def _scan(self, lo: bytes, hi: bytes | None, cf: Any = None) -> Iterator[tuple[bytes, bytes]]:
        it = (self.cf if cf is None else cf).iter()
        it.seek(lo)
        while it.valid():
            rk = it.key()
            if hi is not None and rk >= hi:
                break
            if not rk.startswith(lo) and hi is None:
                break
            yield rk, it.value()
            it.next()

    def read(self, kb: bytes, cf: Any = None) -> Any:
        """The stored object of RocksDB key prefix ``kb`` (a dict for map state) or ``_MISSING``.

        ``cf``: the column family (default: the void namespace's).
        """
        cf = self.cf if cf is None else cf
        if self.kind != "map":
            data = cf.get(kb)
            return _MISSING if data is None else self.decode(data)
        uk, val = self.serializers.user_key.deserialize, self.serializers.value.deserialize  # type: ignore[union-attr]  # map state always has a user-key serializer
        out = {}
        for rk, v in self._scan(kb, None, cf):
            if map_key_matches(rk, len(kb)) >= 0:
                out[uk(rk[len(kb) : len(rk) - 4])] = val(v)
        return out if out else _MISSING

    def write(self, batch: Any, kb: bytes, obj: Any, cf: Any = None) -> None:
        """Replace the object at ``kb`` of ``cf`` (used by restore and delta replay)."""
        if self.kind != "map":
            batch.append((kb, self.encode(obj)))
            return
        self.delete(batch, kb, cf)
        sers = self.serializers
        for k, v in obj.items():
            ukb = sers.user_key.serialize(k)  # type: ignore[union-attr]  # map state always has a user-key serializer
            batch.append((kb + ukb + _U32.pack(len(ukb)), sers.value.serialize(v)))

    def delete(self, batch: Any, kb: bytes, cf: Any = None) -> None:
        if self.kind != "map":
            batch.append((kb, None))
            return
        for rk, _ in self._scan(kb, None, cf):
            if map_key_matches(rk, len(kb)) >= 0:
                batch.append((rk, None))

    def prefix_of(self, rk: bytes) -> bytes:
        """The (key group, key, namespace) prefix of a stored RocksDB key."""
        if self.kind == "map":
            (ulen,) = _U32.unpack_from(rk, len(rk) - 4)
            return rk[: len(rk) - 4 - ulen]
        return rk

    def decode_key(self, rk: bytes) -> tuple[bytes, Any]:
        """``(key bytes, key)`` of a stored RocksDB key of the void namespace."""
        kb = self.prefix_of(rk)
        return kb, self.serializers.key.deserialize(kb[2:])

    # ---------------------------------------------------------------- heap writer API
    def _group_entries(self, rows: Iterator[tuple[bytes, bytes]], e: Entries, decode: Any) -> None:
        """Fill ``e`` from the rows of one namespace (``decode(prefix) -> key``)."""
        if self.kind != "map":
            for rk, v in rows:
                e.keys.append(decode(rk))
                e.vals.append(self.decode(v))
            return
        sers = self.serializers
        uk, val = sers.user_key.deserialize, sers.value.deserialize  # type: ignore[union-attr]  # map state always has a user-key serializer
        groups: dict[bytes, Any] = {}
        for rk, v in rows:
            kb = self.prefix_of(rk)
            d = groups.get(kb)
            if d is None:
                d = groups[kb] = {}
                e.keys.append(decode(kb))
                e.vals.append(d)
            d[uk(rk[len(kb) : len(rk) - 4])] = val(v)

    def entries(self, kgi: int) -> Iterator[tuple[Any, Entries]]:
        """``(namespace, entries)`` of key group index ``kgi`` (non-empty only)."""
        kg = self.backend._start + kgi
        lo = _KG.pack(kg)
        hi = _KG.pack(kg + 1) if kg < 0xFFFF else None
        e = Entries()
        key_of = self.serializers.key.deserialize
        self._group_entries(self._scan(lo, hi), e, lambda kb: key_of(kb[2:]))
        if e:
            yield VOID_NAMESPACE, e
        if self.ns_cf is None:
            return
        # namespaced rows: split per namespace (a namespace's rows are not contiguous)
        per_ns: dict[bytes, list[tuple[bytes, bytes]]] = {}
        for rk, v in self._scan(lo, hi, self.ns_cf):
            p = self.prefix_of(rk)
            (nlen,) = _U32.unpack_from(p, len(p) - 4)
            nsb = p[len(p) - 4 - nlen :]
            rows = per_ns.get(nsb)
            if rows is None:
                rows = per_ns[nsb] = []
            rows.append((rk, v))
        for nsb, rows in per_ns.items():
            ns = self.serializers.namespace.deserialize(nsb[:-4])
            e = Entries()
            self._group_entries(iter(rows), e, lambda kb, n=len(nsb): key_of(kb[2 : len(kb) - n]))
            yield ns, e

    def has_changes(self) -> bool:
        return any(self.dirty.values())

    def clear_dirty(self) -> None:
        """Forget the recorded changes; drops the dirty sets of non-void namespaces
        (windows come and go) except those handles are bound to (kept, emptied)."""
        void = self.dirty[VOID_NAMESPACE]
        void.clear()
        if len(self.dirty) > 1:
            self.dirty = {VOID_NAMESPACE: void}
            for h in self.handles:
                if h._namespace is not VOID_NAMESPACE:
                    h._dirty.clear()
                    self.dirty[h._namespace] = h._dirty
        if len(self._ns_suffix) > 64:
            self._ns_suffix.clear()

    def meta(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, **self.serializers.to_meta()}

    # ---------------------------------------------------------------- heap reader API
    def maps(self, namespace: Any) -> Sinks:
        return Sinks(self, namespace)

    def keys(self) -> list[Any]:
        """The keys with a value in the void namespace."""
        seen: dict[bytes, Any] = {}
        for rk, _ in self._scan(b"", None):
            kb, key = self.decode_key(rk)
            if kb not in seen:
                seen[kb] = key
        return list(seen.values())

    def keys_and_namespaces(self) -> list[tuple[Any, Any]]:
        """Every ``(key, namespace)`` with a value (void namespace first, then the windows
        of each key group), in key group order."""
        out = [(key, VOID_NAMESPACE) for key in self.keys()]
        if self.ns_cf is None:
            return out
        seen: set[bytes] = set()
        for rk, _ in self._scan(b"", None, self.ns_cf):
            p = self.prefix_of(rk)
            if p not in seen:
                seen.add(p)
                out.append(self.decode_ns_prefix(p))
        return out
