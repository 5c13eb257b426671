"""The FileSink's commit on an object store: multipart uploads completed at commit.

An object store has no rename, so a part cannot be written hidden and renamed into place
at commit as on a file system (``file_commit.py``). Instead, as Flink's S3 recoverable
writer does, a subtask that rolls a part uploads the part's bytes as the parts of a
*multipart upload* to the part's final key (its segments, merged as the format merges
them, in pieces of at least :data:`UPLOAD_PIECE` bytes) and hands the upload (id, ETags,
size) to the driver with its pending parts. The object does not exist for any reader
until the driver completes the upload, once a checkpoint covering the epoch completed;
completing is idempotent (a commit repeated after a driver restart finds the object of the
recorded size). An aborted epoch aborts its uploads; a restore aborts every upload under
the sink's base path that carries its part prefix and that the restored checkpoint does
not name (left by attempts that died between upload and commit).

A pending entry of an upload is ``["", final, merged segments, upload]`` with ``upload`` =
:meth:`PartUpload.to_state` (``src`` is empty: nothing hidden is renamed).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from streamstate.runtime.stores import MIN_PART_SIZE, MultipartUploads, store_for, url_to_fs

__all__ = ["UPLOAD_PIECE", "PartUpload", "abort_orphan_uploads", "multipart_store"]

#: the size of each uploaded piece but the last (S3's minimum is 5 MiB)
UPLOAD_PIECE = max(MIN_PART_SIZE, 8 * 1024 * 1024)


def multipart_store(url: str) -> MultipartUploads | None:
    """The store of ``url`` if parts are committed there by completing multipart uploads
    (an object store), else ``None`` (a file system: hidden files, renamed at commit)."""
    fs, _ = url_to_fs(url)
    store = store_for(fs)
    return store if isinstance(store, MultipartUploads) else None


@dataclass(frozen=True)
class PartUpload:
    """One part file's multipart upload: done by a subtask, completed by the driver."""

    upload_id: str
    etags: tuple[str, ...]
    size: int

    def to_state(self) -> dict[str, Any]:
        return {"upload": self.upload_id, "etags": list(self.etags), "size": self.size}

    @staticmethod
    def from_state(state: Any) -> PartUpload | None:
        """The upload of a pending entry's fourth element (``None``: a renamed file)."""
        if not isinstance(state, dict) or "upload" not in state:
            return None
        return PartUpload(str(state["upload"]), tuple(state["etags"]), int(state["size"]))

    @staticmethod
    def upload(url: str, segment_urls: list[str], part_format: Any) -> PartUpload:
        """Upload the part made of ``segment_urls`` (merged by ``part_format``, as on a file
        system) to ``url``, not completed. The merge goes through a local temporary file;
        a failure aborts the upload."""
        store = multipart_store(url)
        assert store is not None, f"{url} is not on an object store"
        fs, path = url_to_fs(url)
        fd, local = tempfile.mkstemp(prefix="streamstate-part-")
        os.close(fd)
        upload_id = store.start_upload(fs, path)
        try:
            part_format.merge(segment_urls, local)
            etags, size = [], 0
            for number, piece in enumerate(_pieces(local), 1):
                etags.append(store.upload_part(fs, path, upload_id, number, piece))
                size += len(piece)
        except BaseException:
            with contextlib.suppress(Exception):
                store.abort_upload(fs, path, upload_id)
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(local)
        return PartUpload(upload_id, tuple(etags), size)

    def complete(self, url: str) -> None:
        """Make the part visible at ``url`` (idempotent; raises FileNotFoundError when the
        upload was aborted and the object is not there)."""
        store = multipart_store(url)
        assert store is not None, f"{url} is not on an object store"
        fs, path = url_to_fs(url)
        store.complete_upload(fs, path, self.upload_id, list(self.etags), self.size)

    def abort(self, url: str) -> None:
        store = multipart_store(url)
        if store is not None:
            fs, path = url_to_fs(url)
            store.abort_upload(fs, path, self.upload_id)

    def pending(self, url: str) -> bool:
        """Whether the upload is still open (neither completed nor aborted)."""
        store = multipart_store(url)
        if store is None:
            return False
        fs, path = url_to_fs(url)
        return (path, self.upload_id) in store.list_uploads(fs, path)


def _pieces(local: str) -> Iterator[bytes]:
    """The file's bytes in pieces of :data:`UPLOAD_PIECE` (at least one, maybe empty)."""
    with open(local, "rb") as f:
        piece = f.read(UPLOAD_PIECE)
        yield piece
        while piece := f.read(UPLOAD_PIECE):
            yield piece


def abort_orphan_uploads(base_url: str, part_prefix: str, keep: set[str]) -> int:
    """Abort every open upload under ``base_url`` of a part named ``<part_prefix>-...``
    whose id is not in ``keep``; how many."""
    store = multipart_store(base_url)
    if store is None:
        return 0
    fs, root = url_to_fs(base_url)
    aborted = 0
    for path, upload_id in store.list_uploads(fs, root.rstrip("/") + "/"):
        name = posixpath.basename(path)
        if name.startswith(f"{part_prefix}-") and upload_id not in keep:
            store.abort_upload(fs, path, upload_id)
            aborted += 1
    return aborted
