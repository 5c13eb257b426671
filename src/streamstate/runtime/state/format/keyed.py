"""The canonical keyed-state formats every backend writes and reads: snapshots and deltas.

They speak the keyed-store contract (``runtime/state/store.py``): a snapshot writes each
store's entries per key group (:meth:`KeyedStore.entries`), a delta its changes
(:meth:`KeyedStore.changes`), and reading puts entries back (:meth:`KeyedStore.load`,
:meth:`KeyedStore.remove`), so a snapshot of one backend restores into any other.

All integers are big-endian; a *frame* is ``u32 length`` followed by that many
bytes. Blobs are written with the serializers' bulk ``serialize_many`` paths.

Full snapshot (``KeyedSnapshot.data``)::

    header   b"SSKS" u16 format_version u16 0
    per key group with state (located by ``offsets[kg]``):
        b"KG" u16 format_version u32 kg u32 n_blocks
        per (state, namespace) block:
            u32 state_id (index into meta["states"]) frame(namespace bytes)
            u32 n_entries frame(keys blob) payload

    payload by kind
        value / reducing / aggregating: frame(values blob)
        list: frame(element counts, u32 each) frame(elements blob)
        map:  frame(entry counts, u32 each) frame(user keys blob) frame(user values blob)

Delta (``snapshot_delta``)::

    b"SSKD" u16 format_version u16 0 frame(JSON meta {"states": [...]}) u32 n_blocks
    per block: u32 state_id u32 kg frame(namespace bytes)
               u32 n_puts frame(keys blob) payload  u32 n_deletes frame(keys blob)

``meta`` of a full snapshot is ``{"format", "format_version", "states": [state
meta]}``; a state meta is ``KeyedStore.meta()``: name, kind and the serializer
snapshots. Unknown magic or a newer version raises ``CorruptCheckpointError``. The
format's name says where it started (``streamstate-heap-keyed``); it is every backend's.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

from streamstate.errors import CorruptCheckpointError, StateSerializationError
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.state.store import KeyedStore

__all__ = [
    "DELTA_MAGIC",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SNAPSHOT_MAGIC",
    "Reader",
    "apply_delta_blocks",
    "check_meta",
    "delta_states_meta",
    "join_delta",
    "read_delta",
    "read_section",
    "write_delta",
    "write_full",
]

SNAPSHOT_MAGIC = b"SSKS"
DELTA_MAGIC = b"SSKD"
SECTION_MAGIC = b"KG"
FORMAT_NAME = "streamstate-heap-keyed"
FORMAT_VERSION = 1

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_HEADER = struct.Struct(">4sHH")
_SECTION = struct.Struct(">2sHII")
_BLOCK = struct.Struct(">I")
_DELTA_BLOCK = struct.Struct(">II")

#: (state name, operator name) used to report serialization failures
Ctx = tuple[str, str]


# ------------------------------------------------------------------------------ writing


def _frame(parts: list[bytes], blob: bytes) -> None:
    parts.append(_U32.pack(len(blob)))
    parts.append(blob)


def _counts_blob(counts: list[int]) -> bytes:
    a = array("I", counts)
    if sys.byteorder == "little":
        a.byteswap()
    return a.tobytes()


def _counts_from(blob: bytes | memoryview) -> list[int]:
    if len(blob) % 4:
        raise CorruptCheckpointError("keyed state: element count block is truncated")
    a = array("I")
    a.frombytes(bytes(blob))
    if sys.byteorder == "little":
        a.byteswap()
    return a.tolist()


def serialize_many(ser: TypeSerializer, values: Sequence[Any], ctx: Ctx) -> bytes:
    """``ser.serialize_many(values)``; a failure names the state, operator and value type."""
    try:
        return ser.serialize_many(values)
    except Exception as bulk_error:
        for v in values:
            try:
                ser.serialize(v)
            except Exception as e:
                raise StateSerializationError(
                    ctx[0], ctx[1], type(v).__qualname__, f"{type(e).__name__}: {e}"
                ) from e
        tname = type(values[0]).__qualname__ if values else "?"
        raise StateSerializationError(
            ctx[0], ctx[1], tname, f"{type(bulk_error).__name__}: {bulk_error}"
        ) from bulk_error


def _write_entries(
    parts: list[bytes], store: KeyedStore, keys: list[Any], values: list[Any], ctx: Ctx
) -> None:
    """``u32 n frame(keys) payload`` for ``keys``/``values`` of ``store``'s kind."""
    sers = store.serializers
    parts.append(_U32.pack(len(keys)))
    _frame(parts, serialize_many(sers.key, keys, ctx))
    kind = store.kind
    if kind == "list":
        _frame(parts, _counts_blob([len(v) for v in values]))
        _frame(parts, serialize_many(sers.value, [x for v in values for x in v], ctx))
    elif kind == "map":
        assert sers.user_key is not None
        _frame(parts, _counts_blob([len(v) for v in values]))
        _frame(parts, serialize_many(sers.user_key, [k for v in values for k in v], ctx))
        _frame(parts, serialize_many(sers.value, [x for v in values for x in v.values()], ctx))
    else:
        _frame(parts, serialize_many(sers.value, values, ctx))


