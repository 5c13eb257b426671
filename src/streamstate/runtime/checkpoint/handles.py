"""State handles: how a checkpoint refers to the bytes a subtask wrote.

A handle is a frozen, picklable, JSON-round-trippable value. Stream handles
point at bytes (a file anywhere fsspec reaches, or bytes inline in the
metadata for in-memory checkpoint storage); keyed handles add the key-group
index so a rescaled subtask reads only the key groups it owns.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from streamstate.errors import CorruptCheckpointError
from streamstate.runtime.keygroups import KeyGroupRange

__all__ = [
    "ByteStreamStateHandle",
    "FileStateHandle",
    "KeyGroupsStateHandle",
    "StreamStateHandle",
    "checksum",
    "handle_from_dict",
    "register_handle_type",
]


def digest(data: bytes) -> str:
    """SHA-256 of ``data`` (hex): recorded in file handles, so a file cannot be swapped for
    another with the same CRC (``_metadata``, which lists the digests, is signed)."""
    return hashlib.sha256(data).hexdigest()


def checksum(data: bytes) -> int:
    """CRC32 of ``data``; recorded in handles and verified on every read."""
    return zlib.crc32(data) & 0xFFFFFFFF


class StreamStateHandle:
    """Bytes written for a checkpoint. ``read()`` verifies size and checksum."""

    size: int
    crc: int

    def read(self) -> bytes:
        raise NotImplementedError

    def read_range(self, offset: int, length: int) -> bytes:
        return self.read()[offset : offset + length]

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class ByteStreamStateHandle(StreamStateHandle):
    """Bytes kept inline (in-memory checkpoint storage)."""

    data: bytes
    size: int
    crc: int

    @staticmethod
    def of(data: bytes) -> ByteStreamStateHandle:
        return ByteStreamStateHandle(data, len(data), checksum(data))

    def read(self) -> bytes:
        if len(self.data) != self.size or checksum(self.data) != self.crc:
            raise CorruptCheckpointError("inline state bytes fail their checksum")
        return self.data

    def to_dict(self) -> dict[str, Any]:
        import base64

        return {
            "type": "bytes",
            "data": base64.b64encode(self.data).decode("ascii"),
            "size": self.size,
            "crc": self.crc,
        }


@dataclass(frozen=True)
class FileStateHandle(StreamStateHandle):
    """A file (any fsspec URL) holding exactly ``size`` bytes with CRC32 ``crc`` and, when
    recorded (every handle written since format 2), SHA-256 ``sha256``."""

    path: str
    size: int
    crc: int
    sha256: str | None = None

    @staticmethod
    def of(path: str, data: bytes) -> FileStateHandle:
        """The handle of ``data`` written at ``path``."""
        return FileStateHandle(path, len(data), checksum(data), digest(data))

    def read(self) -> bytes:
        from streamstate.runtime.stores import url_to_fs

        try:
            fs, path = url_to_fs(self.path)
            data = fs.cat_file(path)
        except FileNotFoundError as e:
            raise CorruptCheckpointError(f"state file {self.path} is missing") from e
        if len(data) != self.size or checksum(data) != self.crc:
            raise CorruptCheckpointError(
                f"state file {self.path} is damaged: expected {self.size} bytes with crc "
                f"{self.crc:#010x}, found {len(data)} bytes with crc {checksum(data):#010x}"
            )
        if self.sha256 is not None and digest(data) != self.sha256:
            raise CorruptCheckpointError(
                f"state file {self.path} is not the file its checkpoint recorded (its SHA-256 "
                f"differs although size and CRC match): it was replaced; not loading it"
            )
        return data

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": "file", "path": self.path, "size": self.size, "crc": self.crc}
        if self.sha256 is not None:
            d["sha256"] = self.sha256
        return d


@dataclass(frozen=True)
class KeyGroupsStateHandle:
    """A keyed snapshot: ``stream`` holds the state of ``key_group_range``.

    ``offsets[kg] = (offset, length)`` locates key group ``kg`` inside the
    stream (key groups with no state are absent). ``meta`` is the snapshot's
    state metadata (state names, kinds, serializer snapshots), format owned by
    the keyed backend that wrote it.
    """

    stream: StreamStateHandle
    key_group_range: KeyGroupRange
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def intersects(self, kg_range: KeyGroupRange) -> bool:
        return len(self.key_group_range.intersection(kg_range)) > 0

    def stream_handles(self) -> tuple[StreamStateHandle, ...]:
        """Every stream this handle needs (verified before a restore, discarded with it)."""
        return (self.stream,)

    def map_streams(
        self, fn: Callable[[StreamStateHandle], StreamStateHandle]
    ) -> KeyGroupsStateHandle:
        """This handle with every stream replaced by ``fn(stream)`` (relocating copies)."""
        return KeyGroupsStateHandle(fn(self.stream), self.key_group_range, self.offsets, self.meta)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "key-groups",
            "stream": self.stream.to_dict(),
            "key_group_range": self.key_group_range.to_list(),
            "offsets": {str(k): list(v) for k, v in self.offsets.items()},
            "meta": self.meta,
        }


#: while a savepoint's ``_metadata`` is parsed: its directory (relative file paths resolve
#: against it, which is what makes a savepoint relocatable)
_RELATIVE_BASE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "relative_base", default=None
)


def is_relative(path: str) -> bool:
    """A file path written relative to its checkpoint's directory (savepoints)."""
    return "://" not in path and not path.startswith("/")


