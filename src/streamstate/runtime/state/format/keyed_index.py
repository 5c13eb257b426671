"""Where the parts of the heap keyed format's blocks lie, for reading one key without
loading the rest (queryable state answers lookups from the state-version files this way).

:func:`index_delta` and :func:`index_section` parse the *headers* of a delta's blocks or of
one key group's section of a full snapshot (``format.keyed``): nothing is deserialized,
a block is a handful of offsets into the file's bytes (:class:`Block`). :func:`find_key`
finds a serialized key among a block's keys when the key serializer writes every key in
the same number of bytes back to back and equal keys as equal bytes (integer and boolean
types: ``fixed_width`` and ``canonical_bytes`` of ``serializers.basic``); its position is
then the entry's index, and :meth:`Block.value` reads the entry's value alone when the
values are fixed-width too, else the block's values once.
"""

from __future__ import annotations

import json
from typing import Any

from streamstate.errors import CorruptCheckpointError
from streamstate.runtime.serializers.base import FixedWidthBytes
from streamstate.runtime.state.format.keyed import (
    _BLOCK,
    _DELTA_BLOCK,
    _SECTION,
    DELTA_MAGIC,
    SECTION_MAGIC,
    Reader,
    _check_version,
    _read_entries,
    read_header,
)

__all__ = ["Block", "find_key", "index_delta", "index_section", "searchable_keys", "split_delta"]

#: frames after a block's keys blob, by state kind (value / reducing / aggregating: 1)
_PAYLOAD_FRAMES = {"list": 2, "map": 3}


class Block:
    """One (state, namespace) block of a key group: where its keys, entries and
    tombstones lie in ``data`` (offsets, end exclusive). ``dels_*`` is an empty span for
    a full snapshot's block. ``values_*``: the values blob (value-like kinds only)."""

    __slots__ = (
        "data",
        "at",
        "end",
        "sid",
        "void_ns",
        "n",
        "keys_at",
        "keys_end",
        "entries_at",
        "entries_end",
        "values_at",
        "values_end",
        "dels_at",
        "dels_end",
        "decoded",
        "probes",
        "index",
    )

    def __init__(self, data: bytes, sid: int, void_ns: bool) -> None:
        self.data = data
        #: where the whole block lies in ``data``
        self.at = self.end = 0
        self.sid = sid
        #: the block is of the void namespace (keyed state outside windows)
        self.void_ns = void_ns
        self.n = 0
        self.keys_at = self.keys_end = 0
        self.entries_at = self.entries_end = 0
        self.values_at = self.values_end = -1
        self.dels_at = self.dels_end = 0
        #: every entry's value, decoded on the first read that needs them
        self.decoded: list[Any] | None = None
        #: searches so far; past INDEX_AFTER, a dict of the keys' bytes -> entry index
        self.probes = 0
        self.index: dict[bytes, int] | None = None

    def value(self, i: int, kind: str, sers: Any, value_width: int) -> Any:
        """The stored value of entry ``i`` (read with ``sers``, the state's serializers as
        recorded in the file); ``value_width``: the value serializer's fixed width, 0 if
        it has none."""
        if value_width and self.values_at >= 0:
            at = self.values_at + i * value_width
            if at + value_width > self.values_end:
                raise CorruptCheckpointError("keyed state: a value lies outside its block")
            return sers.value.deserialize(self.data[at : at + value_width])
        got = self.decoded
        if got is None:
            r = Reader(memoryview(self.data)[self.entries_at : self.entries_end], "keyed state")
            _, got = _read_entries(r, kind, sers, "keyed state block")
            self.decoded = got
        return got[i]


def searchable_keys(key_serializer: Any) -> int:
    """The width of ``key_serializer``'s keys when :func:`find_key` can find them by their
    bytes (every key the same number of bytes, written back to back, equal keys as equal
    bytes), else 0."""
    if not (isinstance(key_serializer, FixedWidthBytes) and key_serializer.canonical_bytes):
        return 0
    return key_serializer.fixed_width


#: searches of a block's keys after which they are indexed (a dict of their bytes): building
#: it costs about what 35 scans of 8-byte keys do, so a block searched this often is likely
#: searched more (lookups at thousands a second), and one searched less (a lookup every few
#: epochs per key group) never pays for an index it would not use
INDEX_AFTER = 64