def _ns_bytes(store: KeyedStore, ns: Any, ctx: Ctx) -> bytes:
    try:
        return store.serializers.namespace.serialize(ns)
    except Exception as e:
        raise StateSerializationError(ctx[0], ctx[1], type(ns).__qualname__, str(e)) from e


def write_full(
    stores: Sequence[KeyedStore], kg_start: int, size: int, operator: str
) -> tuple[bytes, dict[int, tuple[int, int]], dict[str, Any]]:
    """``(data, offsets, meta)`` of a full snapshot of ``stores``."""
    out: list[bytes] = [_HEADER.pack(SNAPSHOT_MAGIC, FORMAT_VERSION, 0)]
    pos = _HEADER.size
    offsets: dict[int, tuple[int, int]] = {}
    for kgi in range(size):
        parts: list[bytes] = []
        n_blocks = 0
        for sid, store in enumerate(stores):
            ctx = (store.name, operator)
            for ns, keys, values in store.entries(kgi):
                parts.append(_BLOCK.pack(sid))
                _frame(parts, _ns_bytes(store, ns, ctx))
                _write_entries(parts, store, keys, values, ctx)
                n_blocks += 1
        if not n_blocks:
            continue
        kg = kg_start + kgi
        section = _SECTION.pack(SECTION_MAGIC, FORMAT_VERSION, kg, n_blocks) + b"".join(parts)
        offsets[kg] = (pos, len(section))
        out.append(section)
        pos += len(section)
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "states": [store.meta() for store in stores],
    }
    return b"".join(out), offsets, meta


def write_delta(stores: Sequence[KeyedStore], kg_start: int, operator: str) -> bytes:
    """The changes recorded in ``stores`` (does not clear them)."""
    changed = [store for store in stores if store.has_changes()]
    parts: list[bytes] = []
    n_blocks = 0
    for sid, store in enumerate(changed):
        ctx = (store.name, operator)
        ns_blobs: dict[Any, bytes] = {}
        for ns, kgi, puts, values, deletes in store.changes():
            ns_blob = ns_blobs.get(ns)
            if ns_blob is None:
                ns_blob = ns_blobs[ns] = _ns_bytes(store, ns, ctx)
            parts.append(_DELTA_BLOCK.pack(sid, kg_start + kgi))
            _frame(parts, ns_blob)
            _write_entries(parts, store, puts, values, ctx)
            parts.append(_U32.pack(len(deletes)))
            _frame(parts, serialize_many(store.serializers.key, deletes, ctx))
            n_blocks += 1
    meta = json.dumps({"states": [store.meta() for store in changed]}, sort_keys=True).encode()
    head = [_HEADER.pack(DELTA_MAGIC, FORMAT_VERSION, 0), _U32.pack(len(meta)), meta]
    head.append(_U32.pack(n_blocks))
    return b"".join(head + parts)


# ------------------------------------------------------------------------------ reading


