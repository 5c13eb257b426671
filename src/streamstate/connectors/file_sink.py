"""FileSink runtime: buckets, part files that live across epochs, rolling, two-phase commit.

Every subtask keeps one *open part* per bucket. A part is written as hidden *segments*
(``<bucket>/.<name>.<hex>.inprogress``), one per epoch it received records in, written at
the epoch's end. The open parts (their names, segments, size, creation and last-write
times) are the operator's list state, so a restored subtask continues them, and the
segments of a replayed epoch are new files: nothing a checkpoint names is ever
overwritten. A part *rolls* (Flink: in-progress -> pending) when the rolling policy says
so; a rolled part of one segment is that segment, one of several is merged into one
hidden ``.pending`` file (bytes concatenated for rows; the bulk format merges its own).
The pending files of an epoch go to the driver's :class:`FileCommitter`, which renames
them to ``<bucket>/<prefix>-<uuid>-<n><suffix>`` once a checkpoint covering the epoch
completed, and deletes the merged segments.

Rolling is evaluated at record and epoch boundaries (Flink checks the time-based rules
on a processing-time timer, every ``bucket_check_interval``): part size before every
record (row formats), the rollover and inactivity intervals before an epoch's first
record and at every epoch end, against the epoch's processing time (the driver's clock).
Every checkpoint rolls with ``OnCheckpointRollingPolicy`` (always for bulk formats), and
the end of the input rolls every part.
"""

from __future__ import annotations

import logging
import posixpath
import uuid
from dataclasses import dataclass, field
from typing import Any

from streamstate.connectors.base import SinkCommitter
from streamstate.connectors.buckets import BucketAssigner, BucketAssignerContext
from streamstate.runtime.operators.base import StreamOperator
from streamstate.runtime.watermarks import MAX_WATERMARK

__all__ = [
    "FileCommitter",
    "FileSinkOperator",
    "RollingRules",
    "RowPartFormat",
    "OPEN_PARTS_STATE",
]

OPEN_PARTS_STATE = "file-sink-open-parts"
log = logging.getLogger(__name__)