@contextlib.contextmanager
def relative_paths_under(base: str) -> Iterator[None]:
    """Resolve relative file handle paths against ``base`` while parsing in this block."""
    token = _RELATIVE_BASE.set(base)
    try:
        yield
    finally:
        _RELATIVE_BASE.reset(token)


def handle_from_dict(d: dict[str, Any]) -> Any:
    """Inverse of every handle's ``to_dict``."""
    t = d.get("type")
    if t == "bytes":
        import base64

        return ByteStreamStateHandle(base64.b64decode(d["data"]), int(d["size"]), int(d["crc"]))
    if t == "file":
        sha = d.get("sha256")
        base = _RELATIVE_BASE.get()
        if base is not None and is_relative(str(d["path"])):
            d = {**d, "path": f"{base.rstrip('/')}/{d['path']}"}
        return FileStateHandle(
            d["path"], int(d["size"]), int(d["crc"]), str(sha) if sha is not None else None
        )
    if t == "key-groups":
        s, e = d["key_group_range"]
        return KeyGroupsStateHandle(
            handle_from_dict(d["stream"]),
            KeyGroupRange(int(s), int(e)),
            {int(k): (int(v[0]), int(v[1])) for k, v in d["offsets"].items()},
            dict(d.get("meta", {})),
        )
    decoder = _decoder(t)
    if decoder is not None:
        return decoder(d)
    raise CorruptCheckpointError(f"unknown state handle type {t!r} in checkpoint metadata")


#: other handle types: type name -> decoder (``register_handle_type``)
_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {}
#: built-in handle types registered on first use: type name -> module registering it
_BUILTIN_HANDLES: dict[str, str] = {
    "rocksdb-incremental": "streamstate.runtime.checkpoint.incremental",
    "heap-changelog": "streamstate.runtime.checkpoint.changelog",
}


def register_handle_type(type_name: str, decoder: Callable[[dict[str, Any]], Any]) -> None:
    """Make :func:`handle_from_dict` decode ``{"type": type_name, ...}`` with ``decoder``."""
    _DECODERS[type_name] = decoder


def _decoder(type_name: Any) -> Callable[[dict[str, Any]], Any] | None:
    if type_name not in _DECODERS and type_name in _BUILTIN_HANDLES:
        import importlib

        importlib.import_module(_BUILTIN_HANDLES[type_name])
    return _DECODERS.get(type_name)
