"""The handle of an incremental (native RocksDB) keyed checkpoint.

A RocksDB checkpoint is the database's immutable SST files plus a few small
metadata files (``CURRENT``, ``MANIFEST-*``, ``OPTIONS-*``). The SST files go to
the checkpoint directory's ``shared/`` folder, once: a later checkpoint of the same
database refers to the files it still needs instead of uploading them again. The
small files are packed into one *private* file in ``chk-<n>/``.

The handle names every file it needs with its size and CRC32, so any retained
checkpoint restores on its own, and damaged or missing files are found before use
(``verify_state_files`` reads every stream of :meth:`stream_handles`).

Pure data (no RocksDB import): the driver loads, verifies and garbage-collects
these handles; only the RocksDB backend opens the files.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamstate.errors import CorruptCheckpointError
from streamstate.runtime.checkpoint.handles import (
    FileStateHandle,
    StreamStateHandle,
    handle_from_dict,
    register_handle_type,
)
from streamstate.runtime.keygroups import KeyGroupRange

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "IncrementalKeyedStateHandle",
    "shared_file_checkpoint_id",
    "shared_file_name",
]

FORMAT = "streamstate-rocksdb-incremental"
FORMAT_VERSION = 1
TYPE_NAME = "rocksdb-incremental"

#: ``<scope>-<instance>-c<checkpoint id>-<sst file name>`` (and its in-progress temp name);
#: the heap changelog's ``<scope>-c<checkpoint id>-<n>.hdelta`` / ``.hfull`` (changelog.py)
_SHARED_RE = re.compile(r"-c(\d+)-(\d+\.(?:sst|hdelta|hfull))(?:\.[0-9a-f]+\.inprogress)?$")


def shared_file_name(scope: str, instance: str, checkpoint_id: int, sst: str) -> str:
    """Name of an uploaded SST file under ``shared/``; it records the checkpoint that
    uploaded it, so garbage collection can leave younger (in-flight) uploads alone."""
    return f"{scope}-{instance}-c{checkpoint_id}-{sst}"


def shared_file_checkpoint_id(basename: str) -> int | None:
    """The uploading checkpoint id of a ``shared/`` file name, ``None`` if not ours."""
    m = _SHARED_RE.search(basename)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class IncrementalKeyedStateHandle:
    """One subtask's RocksDB checkpoint: ``shared`` SST files + the ``private`` file pack.

    ``shared`` pairs each local SST file name with the handle of its uploaded copy;
    ``meta`` is the backend's state meta (``format``, ``version``, ``states``);
    ``local_id`` names the local copy a worker may keep for local recovery.
    """

    key_group_range: KeyGroupRange
    shared: tuple[tuple[str, FileStateHandle], ...]
    private: StreamStateHandle
    meta: dict[str, Any] = field(default_factory=dict)
    local_id: str = ""

    @property
    def stream(self) -> StreamStateHandle:
        """The private file pack (for code that names a handle by its main stream)."""
        return self.private

    @property
    def offsets(self) -> dict[int, tuple[int, int]]:
        """No per-key-group byte ranges: the files hold whole key-group ranges."""
        return {}

    def intersects(self, kg_range: KeyGroupRange) -> bool:
        return len(self.key_group_range.intersection(kg_range)) > 0

    def stream_handles(self) -> tuple[StreamStateHandle, ...]:
        return (self.private, *(h for _, h in self.shared))

    def map_streams(
        self, fn: Callable[[StreamStateHandle], StreamStateHandle]
    ) -> IncrementalKeyedStateHandle:
        """This handle with every file replaced by ``fn(file)`` (relocating copies); the
        local recovery copy it named does not hold for the copy."""
        shared = []
        for name, h in self.shared:
            moved = fn(h)
            if not isinstance(moved, FileStateHandle):
                raise CorruptCheckpointError(f"a relocated SST file {name!r} is not a file")
            shared.append((name, moved))
        return IncrementalKeyedStateHandle(
            self.key_group_range, tuple(shared), fn(self.private), self.meta, ""
        )

    @property
    def state_size(self) -> int:
        return self.private.size + sum(h.size for _, h in self.shared)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": TYPE_NAME,
            "key_group_range": self.key_group_range.to_list(),
            "shared": [[name, h.to_dict()] for name, h in self.shared],
            "private": self.private.to_dict(),
            "meta": self.meta,
            "local_id": self.local_id,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> IncrementalKeyedStateHandle:
        try:
            s, e = d["key_group_range"]
            shared = []
            for name, hd in d["shared"]:
                h = handle_from_dict(hd)
                if not isinstance(h, FileStateHandle):
                    raise CorruptCheckpointError(f"shared file {name!r} is not a file handle")
                shared.append((str(name), h))
            return IncrementalKeyedStateHandle(
                KeyGroupRange(int(s), int(e)),
                tuple(shared),
                handle_from_dict(d["private"]),
                dict(d.get("meta", {})),
                str(d.get("local_id", "")),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptCheckpointError(f"damaged incremental RocksDB handle: {e!r}") from e


register_handle_type(TYPE_NAME, IncrementalKeyedStateHandle.from_dict)
