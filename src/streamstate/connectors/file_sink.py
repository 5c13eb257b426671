"""FileSink runtime: buckets, part files that live across epochs, rolling, two-phase commit.

Every subtask keeps one *open part* per bucket. A part is written as hidden *segments*
(``<bucket>/.<prefix>-<writer>-<first>.<hex>.inprogress``), one per epoch it received
records in, written at the epoch's end. The open parts are the operator's list state, so a
restored subtask continues them, and the segments of a replayed epoch are new files:
nothing a checkpoint names is ever overwritten. A part *rolls* (Flink: in-progress ->
pending) when the rolling policy says so; a rolled part of one segment is that segment, one
of several is merged into one hidden ``.pending`` file (bytes concatenated for rows; the
bulk format merges its own). The pending files of an epoch go to the driver's
:class:`FileCommitter`, which publishes them once a checkpoint covering the epoch
completed, and deletes the merged segments.

**Names fixed by content** (``docs/guarantees.md``, recovery paths). Each subtask writes
as a *writer*: a UUID, and a sequence number counting every record the subtask received
since the writer started. A part is committed as ``<prefix>-<writer>-<seq><suffix>``,
``seq`` being the number of its last record, so the name says which records it holds: the
records of its bucket up to ``seq`` that the writer's earlier parts do not hold. The writer
and its next sequence number are operator state; a fresh start names the writer after the
job id and the subtask (a restart from the beginning writes as the same writer). A restore
that replays records whose parts were already committed (a fallback to an older
checkpoint, or a user resuming one) looks up the writer's committed parts and skips every
record up to the highest committed number of its bucket, so nothing is written twice; the
driver allows this only when the replay reproduces the committed run record for record
(``runtime/replay.py``) and otherwise refuses the restore unless duplicates are allowed.
Nothing here needs a rename: the names are chosen before a part is published.

Paths in state and in the checkpoint are relative to the sink's base path, which the
checkpoint records: a restore commits a checkpoint's pending files only in the directory
they belong to. A file that is gone without its part being committed there fails the
restore (:class:`~streamstate.errors.FileSinkRestoreError`), and so does a restore with the
sink writing to another directory while the checkpoint still has files pending or in
progress in its own (it would take them from there); a checkpoint whose output is all
committed (a stop-with-savepoint) restores into any directory.

Rolling is evaluated at record and epoch boundaries (Flink checks the time-based rules
on a processing-time timer, every ``bucket_check_interval``): part size before every
record (row formats), the rollover and inactivity intervals before an epoch's first
record and at every epoch end, against the epoch's processing time (the driver's clock).
Every checkpoint rolls with ``OnCheckpointRollingPolicy`` (always for bulk formats), and
the end of the input rolls every part.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from streamstate.connectors.buckets import BucketAssigner, BucketAssignerContext
from streamstate.connectors.file_commit import (
    STATE_VERSION,
    FileCommitter,
    OutputScan,
    bucket_path,
    first_few,
    is_absolute_path,
    part_file_name,
    remove_url,
    scan_output,
    url_exists,
    url_fs,
    writer_id,
)
from streamstate.connectors.object_commit import PartUpload, multipart_store
from streamstate.errors import FileSinkRestoreError
from streamstate.runtime.operators.base import StreamOperator
from streamstate.runtime.watermarks import MAX_WATERMARK

__all__ = [
    "FileCommitter",
    "FileSinkOperator",
    "OPEN_PARTS_STATE",
    "RollingRules",
    "RowPartFormat",
]

OPEN_PARTS_STATE = "file-sink-open-parts"
log = logging.getLogger(__name__)


class RowPartFormat:
    """Row format: one encoded record after the other (``Encoder``)."""

    bulk = False

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        #: the stream's declared type (``FileSink._bind_input_type``): the simple string
        #: encoder then writes Java's toString of typed records, as Flink's
        self.type_info: Any = None

    def encode(self, value: Any) -> bytes:
        typed = getattr(self.encoder, "encode_typed", None)
        if typed is not None and self.type_info is not None:
            return bytes(typed(value, self.type_info))
        return bytes(self.encoder.encode(value))

    def write_segment(self, url: str, rows: list[bytes]) -> None:
        fs, path = url_fs(url)
        fs.pipe_file(path, b"".join(rows))  # one PUT on an object store

    def merge(self, segments: list[str], url: str) -> None:
        fs, path = url_fs(url)
        with fs.open(path, "wb") as out:
            for seg in segments:
                sfs, spath = url_fs(seg)
                with sfs.open(spath, "rb") as f:
                    while chunk := f.read(1 << 20):
                        out.write(chunk)


@dataclass(frozen=True)
class RollingRules:
    """The rolling policy as the worker applies it (None: the rule is off)."""

    part_size: int | None = None
    rollover_ms: int | None = None
    inactivity_ms: int | None = None
    on_checkpoint: bool = False


@dataclass
class _Part:
    """An open part: its records ``first_seq..last_seq`` of its writer, in ``segments``
    (paths relative to the base path; absolute in state written before version 2, which
    also named the part up front: ``legacy_name``)."""

    bucket: str
    writer: str
    first_seq: int
    last_seq: int
    created: int
    last: int
    segments: list[str] = field(default_factory=list)
    size: int = 0
    buf: list[Any] = field(default_factory=list)
    legacy_name: str | None = None

    def to_state(self) -> list[Any]:
        return ["part", self.writer, self.bucket, self.first_seq, self.last_seq, self.created,
                self.last, list(self.segments), self.size]  # fmt: skip

    @staticmethod
    def from_state(s: list[Any]) -> _Part:
        if s[0] == "part":
            return _Part(s[2], s[1], s[3], s[4], s[5], s[6], list(s[7]), s[8])
        # version 1: [bucket, name, created, last, [absolute segment urls], size]
        return _Part(s[0], "", -1, -1, s[2], s[3], list(s[4]), s[5], legacy_name=s[1])


class FileSinkOperator(StreamOperator):
    """One subtask of a FileSink (see the module docstring)."""

    #: the final watermark closes every part, also in jobs without keyed operators
    needs_end_of_input = True

    def __init__(
        self,
        base_path: str,
        part_format: Any,
        part_prefix: str = "part",
        part_suffix: str = "",
        rules: RollingRules | None = None,
        assigner: BucketAssigner | None = None,
    ) -> None:
        super().__init__()
        self.base_path = base_path.rstrip("/")
        self.format = part_format
        self.part_prefix = part_prefix
        self.part_suffix = part_suffix
        self.rules = rules or RollingRules()
        self.assigner = assigner or BucketAssigner.base_path_bucket_assigner()
        #: this subtask's writer (set when the state is initialized, else on first use)
        self.writer: str | None = None
        self.stamp: str | None = None
        #: the number the next record gets
        self.next_seq = 0
        #: bucket -> highest record number already committed (a replay skips up to it)
        self.fence: dict[str, int] = {}
        self.open_parts: dict[str, _Part] = {}
        self.extra: list[_Part] = []  # restored parts of another writer: rolled at once
        self.pending: list[list[Any]] = []
        self.written: list[str] = []
        self.state: Any = None
        self.checked_epoch = -1
        self.input_ended = False
        #: parts are committed by completing multipart uploads (the base path is on an
        #: object store, ``object_commit.py``); decided on first use
        self._uploads_decided: bool | None = None

    # -- state -----------------------------------------------------------------------------
    def initialize_state(self, context: Any) -> None:
        from streamstate.api.state import ListStateDescriptor

        self.state = context.get_operator_state_store().get_list_state(
            ListStateDescriptor(OPEN_PARTS_STATE)
        )
        restored = bool(context.is_restored())
        entries = list(self.state.get() or []) if restored else []
        writers = [e for e in entries if e and e[0] == "writer"]
        parts = [_Part.from_state(e) for e in entries if not (e and e[0] == "writer")]
        ctx = self.ctx
        assert ctx is not None
        self.stamp = ctx.replay_stamp
        mine = writers[0] if len(writers) == 1 else None
        if (
            mine is not None
            and self.stamp is not None
            and mine[4:7] == [self.stamp, ctx.subtask_index, ctx.parallelism]
        ):
            self.writer, self.next_seq = str(mine[2]), int(mine[3])
        else:
            self._start_writer()
        homes = {str(w[7]) for w in writers if len(w) > 7}
        if homes and self.base_path not in homes:
            # restored into another directory: the driver checked that every part of the
            # checkpoint is committed in its own (FileCommitter); nothing there is touched
            log.info("FileSink %s: restored from a checkpoint of %s", self.base_path, homes)
            parts = []
        if not parts and not (self.stamp is not None and (restored or ctx.attempt > 0)):
            return  # nothing this subtask wrote can be committed yet
        scan = scan_output(self.base_path, self.part_prefix, self.part_suffix)
        if self.stamp is not None:
            self.fence = {b: s for (w, b), s in scan.committed.items() if w == self.writer}
        for part in parts:
            self._restore_part(part, scan)

    def _start_writer(self) -> None:
        ctx = self.ctx
        assert ctx is not None
        self.writer = writer_id(ctx.job_id, self.stamp, ctx.subtask_index, ctx.parallelism)
        self.next_seq = 0

    def _restore_part(self, part: _Part, scan: OutputScan) -> None:
        """Continue a restored open part, roll it at once (another writer's), or drop it
        (committed after the checkpoint: a fallback or an older checkpoint)."""
        if part.legacy_name is not None:
            committed = not all(url_exists(self._url(s)) for s in part.segments)
        else:
            committed = scan.covers(part.writer, part.bucket, part.first_seq)
        if committed:
            log.info("FileSink part of %s was committed after the checkpoint", part.writer)
            for seg in part.segments:  # left if the commit died before deleting them
                remove_url(self._url(seg))
            return
        missing = [s for s in part.segments if not url_exists(self._url(s))]
        if missing:
            raise FileSinkRestoreError(
                f"FileSink {self.base_path}: in-progress files of the restored checkpoint are "
                f"missing and their part was never committed there ({first_few(missing)}); they "
                f"were deleted or moved after the checkpoint"
            )
        if part.writer == self.writer and part.bucket not in self.open_parts:
            self.open_parts[part.bucket] = part
        else:
            self.extra.append(part)

    def snapshot_state(self, checkpoint_id: int | None, timestamp_ms: int) -> None:
        now = self._now()
        for part in self.open_parts.values():
            self._flush(part)
        for part in self.extra:
            self._roll(part)
        self.extra = []
        self._roll_by_time(now)
        ending = self.input_ended or bool(getattr(self.ctx, "ending", False))
        if ending or (checkpoint_id is not None and self.rules.on_checkpoint):
            for part in list(self.open_parts.values()):
                self._roll(part)
        elif self.rules.part_size is not None:
            for part in list(self.open_parts.values()):
                if part.size >= self.rules.part_size:
                    self._roll(part)
        if self.state is not None:
            self.state.update(
                [self._writer_entry(), *(p.to_state() for p in self.open_parts.values())]
            )

    def _writer_entry(self) -> list[Any]:
        ctx = self.ctx
        assert ctx is not None and self.writer is not None
        return ["writer", STATE_VERSION, self.writer, self.next_seq, self.stamp,
                ctx.subtask_index, ctx.parallelism, self.base_path]  # fmt: skip

    def process_watermark(self, watermark_ms: int) -> list[Any]:
        if watermark_ms >= MAX_WATERMARK:
            self.input_ended = True  # the end of the input closes every part (Flink's endInput)
        return []

    # -- records ---------------------------------------------------------------------------
    def _now(self) -> int:
        return int(getattr(self.ctx, "processing_time", 0) or 0)

    def process_batch(self, batch: list[Any]) -> list[Any]:
        self._write(batch, None)
        return []

    def process_batch_ts(
        self, batch: list[Any], timestamps: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        self._write(batch, timestamps)
        return [], []

    def _write(self, batch: list[Any], timestamps: list[Any] | None) -> None:
        assert self.ctx is not None
        if self.writer is None:
            self._start_writer()
        now = self._now()
        if self.checked_epoch != self.ctx.epoch:
            self.checked_epoch = self.ctx.epoch
            self._roll_by_time(now)
        context = BucketAssignerContext(now, self.ctx.current_watermark)
        get_bucket = self.assigner.get_bucket_id
        if batch and not self.assigner.per_record:
            self._write_one_bucket(batch, get_bucket(batch[0], context), now)
            return
        part_size = self.rules.part_size if not self.format.bulk else None
        encode = None if self.format.bulk else self.format.encode
        parts, fence = self.open_parts, self.fence
        seq = self.next_seq - 1
        for i, v in enumerate(batch):
            seq += 1
            if timestamps is not None:
                context._timestamp = timestamps[i]
            bucket = get_bucket(v, context)
            if fence and seq <= fence.get(bucket, -1):
                continue  # committed before: a replay after a fallback
            part = parts.get(bucket)
            if part is None:
                part = parts[bucket] = self._new_part(bucket, now, seq)
            if encode is None:
                part.buf.append(v)
                part.size += 1
            else:
                row = encode(v)
                if part_size is not None and part.size and part.size + len(row) > part_size:
                    self._roll(part)
                    part = parts[bucket] = self._new_part(bucket, now, seq)
                part.buf.append(row)
                part.size += len(row)
            part.last, part.last_seq = now, seq
        self.next_seq = seq + 1

    def _write_one_bucket(self, batch: list[Any], bucket: str, now: int) -> None:
        """The whole batch into one bucket (the assigner looks at time only)."""
        first = self.next_seq
        self.next_seq += len(batch)
        skip = self.fence.get(bucket, -1) - first + 1 if self.fence else 0
        if skip > 0:  # committed before: a replay after a fallback
            batch, first = batch[skip:], first + skip
            if not batch:
                return
        part = self.open_parts.get(bucket)
        if part is None:
            part = self.open_parts[bucket] = self._new_part(bucket, now, first)
        part.last = now
        if self.format.bulk:
            part.buf.extend(batch)
            part.size += len(batch)
            part.last_seq = first + len(batch) - 1
            return
        rows = list(map(self.format.encode, batch))
        total = sum(map(len, rows))
        limit = self.rules.part_size
        if limit is None or part.size + total <= limit:
            part.buf.extend(rows)
            part.size += total
            part.last_seq = first + len(rows) - 1
            return
        for seq, row in enumerate(rows, first):  # rolls within the batch: row by row
            if part.size and part.size + len(row) > limit:
                self._roll(part)
                part = self.open_parts[bucket] = self._new_part(bucket, now, seq)
            part.buf.append(row)
            part.size += len(row)
            part.last_seq = seq

    # -- parts -----------------------------------------------------------------------------
    def _new_part(self, bucket: str, now: int, seq: int) -> _Part:
        assert self.writer is not None
        return _Part(bucket, self.writer, seq, seq, now, now)

    def _url(self, path: str) -> str:
        return path if is_absolute_path(path) else f"{self.base_path}/{path}"

    def _hidden(self, part: _Part, kind: str) -> str:
        """A new hidden file of ``part`` (relative path; its directory exists)."""
        stem = part.legacy_name or f"{self.part_prefix}-{part.writer}-{part.first_seq}"
        rel = bucket_path(part.bucket, f".{stem}.{uuid.uuid4().hex}.{kind}")
        fs, path = url_fs(self._url(rel))
        fs.makedirs(fs._parent(path), exist_ok=True)
        return rel

    def _flush(self, part: _Part) -> None:
        if not part.buf:
            return
        seg = self._hidden(part, "inprogress")
        self.format.write_segment(self._url(seg), part.buf)
        part.buf = []
        part.segments.append(seg)
        self.written.append(seg)

    def _roll(self, part: _Part) -> None:
        self._flush(part)
        if self.open_parts.get(part.bucket) is part:
            del self.open_parts[part.bucket]
        name = part.legacy_name or part_file_name(
            self.part_prefix, part.writer, part.last_seq, self.part_suffix
        )
        final = bucket_path(part.bucket, name)
        if part.segments and self._uploads:  # an object store: no rename to commit with
            upload = PartUpload.upload(
                self._url(final), [self._url(s) for s in part.segments], self.format
            )
            self.pending.append(["", final, list(part.segments), upload.to_state()])
        elif len(part.segments) == 1:
            self.pending.append([part.segments[0], final, []])
        elif part.segments:
            merged = self._hidden(part, "pending")
            self.format.merge([self._url(s) for s in part.segments], self._url(merged))
            self.written.append(merged)
            self.pending.append([merged, final, list(part.segments)])

    @property
    def _uploads(self) -> bool:
        if self._uploads_decided is None:
            self._uploads_decided = multipart_store(self.base_path) is not None
        return self._uploads_decided

    def _roll_by_time(self, now: int) -> None:
        r = self.rules
        if r.rollover_ms is None and r.inactivity_ms is None:
            return
        for part in list(self.open_parts.values()):
            if (r.rollover_ms is not None and now - part.created >= r.rollover_ms) or (
                r.inactivity_ms is not None and now - part.last >= r.inactivity_ms
            ):
                self._roll(part)

    def sink_result(self) -> Any:
        if not self.pending and not self.written and not self.open_parts:
            return None
        keep = [
            [s, p.writer, p.first_seq, p.bucket]
            for p in self.open_parts.values()
            for s in p.segments
        ]
        out = {"pending": self.pending, "written": self.written, "open": keep}
        if self.writer is not None and self.ctx is not None:
            out["writer"] = self._writer_entry()
        self.pending, self.written = [], []
        return out