class Reader:
    """Bounds-checked cursor over snapshot bytes; truncation is ``CorruptCheckpointError``."""

    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: bytes | memoryview, what: str) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.what = what

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise CorruptCheckpointError(f"{self.what} is truncated or damaged")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def unpack(self, st: struct.Struct) -> tuple[Any, ...]:
        return st.unpack(self.take(st.size))

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def frame(self) -> memoryview:
        return self.take(self.u32())

    def at_end(self) -> bool:
        return self.pos == len(self.buf)


def _check_version(magic: bytes, expected: bytes, version: int, what: str) -> None:
    if magic != expected:
        raise CorruptCheckpointError(
            f"{what} does not start with {expected!r} (found {bytes(magic)!r}): "
            f"not a streamstate heap keyed state file, or damaged"
        )
    if version != FORMAT_VERSION:
        raise CorruptCheckpointError(
            f"{what} has format version {version}; this streamstate reads version "
            f"{FORMAT_VERSION} only (written by a newer streamstate?)"
        )


def check_meta(meta: dict[str, Any]) -> None:
    """Validate a keyed handle's meta written by :func:`write_full`."""
    if meta.get("format") != FORMAT_NAME:
        raise CorruptCheckpointError(
            f"keyed state handle has format {meta.get('format')!r}, expected {FORMAT_NAME!r} "
            f"(written by another state backend?)"
        )
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise CorruptCheckpointError(
            f"keyed state handle has format version {version!r}; this streamstate reads "
            f"version {FORMAT_VERSION} only (written by a newer streamstate?)"
        )
    if not isinstance(meta.get("states"), list):
        raise CorruptCheckpointError("keyed state handle meta lacks its 'states' list")


def _deser(ser: TypeSerializer, blob: memoryview, what: str) -> list[Any]:
    try:
        return ser.deserialize_many(bytes(blob))
    except Exception as e:
        raise CorruptCheckpointError(f"{what}: cannot deserialize ({type(e).__name__}: {e})") from e


def _read_entries(r: Reader, kind: str, sers: Any, what: str) -> tuple[list[Any], list[Any]]:
    """Inverse of :func:`_write_entries`: ``(keys, values)`` as stored objects."""
    n = r.u32()
    keys = _deser(sers.key, r.frame(), what)
    if kind == "list" or kind == "map":
        counts = _counts_from(r.frame())
        if kind == "list":
            flat = _deser(sers.value, r.frame(), what)
            if sum(counts) != len(flat):
                raise CorruptCheckpointError(f"{what}: list element counts do not match")
            it = iter(flat)
            values: list[Any] = [list(islice(it, c)) for c in counts]
        else:
            uks = _deser(sers.user_key, r.frame(), what)
            uvs = _deser(sers.value, r.frame(), what)
            if sum(counts) != len(uks) or len(uks) != len(uvs):
                raise CorruptCheckpointError(f"{what}: map entry counts do not match")
            ki, vi = iter(uks), iter(uvs)
            values = [dict(zip(islice(ki, c), islice(vi, c), strict=True)) for c in counts]
    else:
        values = _deser(sers.value, r.frame(), what)
    if len(keys) != n or len(values) != n:
        raise CorruptCheckpointError(f"{what}: entry count does not match its blobs")
    return keys, values


def read_header(data: bytes | memoryview, magic: bytes, what: str) -> Reader:
    r = Reader(data, what)
    m, version, _ = r.unpack(_HEADER)
    _check_version(bytes(m), magic, version, what)
    return r


def read_section(
    section: bytes | memoryview,
    kg: int,
    resolve: Callable[[int], tuple[KeyedStore, Any]],
    kgi: int,
) -> None:
    """Load key group ``kg``'s section into the stores (at index ``kgi``).

    ``resolve(state_id) -> (store, serializers used to read)``.
    """
    what = f"keyed state of key group {kg}"
    r = Reader(section, what)
    magic, version, found_kg, n_blocks = r.unpack(_SECTION)
    _check_version(bytes(magic), SECTION_MAGIC, version, what)
    if found_kg != kg:
        raise CorruptCheckpointError(f"{what}: section holds key group {found_kg} instead")
    for _ in range(n_blocks):
        (sid,) = r.unpack(_BLOCK)
        store, sers = resolve(sid)
        ns = _deser_one(sers.namespace, r.frame(), what)
        keys, values = _read_entries(r, store.kind, sers, f"{what}, state {store.name!r}")
        store.load(kgi, ns, keys, values)
    if not r.at_end():
        raise CorruptCheckpointError(f"{what}: trailing bytes after the last state block")


