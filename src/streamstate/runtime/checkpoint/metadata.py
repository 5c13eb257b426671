"""Checkpoint metadata: the ``_metadata`` document that makes a checkpoint exist.

A checkpoint is complete iff its ``_metadata`` was written (atomically, by the driver)
after every subtask acknowledged. The document is JSON: the state handles of every
operator and subtask (via each handle's ``to_dict`` / :func:`handle_from_dict`), the
source offsets to rewind to, the sinks' pending transactions and free-form properties.

Compatibility contract: :data:`FORMAT_VERSION` is written into every document; a reader
accepts every version up to its own and rejects newer ones with
:class:`CorruptCheckpointError` (never guesses).

Self-verification (format 2): the file is one header line,
``streamstate-metadata v2 crc32=<8 hex> length=<bytes> hmac-sha256=<64 hex>``, then the JSON
document; the reader checks the length and the CRC32 of the JSON bytes *before* parsing, so
a flipped or truncated byte anywhere is a :class:`CorruptCheckpointError`, never a silently
changed field, and then the HMAC under the checkpoint key (``checkpoint/signing.py``), so a
checkpoint changed by someone without the key is refused before any state is read. A file
without a signature, format 1 (plain JSON, no checksum) or a format 2 header without its
``hmac-sha256``, is refused with :class:`UnsignedCheckpointError` (a downgrade would let
anyone edit offsets or swap state files) unless the reader opted in by name
(``signing.unsigned_allowed``); then it is read with a warning.
"""

from __future__ import annotations

import json
import logging
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamstate.errors import CorruptCheckpointError, UnsignedCheckpointError
from streamstate.runtime.checkpoint import signing
from streamstate.runtime.checkpoint.handles import (
    KeyGroupsStateHandle,
    StreamStateHandle,
    handle_from_dict,
)

__all__ = [
    "FORMAT_VERSION",
    "CheckpointMetadata",
    "OperatorSubtaskStates",
    "SubtaskState",
    "build_operator_states",
]

log = logging.getLogger("streamstate")

FORMAT_VERSION = 2
_HEADER_PREFIX = b"streamstate-metadata "
_HEADER = re.compile(
    rb"^streamstate-metadata v(\d+) crc32=([0-9a-f]{8}) length=(\d+)"
    rb"(?: hmac-sha256=([0-9a-f]{64}))?\n$"
)


