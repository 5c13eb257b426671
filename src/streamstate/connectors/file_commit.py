"""The FileSink's committed output: part names fixed by their records, the listing of a
sink's directory, and the driver's :class:`FileCommitter` (see ``file_sink.py`` for the
subtasks' half and the naming scheme).

A committed part is ``<bucket>/<prefix>-<writer>-<seq><suffix>``: ``writer`` is the UUID
of the subtask writer that wrote it and ``seq`` the number of its last record among the
records that writer received. Per writer and bucket the committed parts hold a prefix of
the bucket's records (parts roll and commit in order), so the highest committed ``seq``
says which records a replay must not write again (:class:`OutputScan`). Names are chosen
before a part is published; nothing depends on renames being atomic.
"""

from __future__ import annotations

import logging
import posixpath
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from streamstate.connectors.base import SinkCommitter
from streamstate.connectors.object_commit import PartUpload, abort_orphan_uploads
from streamstate.errors import FileSinkRestoreError
from streamstate.runtime.stores import url_to_fs

__all__ = [
    "STATE_VERSION",
    "FileCommitter",
    "OutputScan",
    "bucket_of",
    "bucket_path",
    "first_few",
    "is_absolute_path",
    "part_file_name",
    "remove_url",
    "scan_output",
    "url_exists",
    "url_fs",
    "writer_id",
]

log = logging.getLogger(__name__)

#: the namespace of writer ids derived from a job id (uuid5)
_WRITER_NAMESPACE = uuid.UUID("5f0c2a44-6a53-4d1f-9d2e-7b1f3c8e9a10")
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
#: the version of the committer's checkpointed state (1: absolute paths, no writers)
STATE_VERSION = 2


def url_fs(url: str) -> tuple[Any, str]:
    """``(file system, path)`` with the job's storage options (runtime/stores/)."""
    return url_to_fs(url)


def url_exists(url: str) -> bool:
    fs, path = url_fs(url)
    return bool(fs.exists(path))


def remove_url(url: str) -> None:
    fs, path = url_fs(url)
    if fs.exists(path):
        fs.rm(path)


def is_absolute_path(path: str) -> bool:
    """Paths of state written before version 2 (and of committers without a base path)."""
    return "://" in path or path.startswith("/")


def first_few(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")


def bucket_of(rel: str) -> str:
    return posixpath.dirname(rel)


def bucket_path(bucket: str, name: str) -> str:
    return f"{bucket}/{name}" if bucket else name


def part_file_name(prefix: str, writer: str, seq: int, suffix: str) -> str:
    """The committed name of a part of ``writer`` whose last record is number ``seq``."""
    return f"{prefix}-{writer}-{seq}{suffix}"


def writer_id(job_id: str, stamp: str | None, subtask: int, parallelism: int) -> str:
    """A fresh writer's id: fixed by the job, its replay stamp and the subtask when the
    job replays exactly (a restart from the beginning continues the same names), random
    otherwise."""
    if stamp is None or not job_id:
        return str(uuid.uuid4())
    return str(uuid.uuid5(_WRITER_NAMESPACE, f"{job_id}/{stamp}/{subtask}/{parallelism}"))


@dataclass
class OutputScan:
    """What a sink's base path holds: the highest committed record number per (writer,
    bucket), the committed parts, and the sink's hidden in-progress/pending files (paths
    relative to the base path)."""

    committed: dict[tuple[str, str], int] = field(default_factory=dict)
    parts: list[tuple[str, str, int, str]] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)

    def covers(self, writer: str, bucket: str, seq: int) -> bool:
        """Whether record ``seq`` of ``writer`` in ``bucket`` is in a committed part."""
        return self.committed.get((writer, bucket), -1) >= seq


def scan_output(base_path: str, prefix: str, suffix: str) -> OutputScan:
    """One listing of ``base_path`` (recursively): see :class:`OutputScan`."""
    committed = re.compile(rf"^{re.escape(prefix)}-({_UUID})-(\d+){re.escape(suffix)}$")
    scan = OutputScan()
    fs, root = url_fs(base_path)
    root = root.rstrip("/")
    if not fs.exists(root):
        return scan
    for path in fs.find(root):
        rel = path[len(root) + 1 :] if path.startswith(root + "/") else path
        name = posixpath.basename(rel)
        if name.startswith(f".{prefix}-") and name.endswith((".inprogress", ".pending")):
            scan.hidden.append(rel)
            continue
        m = committed.match(name)
        if m is None:
            continue
        writer, seq, bucket = m.group(1), int(m.group(2)), bucket_of(rel)
        scan.parts.append((writer, bucket, seq, rel))
        key = (writer, bucket)
        scan.committed[key] = max(seq, scan.committed.get(key, -1))
    return scan