def find_key(block: Block, key: bytes, width: int, tombstones: bool = False) -> int:
    """Index of ``key`` (``width`` bytes, see the module docstring) among ``block``'s
    entries (``tombstones``: among its deleted keys), -1 when absent. The keys' bytes are
    scanned (``bytes.find``), or looked up in an index once the block was searched
    :data:`INDEX_AFTER` times."""
    data = block.data
    if tombstones:
        start, end = block.dels_at, block.dels_end
    else:
        index = block.index
        if index is not None:
            return index.get(key, -1)
        start, end = block.keys_at, block.keys_end
        block.probes += 1  # unsynchronized: a lost count only delays the index
        if block.probes >= INDEX_AFTER:
            index = {data[p : p + width]: i for i, p in enumerate(range(start, end, width))}
            block.index = index
            return index.get(key, -1)
    p = data.find(key, start, end)
    while p >= 0 and (p - start) % width:  # straddles two keys: not this one
        p = data.find(key, p + 1, end)
    return -1 if p < 0 else (p - start) // width


def _skip_frame(r: Reader) -> tuple[int, int]:
    n = r.u32()
    at = r.pos
    r.take(n)
    return at, r.pos


def _entries(r: Reader, b: Block, kind: str) -> None:
    b.entries_at = r.pos
    b.n = r.u32()
    b.keys_at, b.keys_end = _skip_frame(r)
    frames = _PAYLOAD_FRAMES.get(kind, 1)
    for _ in range(frames):
        at, end = _skip_frame(r)
    if frames == 1:
        b.values_at, b.values_end = at, end
    b.entries_end = r.pos


def index_delta(data: bytes) -> tuple[list[dict[str, Any]], dict[int, list[Block]]]:
    """A delta's states' meta and its blocks by key group (headers parsed only)."""
    states, _, by_kg = _index_delta(data)
    return states, by_kg


def split_delta(data: bytes) -> tuple[bytes, dict[int, list[bytes]]]:
    """A delta's prefix (header and meta) and its blocks' bytes by key group:
    ``keyed.join_delta(prefix, blocks)`` is a delta of those blocks only (serving copies
    apply one key group's part of a delta without scanning the other groups' blocks)."""
    _, prefix_end, by_kg = _index_delta(data)
    out = {kg: [data[b.at : b.end] for b in blocks] for kg, blocks in by_kg.items()}
    return data[:prefix_end], out


def _index_delta(data: bytes) -> tuple[list[dict[str, Any]], int, dict[int, list[Block]]]:
    what = "keyed state delta"
    r = read_header(data, DELTA_MAGIC, what)
    try:
        states = json.loads(bytes(r.frame()).decode("utf-8"))["states"]
        kinds = [sm["kind"] for sm in states]
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpointError(f"{what}: damaged metadata ({e})") from e
    prefix_end = r.pos
    out: dict[int, list[Block]] = {}
    for _ in range(r.u32()):
        at = r.pos
        sid, kg = r.unpack(_DELTA_BLOCK)
        if sid >= len(kinds):
            raise CorruptCheckpointError(f"{what}: unknown state id {sid}")
        ns_at, ns_end = _skip_frame(r)
        b = Block(data, sid, ns_at == ns_end)
        _entries(r, b, kinds[sid])
        r.u32()
        b.dels_at, b.dels_end = _skip_frame(r)
        b.at, b.end = at, r.pos
        out.setdefault(kg, []).append(b)
    if not r.at_end():
        raise CorruptCheckpointError(f"{what}: trailing bytes after the last block")
    return states, prefix_end, out


def index_section(data: bytes, offset: int, length: int, kg: int, kinds: list[str]) -> list[Block]:
    """The blocks of key group ``kg``'s section, which lies at ``offset`` in ``data`` (a
    full snapshot's bytes); ``kinds``: the state kinds by state id (the handle's meta)."""
    what = f"keyed state of key group {kg}"
    if offset < 0 or offset + length > len(data):
        raise CorruptCheckpointError(f"{what} lies outside its state file")
    r = Reader(data, what)
    r.pos = offset
    magic, version, found_kg, n_blocks = r.unpack(_SECTION)
    _check_version(bytes(magic), SECTION_MAGIC, version, what)
    if found_kg != kg:
        raise CorruptCheckpointError(f"{what}: section holds key group {found_kg} instead")
    out = []
    for _ in range(n_blocks):
        (sid,) = r.unpack(_BLOCK)
        if sid >= len(kinds):
            raise CorruptCheckpointError(f"{what}: unknown state id {sid}")
        ns_at, ns_end = _skip_frame(r)
        b = Block(data, sid, ns_at == ns_end)
        _entries(r, b, kinds[sid])
        out.append(b)
    if r.pos != offset + length:
        raise CorruptCheckpointError(f"{what}: its blocks do not fill the section")
    return out
