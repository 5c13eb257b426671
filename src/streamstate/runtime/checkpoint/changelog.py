"""Incremental checkpoints of the heap backend: a materialized base plus a changelog.

With ``state.changelog.enabled`` (Flink's key; ``env.enable_changelog_state_backend``)
a heap subtask's checkpoint is a :class:`ChangelogStateHandle`: the last
**materialization** (a full snapshot in the shared heap format) plus the **changelog**,
every epoch delta written since, in order. Both live in the checkpoint directory's
``shared/`` folder under names carrying the checkpoint id that wrote them, so several
retained checkpoints refer to the same files and the shared-file cleanup deletes them
when no retained checkpoint names them.

A checkpoint writes what changed since the previous one: the epoch deltas the subtask's
lineage already holds are linked (a hard link on a local file system, a copy otherwise)
and this epoch's delta is written; the base is named again. When the changelog
outgrows :data:`MATERIALIZE_RATIO` times the base (or :data:`MAX_CHANGELOG_FILES` files),
the checkpoint materializes a new base instead, so a restore never reads more than
about twice a full snapshot. Flink materializes periodically in the background; here
materialization happens in the checkpoint's epoch (see docs/limitations.md).

Pure data and file placement: no backend import. Restoring (``restore_meta``) reads the
base's key groups, then applies the deltas, filtered to the restoring key groups, so a
changelog handle rescales like a full one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamstate.errors import CorruptCheckpointError
from streamstate.runtime.checkpoint.handles import (
    FileStateHandle,
    KeyGroupsStateHandle,
    StreamStateHandle,
    handle_from_dict,
    register_handle_type,
)
from streamstate.runtime.keygroups import KeyGroupRange

if TYPE_CHECKING:
    from streamstate.runtime.checkpoint.storage import CheckpointStorageAccess

__all__ = [
    "MATERIALIZE_RATIO",
    "MAX_CHANGELOG_FILES",
    "ChangelogStateHandle",
    "changelog_checkpoint",
]

TYPE_NAME = "heap-changelog"
#: materialize when the changelog's bytes exceed this multiple of the base's
MATERIALIZE_RATIO = 1.0
#: ... or when it has more files than this (every file is named in ``_metadata``)
MAX_CHANGELOG_FILES = 100


@dataclass(frozen=True)
class ChangelogStateHandle:
    """One heap subtask's incremental checkpoint: ``base`` then ``deltas`` in order."""

    base: KeyGroupsStateHandle
    deltas: tuple[StreamStateHandle, ...] = ()

    #: the backends that can restore it: any that reads the shared heap format
    backend = "any"

    @property
    def key_group_range(self) -> KeyGroupRange:
        return self.base.key_group_range

    @property
    def stream(self) -> StreamStateHandle:
        return self.base.stream

    @property
    def offsets(self) -> dict[int, tuple[int, int]]:
        """The base's key-group byte ranges (the changelog is not indexed)."""
        return self.base.offsets

    @property
    def meta(self) -> dict[str, Any]:
        return self.base.meta

    @property
    def state_size(self) -> int:
        return sum(s.size for s in self.stream_handles())

    def intersects(self, kg_range: KeyGroupRange) -> bool:
        return self.base.intersects(kg_range)

    def expand(self) -> tuple[KeyGroupsStateHandle, tuple[StreamStateHandle, ...]]:
        """What a restore reads: the full base, then the deltas to apply in order."""
        return self.base, self.deltas

    def stream_handles(self) -> tuple[StreamStateHandle, ...]:
        return (*self.base.stream_handles(), *self.deltas)

    def map_streams(
        self, fn: Callable[[StreamStateHandle], StreamStateHandle]
    ) -> ChangelogStateHandle:
        return ChangelogStateHandle(self.base.map_streams(fn), tuple(fn(d) for d in self.deltas))

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": TYPE_NAME,
            "base": self.base.to_dict(),
            "deltas": [d.to_dict() for d in self.deltas],
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ChangelogStateHandle:
        try:
            base = handle_from_dict(d["base"])
            if not isinstance(base, KeyGroupsStateHandle):
                raise CorruptCheckpointError("the base of a heap changelog is not a snapshot")
            return ChangelogStateHandle(base, tuple(handle_from_dict(x) for x in d["deltas"]))
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptCheckpointError(f"damaged heap changelog handle: {e!r}") from e


register_handle_type(TYPE_NAME, ChangelogStateHandle.from_dict)


def changelog_checkpoint(
    storage: CheckpointStorageAccess,
    backend: Any,
    lineage: Any,
    checkpoint_id: int,
    scope: str,
) -> ChangelogStateHandle | None:
    """Checkpoint ``backend`` (heap) incrementally, or ``None`` when ``storage`` has no
    ``shared/`` folder (the caller writes a full snapshot).

    ``lineage`` is the one the subtask started this epoch from: when its base is this
    subtask's previous changelog checkpoint, its deltas are exactly the changes since
    that checkpoint (as files), and ``backend``'s pending delta the changes of this
    epoch. Names are deterministic (``<scope>-c<id>-<n>.h*``), so a retried task
    rewrites the same files.
    """
    prev = _previous(lineage, backend.key_group_range)
    delta = backend.snapshot_delta()  # this epoch's changes (clears them either way)
    if prev is not None:
        carried = [d for d in lineage.deltas if d is not None]
        changed = sum(d.size for d in prev.deltas) + sum(d.size for d in carried) + len(delta)
        n_files = len(prev.deltas) + len(carried) + 1
        if changed <= MATERIALIZE_RATIO * prev.base.stream.size and n_files <= MAX_CHANGELOG_FILES:
            out: list[StreamStateHandle] = list(prev.deltas)
            for k, d in enumerate(carried):
                h = _share(storage, f"{scope}-c{checkpoint_id}-{k + 1}.hdelta", d)
                if h is None:
                    return None
                out.append(h)
            if delta:
                h = storage.write_shared_state(f"{scope}-c{checkpoint_id}-0.hdelta", delta)
                if h is None:
                    return None
                out.append(h)
            return ChangelogStateHandle(prev.base, tuple(out))
    snap = backend.snapshot()
    stream = storage.write_shared_state(f"{scope}-c{checkpoint_id}-0.hfull", snap.data)
    if stream is None:
        return None
    base = KeyGroupsStateHandle(
        stream, backend.key_group_range, dict(snap.offsets), dict(snap.meta)
    )
    return ChangelogStateHandle(base)


def _previous(lineage: Any, kg_range: KeyGroupRange) -> ChangelogStateHandle | None:
    base: Sequence[Any] = lineage.base if lineage is not None else ()
    if len(base) == 1 and isinstance(base[0], ChangelogStateHandle):
        if base[0].key_group_range == kg_range:
            return base[0]
    return None  # a fresh start, a rescale, or an epoch full version: materialize


def _share(
    storage: CheckpointStorageAccess, name: str, handle: StreamStateHandle
) -> StreamStateHandle | None:
    """``handle``'s bytes as ``shared/<name>``: linked when both are local files."""
    if isinstance(handle, FileStateHandle):
        linked = storage.link_shared_state(name, handle)
        if linked is not None:
            return linked
    return storage.write_shared_state(name, handle.read())