class FileCommitter(SinkCommitter):
    """Driver half: pending part files are published under their final names on commit.

    A subtask's result is ``{"pending": [[src, final, merged segments]], "written": [files
    this epoch created], "open": [[segment, writer, first record, bucket] of its open
    parts], "writer": its writer entry}``, paths relative to the base path (a list of
    ``[tmp, final]`` absolute pairs is the format of earlier versions). Commit renames
    ``src`` (skipped when it is gone: idempotent) and deletes the merged segments. Abort
    deletes the files the aborted epochs created. The checkpoint stores the base path, the
    pending parts, the open segments and the writers; a restore checks that every file it
    names is there or committed (:class:`FileSinkRestoreError` otherwise), refuses to
    replay past parts the checkpoint's writers committed later unless the replay skips
    them or duplicates are allowed (:class:`DuplicateOutputError`), commits the pending
    parts and deletes every other hidden in-progress or pending file of this sink's part
    prefix under the base path (left by attempts that died), and on an object store aborts
    every open multipart upload of its parts there (``object_commit.py``)."""

    #: the subtasks skip replayed records whose parts are committed (module docstring)
    skips_replayed_records = True

    def __init__(
        self, base_path: str | None = None, part_prefix: str = "part", part_suffix: str = ""
    ) -> None:
        super().__init__()
        self.base_path = base_path.rstrip("/") if base_path is not None else None
        self.part_prefix = part_prefix
        self.part_suffix = part_suffix
        self.pending: dict[int, list[list[Any]]] = {}
        self.written: dict[int, list[str]] = {}
        self.open: dict[int, list[Any]] = {}
        #: subtask -> its latest writer entry, per epoch
        self.writers: dict[int, dict[int, list[Any]]] = {}

    def _url(self, path: str) -> str:
        if self.base_path is None or is_absolute_path(path):
            return path
        return f"{self.base_path}/{path}"

    def prepare(self, epoch: int, results: list[Any]) -> None:
        pend = self.pending.setdefault(epoch, [])
        for i, r in enumerate(results):
            if not r:
                continue
            if isinstance(r, dict):
                pend.extend(r["pending"])
                self.written.setdefault(epoch, []).extend(r["written"])
                self.open.setdefault(epoch, []).extend(r["open"])
                if "writer" in r:
                    self.writers.setdefault(epoch, {})[i] = r["writer"]
            else:
                pend.extend([*pair, []] for pair in r)

    def _commit_one(
        self,
        src: str,
        final: str,
        cleanup: list[str] | tuple[str, ...] = (),
        upload: dict[str, Any] | None = None,
    ) -> None:
        """Publish one pending part: complete its multipart upload (an object store,
        ``object_commit.py``) or rename its hidden file; both idempotent. Then delete
        the segments it was made of."""
        part_upload = PartUpload.from_state(upload)
        if part_upload is not None:
            part_upload.complete(self._url(final))
        else:
            fs, spath = url_fs(self._url(src))
            _, fpath = url_fs(self._url(final))
            if fs.exists(spath):
                fs.mv(spath, fpath)  # idempotent: a second commit finds nothing to move
        for seg in cleanup:
            remove_url(self._url(seg))

    def _commit_entry(self, entry: list[Any]) -> None:
        """A pending entry: ``[src, final, merged segments, upload]`` (the last two absent
        in entries of earlier versions)."""
        self._commit_one(*entry[:2], *([entry[2]] if len(entry) > 2 else []), *entry[3:4])

    def commit(self, up_to_epoch: int) -> None:
        for e in sorted(e for e in self.pending if e <= up_to_epoch):
            for entry in self.pending.pop(e):
                self._commit_entry(entry)
        for d in (self.written, self.open):
            for e in [e for e in d if e < up_to_epoch]:
                del d[e]
        self.written.pop(up_to_epoch, None)
        latest = self._writers_up_to(up_to_epoch)
        self.writers = {e: w for e, w in self.writers.items() if e > up_to_epoch}
        if latest:
            self.writers[up_to_epoch] = latest

    def _writers_up_to(self, epoch: int) -> dict[int, list[Any]]:
        merged: dict[int, list[Any]] = {}
        for e in sorted(e for e in self.writers if e <= epoch):
            merged.update(self.writers[e])
        return merged

    def abort(self, after_epoch: int) -> None:
        for e in [e for e in self.pending if e > after_epoch]:
            entries = self.pending.pop(e)
            for entry in entries:
                upload = PartUpload.from_state(entry[3] if len(entry) > 3 else None)
                if upload is not None:  # never completed: its parts go
                    upload.abort(self._url(entry[1]))
                elif e not in self.written:  # earlier versions: the tmp file is the epoch's
                    remove_url(self._url(entry[0]))
        for e in [e for e in self.written if e > after_epoch]:
            for f in self.written.pop(e):
                remove_url(self._url(f))
        for d in (self.open, self.writers):
            for e in [e for e in d if e > after_epoch]:
                del d[e]

    def snapshot(self, up_to_epoch: int) -> Any:
        pending = [
            entry for e, es in sorted(self.pending.items()) if e <= up_to_epoch for entry in es
        ]
        if self.base_path is None:
            return pending
        writers = self._writers_up_to(up_to_epoch)
        return {
            "version": STATE_VERSION,
            "base": self.base_path,
            "pending": pending,
            "open": list(self.open.get(up_to_epoch, [])),
            "writers": [writers[i] for i in sorted(writers)],
        }

    def restore(self, state: Any) -> None:
        if isinstance(state, dict) and state.get("version") == STATE_VERSION:
            self._restore(state)
            return
        # version 1: absolute paths, no writers
        if isinstance(state, dict):
            pending, keep = state["pending"], {url_fs(k)[1] for k in state["open"]}
        else:
            pending, keep = state or [], set()
        for entry in pending:
            self._commit_entry(entry)
        if self.base_path is not None and isinstance(state, dict):
            fs, root = url_fs(self.base_path)
            for rel in scan_output(self.base_path, self.part_prefix, self.part_suffix).hidden:
                if url_fs(self._url(rel))[1] not in keep:
                    remove_url(self._url(rel))

    def _restore(self, state: dict[str, Any]) -> None:
        assert self.base_path is not None
        home = str(state.get("base") or self.base_path)  # where the checkpoint's files are
        at_home = home == self.base_path
        scan = scan_output(self.base_path, self.part_prefix, self.part_suffix)
        home_scan = scan if at_home else scan_output(home, self.part_prefix, self.part_suffix)
        missing, uncommitted = [], []
        for src, final, *rest in state["pending"]:
            upload = PartUpload.from_state(rest[1] if len(rest) > 1 else None)
            if upload is not None and upload.pending(f"{home}/{final}"):
                uncommitted.append(final)
            elif upload is None and url_exists(f"{home}/{src}"):
                uncommitted.append(src)
            elif not (url_exists(f"{home}/{final}") or self._covered(home_scan, final)):
                missing.append(f"{src} (to become {final})")
        for seg, writer, first, bucket in state["open"]:
            if url_exists(f"{home}/{seg}"):
                uncommitted.append(seg)
            elif not home_scan.covers(writer, bucket, first):
                missing.append(seg)
        if missing:
            raise FileSinkRestoreError(
                f"FileSink {home}: {len(missing)} file(s) of the restored checkpoint are "
                f"missing and were never committed there ({first_few(missing)}); they were deleted "
                f"or moved after the checkpoint, so its output cannot be completed"
            )
        if uncommitted and not at_home:
            raise FileSinkRestoreError(
                f"FileSink: the checkpoint's output directory is {home}, where "
                f"{len(uncommitted)} of its files are pending or in progress ({first_few(uncommitted)}),"
                f" but this job writes to {self.base_path}: a restore there would take them "
                f"from {home}. Restore it with the sink writing to {home}, or restore a "
                f"checkpoint whose output is all committed (e.g. a stop-with-savepoint)"
            )
        self._check_replay(state, scan)
        for entry in state["pending"] if at_home else ():
            self._commit_entry(entry)
        keep = {seg for seg, *_ in state["open"]}
        for rel in scan.hidden:
            if rel not in keep:
                remove_url(self._url(rel))
        # uploads of attempts that died between uploading a part and its commit
        abort_orphan_uploads(self.base_path, self.part_prefix, keep=set())

    def _covered(self, scan: OutputScan, final: str) -> bool:
        """A pending part whose target is gone, but a later part of its writer committed."""
        m = re.match(rf"^{re.escape(self.part_prefix)}-({_UUID})-(\d+)", posixpath.basename(final))
        return m is not None and scan.covers(m.group(1), bucket_of(final), int(m.group(2)))

    def _check_replay(self, state: dict[str, Any], scan: OutputScan) -> None:
        """Refuse to replay past parts the checkpoint's writers committed after it unless the
        subtasks skip them (an exact replay) or the user allowed duplicates."""
        writers = {w[2]: w for w in state.get("writers", [])}
        later = sorted(
            rel
            for writer, _, seq, rel in scan.parts
            if writer in writers and seq >= int(writers[writer][3])
        )
        if not later:
            return
        plan = self.replay
        if plan.stamp is not None and all(w[4] == plan.stamp for w in writers.values()):
            log.info(
                "FileSink %s: %d parts were committed after this checkpoint; the replay skips "
                "their records", self.base_path, len(later),
            )  # fmt: skip
            return
        plan.duplicates(
            f"FileSink {self.base_path}: {len(later)} part file(s) were committed after this "
            f"checkpoint ({first_few(later)}) and this replay cannot tell which of its "
            f"records they hold ({plan.why_not_exact}), so it would write them again"
        )
