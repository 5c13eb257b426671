"""Writing a savepoint on the driver: its directory, the kept state of an existing
savepoint, and ``_metadata``.

A written savepoint is a savepoint like one a job takes (``JobClient.trigger_savepoint``):
one self-contained directory, every file path in ``_metadata`` relative to it, every file
with size, CRC32 and SHA-256, ``_metadata`` signed (HMAC under the checkpoint key) and
written last and atomically. State kept from an existing savepoint or checkpoint is
*copied* into the new directory (Flink refers to the old files instead; a copy keeps the
new savepoint relocatable and independent of the old one's lifetime).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from streamstate.errors import ConfigurationError
from streamstate.runtime.checkpoint.handles import FileStateHandle, StreamStateHandle
from streamstate.runtime.checkpoint.lock import is_local, make_private
from streamstate.runtime.checkpoint.metadata import (
    CheckpointMetadata,
    OperatorSubtaskStates,
    SubtaskState,
)
from streamstate.runtime.checkpoint.savepoint import SavepointTarget
from streamstate.runtime.checkpoint.storage import METADATA_FILE_NAME, _url_to_fs
from streamstate.runtime.state_processor.bootstrap import safe_file_prefix

__all__ = [
    "check_max_parallelism",
    "create_target",
    "discard_target",
    "relocate_subtask",
    "savepoint_metadata",
]

#: the largest max parallelism (Flink's: key groups are 16-bit)
UPPER_BOUND_MAX_PARALLELISM = 1 << 15


def check_max_parallelism(max_parallelism: Any) -> int:
    if (
        not isinstance(max_parallelism, int)
        or isinstance(max_parallelism, bool)
        or not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM
    ):
        raise ConfigurationError(
            f"max parallelism must be an int in [1, {UPPER_BOUND_MAX_PARALLELISM}], got "
            f"{max_parallelism!r}; it must equal the max parallelism of the job that restores "
            f"the savepoint (128 by default for parallelism <= 85)"
        )
    return max_parallelism


def create_target(path: str) -> SavepointTarget:
    """The savepoint directory ``path``: created (owner-only); it must not exist yet or be
    empty, so an existing savepoint is never overwritten."""
    if not isinstance(path, str) or not path:
        raise ConfigurationError(f"a savepoint path must be a non-empty str, got {path!r}")
    fs, root = _url_to_fs(path)
    root = root.rstrip("/") or "/"
    if fs.exists(root):
        if not fs.isdir(root) or fs.ls(root):
            what = "a savepoint" if fs.exists(f"{root}/{METADATA_FILE_NAME}") else "not empty"
            raise ConfigurationError(
                f"cannot write a savepoint to {path!r}: it is {what}. Write each savepoint "
                f"into a new directory"
            )
    else:
        fs.makedirs(root, exist_ok=True)
    make_private(fs, root)
    return SavepointTarget(root if is_local(fs) else fs.unstrip_protocol(root))


def discard_target(target: SavepointTarget) -> None:
    """Delete a savepoint directory that never got its ``_metadata`` (a failed write)."""
    fs, root = _url_to_fs(target.url)
    if fs.exists(root) and not fs.exists(f"{root.rstrip('/')}/{METADATA_FILE_NAME}"):
        fs.rm(root, recursive=True)


def relocate_subtask(
    target: SavepointTarget, uid: str, index: int, state: SubtaskState
) -> SubtaskState:
    """A copy of one subtask's state in ``target``: every file read (and so verified) and
    written under ``existing/``; inline bytes stay inline."""
    counter = [0]
    prefix = f"existing/{safe_file_prefix(uid)}-{index}"

    def copy(stream: StreamStateHandle) -> StreamStateHandle:
        if not isinstance(stream, FileStateHandle):
            return stream
        counter[0] += 1
        base = stream.path.rstrip("/").rsplit("/", 1)[-1]
        moved = target.write_state(0, f"{prefix}-{counter[0]}-{base}", stream.read())
        assert isinstance(moved, FileStateHandle)
        return moved

    return SubtaskState(
        tuple(h.map_streams(copy) for h in state.keyed),
        tuple(copy(h) for h in state.operator),
    )


def _renamed(
    per_uid: Mapping[str, Any], renamed: Mapping[str, str], removed: set[str]
) -> dict[str, Any]:
    return {renamed.get(u, u): v for u, v in per_uid.items() if u not in removed}


def savepoint_metadata(
    base: CheckpointMetadata | None,
    operators: Mapping[str, OperatorSubtaskStates],
    renamed: Mapping[str, str],
    removed: set[str],
) -> CheckpointMetadata:
    """The ``_metadata`` of a written savepoint holding ``operators``.

    From an existing savepoint (``base``), its source positions, pending sink commits and
    watermarks are kept (renamed and removed with their operators), so a job restored
    from the new savepoint continues where the old one was taken; a new savepoint has
    none (sources start from the beginning, epoch 0)."""
    props: dict[str, Any] = {"epoch": 0}
    sources: dict[str, Any] = {}
    sinks: dict[str, Any] = {}
    if base is not None:
        props = dict(base.properties)
        wm = props.get("watermarks")
        if isinstance(wm, dict):
            props["watermarks"] = _renamed(wm, renamed, removed)
        sources = _renamed(base.source_offsets, renamed, removed)
        sinks = _renamed(base.sink_state, renamed, removed)
    props["written_by"] = "SavepointWriter"
    props.setdefault("job_name", "state processor")
    return CheckpointMetadata(
        job_id=uuid.uuid4().hex[:16],
        checkpoint_id=base.checkpoint_id if base is not None else 0,
        timestamp_ms=int(time.time() * 1000),
        operator_states=dict(operators),
        source_offsets=sources,
        sink_state=sinks,
        properties=props,
        is_savepoint=True,
    )