def _fs(url: str) -> tuple[Any, str]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


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
        fs, path = _fs(url)
        with fs.open(path, "wb") as f:
            f.write(b"".join(rows))

    def merge(self, segments: list[str], url: str) -> None:
        fs, path = _fs(url)
        with fs.open(path, "wb") as out:
            for seg in segments:
                sfs, spath = _fs(seg)
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
    bucket: str
    name: str
    created: int
    last: int
    segments: list[str] = field(default_factory=list)
    size: int = 0
    buf: list[Any] = field(default_factory=list)

    def to_state(self) -> list[Any]:
        return [self.bucket, self.name, self.created, self.last, list(self.segments), self.size]

    @staticmethod
    def from_state(s: list[Any]) -> _Part:
        return _Part(s[0], s[1], s[2], s[3], list(s[4]), s[5])


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
        self.uid = str(uuid.uuid4())
        self.counter = 0
        self.open_parts: dict[str, _Part] = {}
        self.extra: list[_Part] = []  # restored parts of a bucket that is already open
        self.pending: list[list[Any]] = []
        self.written: list[str] = []
        self.state: Any = None
        self.checked_epoch = -1
        self.input_ended = False

    # -- state -----------------------------------------------------------------------------
    def initialize_state(self, context: Any) -> None:
        from streamstate.api.state import ListStateDescriptor

        self.state = context.get_operator_state_store().get_list_state(
            ListStateDescriptor(OPEN_PARTS_STATE)
        )
        if context.is_restored():
            for s in self.state.get() or []:
                part = _Part.from_state(s)
                if not all(_fs(seg)[0].exists(_fs(seg)[1]) for seg in part.segments):
                    # restored from a checkpoint older than the last committed one: a later
                    # checkpoint rolled and committed this part (its segments were merged)
                    log.warning("FileSink part %s was committed after this checkpoint", part.name)
                    continue
                if part.bucket in self.open_parts:
                    self.extra.append(part)
                else:
                    self.open_parts[part.bucket] = part

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
            self.state.update([p.to_state() for p in self.open_parts.values()])

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
        now = self._now()
        if self.checked_epoch != self.ctx.epoch:
            self.checked_epoch = self.ctx.epoch
            self._roll_by_time(now)
        context = BucketAssignerContext(now, self.ctx.current_watermark)
        get_bucket = self.assigner.get_bucket_id
        part_size = self.rules.part_size if not self.format.bulk else None
        encode = None if self.format.bulk else self.format.encode
        parts = self.open_parts
        if batch and not self.assigner.per_record:
            self._write_one_bucket(batch, get_bucket(batch[0], context), now)
            return
        for i, v in enumerate(batch):
            if timestamps is not None:
                context._timestamp = timestamps[i]
            bucket = get_bucket(v, context)
            part = parts.get(bucket)
            if part is None:
                part = parts[bucket] = self._new_part(bucket, now)
            if encode is None:
                part.buf.append(v)
                part.size += 1
            else:
                row = encode(v)
                if part_size is not None and part.size and part.size + len(row) > part_size:
                    self._roll(part)
                    part = parts[bucket] = self._new_part(bucket, now)
                part.buf.append(row)
                part.size += len(row)
            part.last = now

    def _write_one_bucket(self, batch: list[Any], bucket: str, now: int) -> None:
        """The whole batch into one bucket (the assigner looks at time only)."""
        part = self.open_parts.get(bucket)
        if part is None:
            part = self.open_parts[bucket] = self._new_part(bucket, now)
        part.last = now
        if self.format.bulk:
            part.buf.extend(batch)
            part.size += len(batch)
            return
        rows = list(map(self.format.encode, batch))
        total = sum(map(len, rows))
        limit = self.rules.part_size
        if limit is None or part.size + total <= limit:
            part.buf.extend(rows)
            part.size += total
            return
        for row in rows:  # rolls within the batch: row by row
            if part.size and part.size + len(row) > limit:
                self._roll(part)
                part = self.open_parts[bucket] = self._new_part(bucket, now)
            part.buf.append(row)
            part.size += len(row)

    # -- parts -----------------------------------------------------------------------------
    def _new_part(self, bucket: str, now: int) -> _Part:
        name = f"{self.part_prefix}-{self.uid}-{self.counter}{self.part_suffix}"
        self.counter += 1
        return _Part(bucket, name, now, now)

    def _dir(self, bucket: str) -> str:
        return posixpath.join(self.base_path, bucket) if bucket else self.base_path

    def _hidden(self, part: _Part, kind: str) -> str:
        url = f"{self._dir(part.bucket)}/.{part.name}.{uuid.uuid4().hex}.{kind}"
        fs, path = _fs(url)
        fs.makedirs(fs._parent(path), exist_ok=True)
        return url

    def _flush(self, part: _Part) -> None:
        if not part.buf:
            return
        seg = self._hidden(part, "inprogress")
        self.format.write_segment(seg, part.buf)
        part.buf = []
        part.segments.append(seg)
        self.written.append(seg)

    def _roll(self, part: _Part) -> None:
        self._flush(part)
        if self.open_parts.get(part.bucket) is part:
            del self.open_parts[part.bucket]
        final = f"{self._dir(part.bucket)}/{part.name}"
        if len(part.segments) == 1:
            self.pending.append([part.segments[0], final, []])
        elif part.segments:
            merged = self._hidden(part, "pending")
            self.format.merge(part.segments, merged)
            self.written.append(merged)
            self.pending.append([merged, final, list(part.segments)])

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
        keep = [s for p in self.open_parts.values() for s in p.segments]
        out = {"pending": self.pending, "written": self.written, "open": keep}
        self.pending, self.written = [], []
        return out