@dataclass(frozen=True)
class SubtaskState:
    """The state one subtask of one operator acknowledged for a checkpoint.

    ``keyed``: keyed snapshots (each covers a key-group range; usually one per subtask).
    ``operator``: operator-state (list / union / broadcast) snapshots; may be empty.
    Both are stored as tuples so the value is immutable.
    """

    keyed: tuple[KeyGroupsStateHandle, ...] = ()
    operator: tuple[StreamStateHandle, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "keyed", tuple(self.keyed))
        object.__setattr__(self, "operator", tuple(self.operator))

    def stream_handles(self) -> Iterator[StreamStateHandle]:
        for kh in self.keyed:
            yield from kh.stream_handles()
        yield from self.operator

    def to_dict(self) -> dict[str, Any]:
        return {
            "keyed": [h.to_dict() for h in self.keyed],
            "operator": [h.to_dict() for h in self.operator],
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> SubtaskState:
        return SubtaskState(
            tuple(handle_from_dict(h) for h in d.get("keyed", [])),
            tuple(handle_from_dict(h) for h in d.get("operator", [])),
        )


@dataclass(frozen=True)
class OperatorSubtaskStates:
    """All subtasks' state of one operator (identified by its uid) in one checkpoint.

    ``subtasks[i]`` is subtask ``i``'s state; ``len(subtasks) == parallelism`` is guaranteed
    (a subtask without state has an empty :class:`SubtaskState`).
    """

    parallelism: int
    max_parallelism: int
    subtasks: tuple[SubtaskState, ...] = ()

    def __post_init__(self) -> None:
        subtasks = tuple(self.subtasks) or tuple(SubtaskState() for _ in range(self.parallelism))
        object.__setattr__(self, "subtasks", subtasks)
        if not 1 <= self.parallelism <= self.max_parallelism:
            raise ValueError(
                f"parallelism {self.parallelism} must be in [1, max parallelism "
                f"{self.max_parallelism}]"
            )
        if len(subtasks) != self.parallelism:
            raise ValueError(
                f"{len(subtasks)} subtask states given for parallelism {self.parallelism}"
            )

    def stream_handles(self) -> Iterator[StreamStateHandle]:
        for st in self.subtasks:
            yield from st.stream_handles()

    def to_dict(self) -> dict[str, Any]:
        return {
            "parallelism": self.parallelism,
            "max_parallelism": self.max_parallelism,
            "subtasks": [s.to_dict() for s in self.subtasks],
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> OperatorSubtaskStates:
        return OperatorSubtaskStates(
            int(d["parallelism"]),
            int(d["max_parallelism"]),
            tuple(SubtaskState.from_dict(s) for s in d["subtasks"]),
        )


@dataclass(frozen=True)
class CheckpointMetadata:
    """Everything needed to restore a job from checkpoint ``checkpoint_id``.

    ``source_offsets``/``sink_state``/``properties`` must be JSON-compatible (they are
    written verbatim). ``operator_states`` maps operator uid -> :class:`OperatorSubtaskStates`.
    """

    job_id: str
    checkpoint_id: int
    timestamp_ms: int
    operator_states: dict[str, OperatorSubtaskStates] = field(default_factory=dict)
    source_offsets: dict[str, Any] = field(default_factory=dict)
    sink_state: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    is_savepoint: bool = False
    format_version: int = FORMAT_VERSION

    def stream_handles(self) -> Iterator[StreamStateHandle]:
        """Every stream handle referenced by this checkpoint (may repeat shared ones)."""
        for op in self.operator_states.values():
            yield from op.stream_handles()

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "job_id": self.job_id,
            "checkpoint_id": self.checkpoint_id,
            "timestamp_ms": self.timestamp_ms,
            "is_savepoint": self.is_savepoint,
            "operator_states": {uid: s.to_dict() for uid, s in self.operator_states.items()},
            "source_offsets": self.source_offsets,
            "sink_state": self.sink_state,
            "properties": self.properties,
        }

    def to_json_bytes(self) -> bytes:
        try:
            return json.dumps(self.to_dict(), sort_keys=True).encode("utf-8")
        except (TypeError, ValueError) as e:
            # Name the culprit: source offsets / sink state come from connectors.
            raise ValueError(
                f"checkpoint {self.checkpoint_id} metadata is not JSON-serializable: {e}. "
                f"Source offsets, sink state and properties must be JSON-compatible."
            ) from e

    @staticmethod
    def from_dict(d: Mapping[str, Any], where: str = "<memory>") -> CheckpointMetadata:
        """Parse a metadata document; any problem raises :class:`CorruptCheckpointError`."""
        if not isinstance(d, Mapping):
            raise CorruptCheckpointError(f"checkpoint metadata {where} is not a JSON object")
        version = d.get("format_version")
        if not isinstance(version, int):
            raise CorruptCheckpointError(
                f"checkpoint metadata {where} has no integer format_version"
            )
        if version > FORMAT_VERSION or version < 1:
            raise CorruptCheckpointError(
                f"checkpoint metadata {where} has format version {version}, but this "
                f"streamstate reads versions 1..{FORMAT_VERSION}; restore it with the "
                f"streamstate release that wrote it (or a newer one)"
            )
        try:
            return CheckpointMetadata(
                job_id=str(d["job_id"]),
                checkpoint_id=int(d["checkpoint_id"]),
                timestamp_ms=int(d["timestamp_ms"]),
                operator_states={
                    str(uid): OperatorSubtaskStates.from_dict(s)
                    for uid, s in d.get("operator_states", {}).items()
                },
                source_offsets=dict(d.get("source_offsets", {})),
                sink_state=dict(d.get("sink_state", {})),
                properties=dict(d.get("properties", {})),
                is_savepoint=bool(d.get("is_savepoint", False)),
                format_version=version,
            )
        except CorruptCheckpointError as e:
            raise CorruptCheckpointError(f"checkpoint metadata {where}: {e}") from e
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptCheckpointError(
                f"checkpoint metadata {where} is malformed: {type(e).__name__}: {e}"
            ) from e

    def to_file_bytes(self) -> bytes:
        """The ``_metadata`` file: a header line with length and CRC32, then the JSON."""
        body = self.to_json_bytes()
        header = b"%sv%d crc32=%08x length=%d hmac-sha256=%s\n" % (
            _HEADER_PREFIX,
            FORMAT_VERSION,
            zlib.crc32(body) & 0xFFFFFFFF,
            len(body),
            signing.sign(body).encode(),
        )
        return header + body

    @staticmethod
    def from_file_bytes(data: bytes, where: str = "<memory>") -> CheckpointMetadata:
        """Parse a ``_metadata`` file, verifying its checksum first (format 1: plain JSON)."""
        if data[:1] == b"{":
            doc = _parse_json(data, where)  # a damaged file says so before "unsigned"
            _unsigned(where, "is format 1 (plain JSON, no checksum, no signature)")
            return CheckpointMetadata.from_dict(doc, where)
        nl = data.find(b"\n")
        m = _HEADER.match(data[: nl + 1]) if nl > 0 else None
        if m is None:
            raise CorruptCheckpointError(
                f"checkpoint metadata {where} has no valid header (damaged, or not a "
                f"streamstate _metadata file)"
            )
        version, crc, length = int(m.group(1)), int(m.group(2), 16), int(m.group(3))
        if version > FORMAT_VERSION:
            raise CorruptCheckpointError(
                f"checkpoint metadata {where} has format version {version}, but this "
                f"streamstate reads versions 1..{FORMAT_VERSION}; restore it with the "
                f"streamstate release that wrote it (or a newer one)"
            )
        body = data[nl + 1 :]
        if len(body) != length or (zlib.crc32(body) & 0xFFFFFFFF) != crc:
            raise CorruptCheckpointError(
                f"checkpoint metadata {where} fails its checksum ({len(body)} bytes, expected "
                f"{length}; the file was truncated or changed after it was written)"
            )
        signature = m.group(4)
        if signature is None:
            _unsigned(where, "has no hmac-sha256 signature in its header")
        elif not signing.verify(body, signature.decode()):
            raise CorruptCheckpointError(
                f"checkpoint metadata {where} does not verify against this process's checkpoint "
                f"key: it was written with another key, or changed by someone without the key. "
                f"Restoring it could load pickled state, so it is refused; restore it with the "
                f"key that wrote it ({signing.KEY_ENV}, or {signing.key_path()})"
            )
        return CheckpointMetadata.from_json_bytes(body, where)

    @staticmethod
    def from_json_bytes(data: bytes, where: str = "<memory>") -> CheckpointMetadata:
        return CheckpointMetadata.from_dict(_parse_json(data, where), where)


def _parse_json(data: bytes, where: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptCheckpointError(
            f"checkpoint metadata {where} is not valid JSON (truncated or overwritten?): {e}"
        ) from e


def _unsigned(where: str, what: str) -> None:
    """An unsigned ``_metadata``: refused unless the reader opted in by name."""
    if not signing.unsigned_allowed():
        raise UnsignedCheckpointError(
            f"checkpoint metadata {where} {what}: its origin cannot be checked, and restoring "
            f"it could load pickled state or edited source positions, so it is refused. If "
            f"you wrote it (an older streamstate), opt in by name: "
            f"{signing.ALLOW_UNSIGNED_KEY}: true for a job, --allow-unsigned-checkpoints on "
            f"the command line, or {signing.ALLOW_UNSIGNED_ENV}=true"
        )
    log.warning(
        "checkpoint metadata %s %s: its origin cannot be checked; read because unsigned "
        "checkpoints are allowed",
        where,
        what,
    )


def build_operator_states(
    acks: Mapping[str, Mapping[int, SubtaskState]],
    parallelism: Mapping[str, int],
    max_parallelism: Mapping[str, int],
) -> dict[str, OperatorSubtaskStates]:
    """Assemble per-operator states from per-subtask acks (missing subtasks = no state)."""
    out: dict[str, OperatorSubtaskStates] = {}
    for uid, p in parallelism.items():
        per = acks.get(uid, {})
        subtasks: Sequence[SubtaskState] = [per.get(i, SubtaskState()) for i in range(p)]
        out[uid] = OperatorSubtaskStates(p, max_parallelism[uid], tuple(subtasks))
    return out