def _deser_one(ser: TypeSerializer, blob: memoryview, what: str) -> Any:
    try:
        return ser.deserialize(bytes(blob))
    except Exception as e:
        raise CorruptCheckpointError(f"{what}: cannot deserialize namespace ({e})") from e


def read_delta(
    data: bytes,
    resolve_meta: Callable[[list[dict[str, Any]]], list[tuple[KeyedStore, Any]]],
    kg_index: Callable[[int], int | None],
) -> None:
    """Replay a delta: puts and tombstones of key groups where ``kg_index(kg)`` is not None.

    ``resolve_meta(states_meta)`` returns per state id the store and read serializers.
    """
    what = "keyed state delta"
    r = read_header(data, DELTA_MAGIC, what)
    try:
        meta = json.loads(bytes(r.frame()).decode("utf-8"))
        states_meta = meta["states"]
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpointError(f"{what}: damaged metadata ({e})") from e
    resolved = resolve_meta(states_meta)
    for _ in range(r.u32()):
        _apply_block(r, resolved, kg_index, what)
    if not r.at_end():
        raise CorruptCheckpointError(f"{what}: trailing bytes after the last block")


def _apply_block(
    r: Reader,
    resolved: list[tuple[KeyedStore, Any]],
    kg_index: Callable[[int], int | None],
    what: str,
) -> None:
    sid, kg = r.unpack(_DELTA_BLOCK)
    if sid >= len(resolved):
        raise CorruptCheckpointError(f"{what}: unknown state id {sid}")
    store, sers = resolved[sid]
    ns_blob = r.frame()
    kgi = kg_index(kg)
    if kgi is None:  # not ours (rescaled): skip without deserializing
        _skip_entries(r, store.kind)
        r.u32()
        r.frame()
        return
    ns = _deser_one(sers.namespace, ns_blob, what)
    keys, values = _read_entries(r, store.kind, sers, f"{what}, state {store.name!r}")
    n_dels = r.u32()
    dels = _deser(sers.key, r.frame(), what)
    if len(dels) != n_dels:
        raise CorruptCheckpointError(f"{what}: tombstone count does not match")
    if keys:
        store.load(kgi, ns, keys, values)
    if dels:
        store.remove(kgi, ns, dels)


def apply_delta_blocks(
    blocks: Sequence[bytes],
    resolved: list[tuple[KeyedStore, Any]],
    kg_index: Callable[[int], int | None],
) -> None:
    """Replay blocks of a delta (``keyed_index.split_delta``) whose states were resolved
    already (``resolve_meta`` of :func:`read_delta` on the delta's meta): what
    ``read_delta`` does for them, without parsing and resolving the meta again."""
    what = "keyed state delta"
    for block in blocks:
        r = Reader(block, what)
        _apply_block(r, resolved, kg_index, what)
        if not r.at_end():
            raise CorruptCheckpointError(f"{what}: trailing bytes after a block")


def delta_states_meta(prefix: bytes) -> list[dict[str, Any]]:
    """The states' meta of a delta's prefix (from ``keyed_index.split_delta``)."""
    what = "keyed state delta"
    r = read_header(prefix, DELTA_MAGIC, what)
    try:
        states = json.loads(bytes(r.frame()).decode("utf-8"))["states"]
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpointError(f"{what}: damaged metadata ({e})") from e
    if not isinstance(states, list):
        raise CorruptCheckpointError(f"{what}: damaged metadata (no states list)")
    return states


def join_delta(prefix: bytes, blocks: list[bytes]) -> bytes:
    """The delta of ``blocks`` (from ``keyed_index.split_delta``)."""
    return b"".join([prefix, _U32.pack(len(blocks)), *blocks])


def _skip_entries(r: Reader, kind: str) -> None:
    r.u32()
    r.frame()
    for _ in range({"list": 2, "map": 3}.get(kind, 1)):
        r.frame()