class FileCommitter(SinkCommitter):
    """Driver half: pending part files are renamed to their final names on commit.

    A subtask's result is ``{"pending": [[src, final, merged segments]], "written": [files
    this epoch created], "open": [segments of its open parts]}`` (a list of ``[tmp, final]``
    pairs is the format of earlier versions). Commit renames ``src`` (skipped when it is
    gone: idempotent) and deletes the merged segments. Abort deletes the files the aborted
    epochs created. The checkpoint stores the pending parts and the open segments; a
    restore commits the first and deletes every other hidden in-progress or pending file
    of this sink's part prefix under the base path (left by attempts that died)."""

    def __init__(self, base_path: str | None = None, part_prefix: str = "part") -> None:
        self.base_path = base_path
        self.part_prefix = part_prefix
        self.pending: dict[int, list[list[Any]]] = {}
        self.written: dict[int, list[str]] = {}
        self.open: dict[int, list[str]] = {}

    def prepare(self, epoch: int, results: list[Any]) -> None:
        pend = self.pending.setdefault(epoch, [])
        for r in results:
            if not r:
                continue
            if isinstance(r, dict):
                pend.extend(r["pending"])
                self.written.setdefault(epoch, []).extend(r["written"])
                self.open.setdefault(epoch, []).extend(r["open"])
            else:
                pend.extend([*pair, []] for pair in r)

    @staticmethod
    def _commit_one(src: str, final: str, cleanup: list[str] | tuple[str, ...] = ()) -> None:
        fs, spath = _fs(src)
        _, fpath = _fs(final)
        if fs.exists(spath):
            fs.mv(spath, fpath)  # idempotent: a second commit finds nothing to move
        for seg in cleanup:
            sfs, p = _fs(seg)
            if sfs.exists(p):
                sfs.rm(p)

    def commit(self, up_to_epoch: int) -> None:
        for e in sorted(e for e in self.pending if e <= up_to_epoch):
            for entry in self.pending.pop(e):
                self._commit_one(entry[0], entry[1], entry[2] if len(entry) > 2 else ())
        for d in (self.written, self.open):
            for e in [e for e in d if e < up_to_epoch]:
                del d[e]
        self.written.pop(up_to_epoch, None)

    def abort(self, after_epoch: int) -> None:
        for e in [e for e in self.pending if e > after_epoch]:
            entries = self.pending.pop(e)
            if e not in self.written:  # results of earlier versions: the tmp file is the epoch's
                for entry in entries:
                    fs, p = _fs(entry[0])
                    if fs.exists(p):
                        fs.rm(p)
        for e in [e for e in self.written if e > after_epoch]:
            for f in self.written.pop(e):
                fs, p = _fs(f)
                if fs.exists(p):
                    fs.rm(p)
        for e in [e for e in self.open if e > after_epoch]:
            del self.open[e]

    def snapshot(self, up_to_epoch: int) -> Any:
        pending = [
            entry for e, es in sorted(self.pending.items()) if e <= up_to_epoch for entry in es
        ]
        if self.base_path is None:
            return pending
        return {"pending": pending, "open": list(self.open.get(up_to_epoch, []))}

    def restore(self, state: Any) -> None:
        if isinstance(state, dict):
            pending, keep = state["pending"], set(state["open"])
        else:
            pending, keep = state or [], set()
        for entry in pending:
            self._commit_one(entry[0], entry[1], entry[2] if len(entry) > 2 else ())
        if self.base_path is not None and isinstance(state, dict):
            self._delete_orphans(keep)

    def _delete_orphans(self, keep: set[str]) -> None:
        assert self.base_path is not None
        fs, root = _fs(self.base_path)
        if not fs.exists(root):
            return
        keep_paths = {_fs(k)[1] for k in keep}
        for p in fs.find(root):
            name = posixpath.basename(p)
            if (
                name.startswith(f".{self.part_prefix}-")
                and name.endswith((".inprogress", ".pending"))
                and p not in keep_paths
            ):
                fs.rm(p)
