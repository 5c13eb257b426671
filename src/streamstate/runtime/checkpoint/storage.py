"""Checkpoint storage access: where subtasks put state bytes and the driver puts ``_metadata``.

Layout (DESIGN.md section 4), for a checkpoint directory ``<dir>`` (any fsspec URL)::

    <dir>/<job-id>/chk-<n>/_metadata     written last, atomically; the checkpoint exists iff it does
    <dir>/<job-id>/chk-<n>/<name>        state files written by subtasks for checkpoint n
    <dir>/<job-id>/shared/...            files shared by several checkpoints (never deleted here)
    <dir>/<job-id>/epochs/<scope>/...    per-epoch state versions (not checkpoints)

A :class:`CheckpointStorageAccess` is created on the driver, ``initialize_job`` is called,
and then it is pickled and shipped to Spark workers, which call ``write_state`` and
``write_epoch_state`` only. Everything else (metadata, listing, pruning) runs on the driver.

Atomicity: every file is written through the store of its file system
(:mod:`streamstate.runtime.stores`): a temporary sibling renamed over the name on a POSIX
file system, one PUT of the final key on an object store. ``_metadata`` is written once
(an exclusive link, a conditional PUT): a reader never sees a partial one, and a completed
checkpoint is never replaced.
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar, Protocol

from streamstate.errors import (
    CheckpointStorageError,
    ConfigurationError,
    CorruptCheckpointError,
)
from streamstate.runtime.checkpoint.handles import (
    FileStateHandle,
    StreamStateHandle,
    relative_paths_under,
)
from streamstate.runtime.checkpoint.lock import is_local
from streamstate.runtime.checkpoint.metadata import CheckpointMetadata
from streamstate.runtime.stores import (
    MultipartUploads,
    explain_access_error,
    explained,
    store_for,
    url_to_fs,
    write_atomic,
    write_once,
)
from streamstate.runtime.stores.files import link_file

__all__ = [
    "CHECKPOINT_DIR_PREFIX",
    "EPOCHS_DIR",
    "METADATA_FILE_NAME",
    "SHARED_DIR",
    "CheckpointDirectory",
    "abort_open_uploads",
    "CheckpointStorageAccess",
    "SharedStateTarget",
    "atomic_write",
    "epoch_state_name",
    "load_metadata_from_path",
    "load_restore_point",
    "newer_checkpoints",
    "resolve_external_pointer",
    "verify_state_files",
]

log = logging.getLogger(__name__)

METADATA_FILE_NAME = "_metadata"
CHECKPOINT_DIR_PREFIX = "chk-"
SHARED_DIR = "shared"
EPOCHS_DIR = "epochs"

_CHK_RE = re.compile(r"^chk-(\d+)$")
_EPOCH_VERSION_RE = re.compile(r"^v(\d+)(?:[-.]|$)")
_ATTEMPT_RE = re.compile(r"^\.?a(\d+)-e\d+-")
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


# ---------------------------------------------------------------------------------------------
# fsspec helpers


def _url_to_fs(url: str) -> tuple[Any, str]:
    """``(file system, path)`` of a checkpoint location (:func:`stores.url_to_fs`)."""
    return url_to_fs(url)


def _join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def _check_relative_name(name: str, what: str) -> str:
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ConfigurationError(f"{what} {name!r} must be a relative path without '.' or '..'")
    return name


def atomic_write(fs: Any, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either nothing or all of it.

    The store of ``fs`` decides how (:mod:`streamstate.runtime.stores`): a file system
    renames a finished temporary sibling over ``path``, an object store PUTs the final key
    (no rename there, and none needed: an object appears whole). A failure raises
    :class:`CheckpointStorageError` (a typed :class:`StoreAccessError` naming the setting
    for refused credentials or an unreachable endpoint) and leaves no visible file.
    """
    try:
        write_atomic(fs, path, data)
    except OSError as e:
        raise _storage_error(fs, path, e) from e


def write_once_or_fail(fs: Any, path: str, data: bytes, what: str) -> None:
    """Create ``path`` (``_metadata``) with ``data``, atomically and only if it does not
    exist: a conditional PUT on an object store, an exclusive link on a file system.
    Raises :class:`CheckpointStorageError` when it exists: never overwritten."""
    try:
        created = write_once(fs, path, data)
    except OSError as e:
        raise _storage_error(fs, path, e) from e
    if not created:
        raise CheckpointStorageError(
            f"{fs.unstrip_protocol(path)} exists already: {what} was completed by another "
            f"writer (two drivers of one job directory?); it is never overwritten"
        )


def abort_open_uploads(fs: Any, prefix: str, which: Any = None) -> int:
    """Abort the multipart uploads under ``prefix`` (a directory) that no writer will
    complete: a state file above the store's single-PUT size is uploaded in parts, and a
    writer that died mid-upload leaves the parts stored (and billed) but invisible to every
    listing. ``which(path)`` picks the uploads to abort (default: all). Nothing to do on a
    store without multipart uploads; returns how many were aborted."""
    store = store_for(fs)
    if not isinstance(store, MultipartUploads):
        return 0
    aborted = 0
    for path, upload_id in store.list_uploads(fs, prefix.rstrip("/") + "/"):
        if which is None or which(path):
            store.abort_upload(fs, path, upload_id)
            aborted += 1
    return aborted


def _storage_error(fs: Any, path: str, error: OSError) -> CheckpointStorageError:
    if isinstance(error, CheckpointStorageError):
        return error
    url = fs.unstrip_protocol(path)
    explained = explain_access_error(fs, url, error)
    if isinstance(explained, CheckpointStorageError):
        return explained
    return CheckpointStorageError(f"cannot write {url}: {error}")


def epoch_state_name(scope: str, version: int, part: str = "state") -> str:
    """Conventional ``version_name`` for :meth:`CheckpointStorageAccess.write_epoch_state`.

    ``<scope>/v<version>-<part>``; :meth:`~CheckpointStorageAccess.discard_epoch_states_before`
    understands this shape.
    """
    _check_relative_name(scope, "epoch state scope")
    if version < 0:
        raise ConfigurationError(f"epoch state version must be >= 0, got {version}")
    return f"{scope}/v{version}-{part}"


# ---------------------------------------------------------------------------------------------
# Metadata files


def resolve_external_pointer(path: str) -> str:
    """Resolve a ``chk-<n>``/savepoint directory or a ``_metadata`` file to its ``_metadata`` URL.

    Used for ``execution.state-recovery.path``. Raises :class:`CorruptCheckpointError` when
    no ``_metadata`` exists there (the checkpoint never completed, or the path is wrong).
    """
    fs, p = _url_to_fs(path)
    if p.rsplit("/", 1)[-1] == METADATA_FILE_NAME:
        meta = p
    else:
        meta = _join(p, METADATA_FILE_NAME)
    with explained(fs, path):
        found = fs.exists(meta) and not fs.isdir(meta)
    if not found:
        raise CorruptCheckpointError(
            _subsumed_by(fs, meta)
            or f"no {METADATA_FILE_NAME} at {path!r}: the checkpoint never completed or the "
            f"path is wrong. Pass a completed checkpoint directory (chk-<n>) or its "
            f"{METADATA_FILE_NAME} file"
        )
    return fs.unstrip_protocol(meta)


def _subsumed_by(fs: Any, meta: str) -> str | None:
    """Why ``<job dir>/chk-<n>/_metadata`` is missing when a newer checkpoint of the same
    job completed (it was subsumed: deleted once ``num-retained`` newer ones existed),
    naming the newest; None when there is no newer one."""
    chk_dir, job_dir = meta.rsplit("/", 1)[0], meta.rsplit("/", 2)[0]
    m = _CHK_RE.match(chk_dir.rsplit("/", 1)[-1])
    if m is None:
        return None
    newer = sorted(
        (cid, d)
        for cid, d in _checkpoint_dirs(fs, job_dir)
        if cid > int(m.group(1)) and fs.exists(_join(d, METADATA_FILE_NAME))
    )
    if not newer:
        return None
    first, (newest_id, newest) = newer[0][0], newer[-1]
    return (
        f"checkpoint chk-{m.group(1)} of job {job_dir.rsplit('/', 1)[-1]} is gone: it was "
        f"subsumed by chk-{first} (a job keeps the newest "
        f"execution.checkpointing.num-retained completed checkpoints, default 1, and deletes "
        f"older ones). The newest is chk-{newest_id}: {fs.unstrip_protocol(newest)}"
    )


def verify_state_files(metadata: CheckpointMetadata, where: str) -> None:
    """Read every state file of ``metadata`` once and check its size and CRC.

    Raises :class:`CorruptCheckpointError` naming the checkpoint and the damaged file.
    """
    seen: set[Any] = set()
    for h in metadata.stream_handles():
        key = h.path if isinstance(h, FileStateHandle) else id(h)
        if key in seen:
            continue
        seen.add(key)
        try:
            h.read()
        except CorruptCheckpointError as e:
            raise CorruptCheckpointError(f"checkpoint {where}: {e}") from e


def load_metadata_from_path(path: str, verify: bool = True) -> CheckpointMetadata:
    """Load the checkpoint at ``path`` (directory or ``_metadata`` file).

    Missing, unparsable or too-new metadata, and (with ``verify``) any state file with a
    wrong size or CRC raise :class:`CorruptCheckpointError` naming the path.
    """
    meta_url = resolve_external_pointer(path)
    fs, p = _url_to_fs(meta_url)
    try:
        with fs.open(p, "rb") as f:
            data = f.read()
    except FileNotFoundError as e:
        why = _subsumed_by(fs, p) or f"{meta_url} disappeared while reading it"
        raise CorruptCheckpointError(why) from e
    with relative_paths_under(meta_url.rsplit("/", 1)[0]):
        md = CheckpointMetadata.from_file_bytes(data, meta_url)
    if verify:
        verify_state_files(md, meta_url)
    return md


def load_restore_point(path: str) -> tuple[CheckpointMetadata, str]:
    """The checkpoint to restore for ``path``: ``(metadata, its _metadata URL)``.

    ``path`` is a checkpoint or savepoint directory (``chk-<n>``) or its ``_metadata`` file;
    or a job's directory (``<dir>/<job-id>``), meaning its newest checkpoint that loads and
    verifies; or a checkpoint base directory holding job directories, meaning the newest
    (by trigger time) valid checkpoint of any of them. Damaged checkpoints are skipped with
    a warning; none valid raises :class:`CorruptCheckpointError` listing what was tried.
    """
    fs, p = _url_to_fs(path)
    with explained(fs, path):
        here = fs.exists(_join(p, METADATA_FILE_NAME))
    if here or p.rsplit("/", 1)[-1] == METADATA_FILE_NAME:
        md = load_metadata_from_path(path, verify=True)
        return md, resolve_external_pointer(path)
    tried: list[str] = []
    job_dirs = [p] if _checkpoint_dirs(fs, p) else sorted(_ls_dirs(fs, p))
    found: list[tuple[int, int, CheckpointMetadata, str]] = []
    for job_dir in job_dirs:
        newest = _newest_valid(fs, job_dir, tried)
        if newest is not None:
            found.append(newest)
    if not found:
        raise CorruptCheckpointError(
            f"no valid completed checkpoint under {path!r}"
            + (f"; damaged: {'; '.join(tried)}" if tried else "")
            + ". Pass a checkpoint directory (chk-<n>), a job's checkpoint directory, or the "
            "checkpoint base directory"
        )
    _, _, md, url = max(found, key=lambda x: (x[0], x[1]))
    log.info("restoring checkpoint %s (the newest valid one under %s)", url, path)
    return md, url


def newer_checkpoints(meta_url: str) -> tuple[list[str], CheckpointMetadata | None]:
    """The completed checkpoints of the same job directory that are newer than the
    checkpoint whose ``_metadata`` is ``meta_url`` (their ``_metadata`` URLs, newest first),
    and the metadata of the newest of them that loads (its state files are not read).
    Empty for a savepoint or a checkpoint outside a job directory."""
    fs, p = _url_to_fs(meta_url)
    chk_dir = p.rsplit("/", 1)[0]
    m = _CHK_RE.match(chk_dir.rsplit("/", 1)[-1])
    if m is None:
        return [], None
    newer = [
        fs.unstrip_protocol(_join(d, METADATA_FILE_NAME))
        for cid, d in sorted(_checkpoint_dirs(fs, chk_dir.rsplit("/", 1)[0]), reverse=True)
        if cid > int(m.group(1)) and fs.exists(_join(d, METADATA_FILE_NAME))
    ]
    for url in newer:
        try:
            return newer, load_metadata_from_path(url, verify=False)
        except CorruptCheckpointError as e:
            log.warning("cannot read the newer checkpoint %s: %s", url, e)
    return newer, None


def _newest_valid(
    fs: Any, job_dir: str, tried: list[str]
) -> tuple[int, int, CheckpointMetadata, str] | None:
    """``(trigger time, id, metadata, url)`` of the newest checkpoint of ``job_dir`` that
    loads and verifies (damaged ones are skipped and recorded in ``tried``)."""
    for cid, d in sorted(_checkpoint_dirs(fs, job_dir), reverse=True):
        if not fs.exists(_join(d, METADATA_FILE_NAME)):
            continue  # never completed
        url = fs.unstrip_protocol(_join(d, METADATA_FILE_NAME))
        try:
            md = load_metadata_from_path(url, verify=True)
        except CorruptCheckpointError as e:
            log.warning("skipping checkpoint %s: %s", url, e)
            tried.append(f"{url}: {e}")
            continue
        return md.timestamp_ms, cid, md, url
    return None


def _checkpoint_dirs(fs: Any, directory: str) -> list[tuple[int, str]]:
    out = []
    for d in _ls_dirs(fs, directory):
        m = _CHK_RE.match(d.rsplit("/", 1)[-1])
        if m:
            out.append((int(m.group(1)), d))
    return out


def _ls_dirs(fs: Any, directory: str) -> list[str]:
    try:
        entries = fs.ls(directory, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [e["name"].rstrip("/") for e in entries if e.get("type") == "directory"]


class CheckpointDirectory:
    """``<base>/<job-id>/chk-<n>/...`` on one fsspec file system (driver-side helper).

    Used by the file system storage for everything, and by the in-memory storage when it
    was given a ``checkpoint_path`` to persist metadata to.
    """

    def __init__(self, base_url: str, job_id: str) -> None:
        self.base_url = base_url
        self.job_id = job_id
        self._fs: Any = None
        self._root = ""

    def __getstate__(self) -> dict[str, Any]:
        # File system objects may hold sockets/credentials caches: rebuild them after unpickling.
        return {"base_url": self.base_url, "job_id": self.job_id, "_fs": None, "_root": ""}

    @property
    def fs(self) -> Any:
        if self._fs is None:
            self._fs, self._root = _url_to_fs(self.base_url)
        return self._fs

    @property
    def job_path(self) -> str:
        _ = self.fs
        return _join(self._root, self.job_id)

    def checkpoint_path(self, checkpoint_id: int) -> str:
        return _join(self.job_path, f"{CHECKPOINT_DIR_PREFIX}{checkpoint_id}")

    def url(self, path: str) -> str:
        return self.fs.unstrip_protocol(path)

    def checkpoint_url(self, checkpoint_id: int) -> str:
        return self.url(self.checkpoint_path(checkpoint_id))

    def write_file(self, path: str, data: bytes) -> FileStateHandle:
        atomic_write(self.fs, path, data)
        return FileStateHandle.of(self.url(path), data)

    def _chk_dirs(self) -> dict[int, str]:
        try:
            entries = self.fs.ls(self.job_path, detail=False)
        except FileNotFoundError:
            return {}
        out: dict[int, str] = {}
        for e in entries:
            m = _CHK_RE.match(e.rstrip("/").rsplit("/", 1)[-1])
            if m:
                out[int(m.group(1))] = e
        return out

    def max_checkpoint_id_in_use(self) -> int:
        """Highest n with a ``chk-<n>`` directory, complete or not (0 if none)."""
        return max(self._chk_dirs(), default=0)

    def list_checkpoints(self) -> list[int]:
        return sorted(
            n for n, d in self._chk_dirs().items() if self.fs.exists(_join(d, METADATA_FILE_NAME))
        )

    def incomplete_checkpoints(self) -> list[int]:
        """Ids of the ``chk-<n>`` directories without ``_metadata`` (in flight, aborted,
        or left by a writer that outlived the abort), ascending."""
        return sorted(
            n
            for n, d in self._chk_dirs().items()
            if not self.fs.exists(_join(d, METADATA_FILE_NAME))
        )

    def store_metadata(self, metadata: CheckpointMetadata) -> str:
        """Write ``_metadata`` once: it completes the checkpoint, and is never replaced."""
        path = _join(self.checkpoint_path(metadata.checkpoint_id), METADATA_FILE_NAME)
        write_once_or_fail(
            self.fs, path, metadata.to_file_bytes(), f"checkpoint {metadata.checkpoint_id}"
        )
        return self.url(path)

    def load_metadata(self, checkpoint_id: int, verify: bool = True) -> CheckpointMetadata:
        return load_metadata_from_path(self.checkpoint_url(checkpoint_id), verify)

    def discard_checkpoint(self, checkpoint_id: int) -> None:
        d = self.checkpoint_path(checkpoint_id)
        meta = _join(d, METADATA_FILE_NAME)
        # Remove _metadata first: a crash mid-delete then leaves an incomplete (ignored)
        # directory, never a "complete" checkpoint with missing files.
        if self.fs.exists(meta):
            self.fs.rm(meta)
        if self.fs.exists(d):
            self.fs.rm(d, recursive=True)
        abort_open_uploads(self.fs, d)


# ---------------------------------------------------------------------------------------------
# The access ABC


class SharedStateTarget(Protocol):
    """Where a backend uploads its own files (RocksDB's SST files): the checkpoint
    storage's ``shared/`` folder, a savepoint's directory, or an epoch's state version."""

    @property
    def self_contained(self) -> bool:
        """Every file is uploaded and none remembered for a later upload (a savepoint)."""
        ...

    def write_shared_state(self, name: str, data: bytes) -> FileStateHandle | None:
        """The bytes as file ``name``; ``None``: no folder for such files (in-memory
        storage), the caller takes a self-contained snapshot instead."""
        ...

    def write_shared_file(self, name: str, local_path: str) -> FileStateHandle | None:
        """:meth:`write_shared_state` of a local file that never changes (linked when
        the target can)."""
        ...

    def write_state(self, checkpoint_id: int, name: str, data: bytes) -> StreamStateHandle:
        """A file of this snapshot alone (never shared)."""
        ...


class CheckpointStorageAccess(ABC):
    """Access to one job's checkpoint storage. Picklable; shipped to Spark workers.

    Worker-side contract: :meth:`write_state` and :meth:`write_epoch_state` are the only
    calls made in workers; both are safe to retry (a retried task overwrites atomically).
    Driver-side contract: a checkpoint is listed / loadable iff its ``_metadata`` was stored.
    """

    name: ClassVar[str] = ""
    #: checkpoints share files in ``shared/`` (a savepoint's directory is self-contained)
    self_contained: ClassVar[bool] = False

    def __init__(self, working_dir: str | None = None) -> None:
        self.job_id: str | None = None
        self.working_dir = working_dir

    # -- lifecycle ---------------------------------------------------------------------------

    def initialize_job(self, job_id: str) -> None:
        """Bind this access to ``job_id`` (driver, before shipping to workers)."""
        if not _JOB_ID_RE.match(job_id):
            raise ConfigurationError(
                f"job id {job_id!r} must contain only letters, digits, '_', '-' and '.'"
            )
        self.job_id = job_id

    def release_job(self) -> None:  # noqa: B027 - optional hook: most accesses hold nothing
        """The job ended (any way): release what ``initialize_job`` took (e.g. a lock)."""

    def __getstate__(self) -> dict[str, Any]:
        # Workers get the access without the driver's lock (only the driver releases it).
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def _require_job(self) -> str:
        if self.job_id is None:
            raise CheckpointStorageError(
                f"{type(self).__name__} is not initialized: call initialize_job(job_id) on the "
                f"driver before using it"
            )
        return self.job_id

    # -- worker side -------------------------------------------------------------------------

    @abstractmethod
    def write_state(self, checkpoint_id: int, name: str, data: bytes) -> StreamStateHandle:
        """Persist ``data`` as state file ``name`` of checkpoint ``checkpoint_id``."""

    def write_epoch_state(self, version_name: str, data: bytes) -> StreamStateHandle:
        """Persist a per-epoch state version (not a checkpoint) reachable from any worker.

        Written atomically to ``<epoch root>/<version_name>``; returns a verified handle.
        """
        _check_relative_name(version_name, "epoch state name")
        fs, root = self._epoch_fs()
        path = _join(root, version_name)
        atomic_write(fs, path, data)
        return FileStateHandle.of(fs.unstrip_protocol(path), data)

    def write_epoch_state_file(self, version_name: str, local_path: str) -> StreamStateHandle:
        """:meth:`write_epoch_state` of the bytes of the local file ``local_path``, which
        must never change afterwards (an SST file): on a local epoch-state directory it is
        hard-linked instead of copied (atomically: link to a temporary name, rename)."""
        _check_relative_name(version_name, "epoch state name")
        with open(local_path, "rb") as f:
            data = f.read()
        fs, root = self._epoch_fs()
        if not is_local(fs):
            return self.write_epoch_state(version_name, data)
        path = _join(root, version_name)
        if not link_file(fs, local_path, path):
            atomic_write(fs, path, data)
        return FileStateHandle.of(fs.unstrip_protocol(path), data)

    def discard_epoch_state(self, handles: Iterable[StreamStateHandle]) -> None:
        """Delete the epoch state files of ``handles``.

        Only files under this job's epoch root are deleted; other handles (inline bytes,
        checkpoint files) are ignored, so passing a mixed list is safe. Missing files are
        ignored (discarding is idempotent). The caller must not discard versions that a
        retained checkpoint still references.
        """
        fs, root = self._epoch_fs()
        prefix = fs.unstrip_protocol(root).rstrip("/") + "/"
        for h in handles:
            if isinstance(h, FileStateHandle) and h.path.startswith(prefix):
                p = _join(root, h.path[len(prefix) :])
                if fs.exists(p):
                    fs.rm(p)

    def discard_all_epoch_state(self) -> None:
        """Delete every per-epoch version of this job (the job ended). Checkpoints never
        refer to them; idempotent."""
        fs, root = self._epoch_fs()
        if fs.exists(root):
            fs.rm(root, recursive=True)
        abort_open_uploads(fs, root)

    def discard_epoch_attempts_before(self, attempt: int) -> int:
        """Delete every per-epoch version written by an attempt before ``attempt``
        (``.../a<k>-e<n>-...`` with ``k < attempt``); returns how many. After a restart the
        job restores from a checkpoint, so nothing of a failed attempt is read again; without
        this, every restart would leave its versions behind. Idempotent."""
        fs, root = self._epoch_fs()

        def older(path: str) -> bool:
            m = _ATTEMPT_RE.match(path.rstrip("/").rsplit("/", 1)[-1])
            return m is not None and int(m.group(1)) < attempt

        n = abort_open_uploads(fs, root, older)
        try:
            files = fs.find(root)
        except FileNotFoundError:
            return n
        for f in files:
            if older(f):
                try:
                    fs.rm(f)
                    n += 1
                except FileNotFoundError:
                    pass
        return n

    def discard_epoch_states_before(self, scope: str, version: int) -> int:
        """Delete ``<scope>/v<k>-*`` epoch states with ``k < version``; returns how many.

        Names not produced by :func:`epoch_state_name` are left alone.
        """
        _check_relative_name(scope, "epoch state scope")
        fs, root = self._epoch_fs()
        d = _join(root, scope)
        try:
            entries = fs.ls(d, detail=False)
        except FileNotFoundError:
            return 0
        n = 0
        for e in entries:
            m = _EPOCH_VERSION_RE.match(e.rstrip("/").rsplit("/", 1)[-1])
            if m and int(m.group(1)) < version:
                fs.rm(e, recursive=True)
                n += 1
        return n

    def write_shared_state(self, name: str, data: bytes) -> FileStateHandle | None:
        """Atomically write ``shared/<name>`` (files several checkpoints refer to).

        Returns ``None`` when this storage has no shared folder (in-memory storage):
        the caller then writes a self-contained snapshot instead.
        """
        return None

    def write_shared_file(self, name: str, local_path: str) -> FileStateHandle | None:
        """:meth:`write_shared_state` of the bytes of the local file ``local_path`` (which
        never changes afterwards: an SST file). Storages that can link it do so."""
        with open(local_path, "rb") as f:
            return self.write_shared_state(name, f.read())

    def link_shared_state(self, name: str, handle: FileStateHandle) -> FileStateHandle | None:
        """``handle``'s file as ``shared/<name>`` without copying its bytes, or ``None``
        when this storage cannot (the caller then writes the bytes)."""
        return None

    def shared_state_files(self) -> list[str]:
        """URLs of every file under ``shared/`` (empty when there is no shared folder)."""
        return []

    def cleanup_shared_state(
        self, referenced: set[str], up_to_checkpoint_id: int, checkpoint_id_of: Any
    ) -> list[str]:
        """Delete ``shared/`` files no retained checkpoint refers to; returns their URLs.

        ``referenced``: URLs named by the retained checkpoints. ``checkpoint_id_of(basename)``
        is the id of the checkpoint that uploaded a file (``None``: not a file this
        cleanup manages). Only files uploaded by checkpoints ``<= up_to_checkpoint_id``
        are deleted, so uploads of a younger, still running checkpoint survive; leftover
        ``*.inprogress`` temp files of killed uploads go the same way.
        """
        deleted: list[str] = []
        files = self.shared_state_files()
        if not files:
            return deleted
        for url in files:
            cid = checkpoint_id_of(url.rstrip("/").rsplit("/", 1)[-1])
            if cid is None or cid > up_to_checkpoint_id or url in referenced:
                continue
            try:
                fs, path = _url_to_fs(url)
                fs.rm(path)
                deleted.append(url)
            except FileNotFoundError:
                pass
        return deleted

    @abstractmethod
    def _epoch_fs(self) -> tuple[Any, str]:
        """(file system, root path) under which epoch states live."""

    def epoch_location(self) -> tuple[Any, str]:
        """(file system, root path) under which this job's epoch states live (checked to be
        shared by every machine of the job: checkpoint/sharing.py)."""
        return self._epoch_fs()

    # -- driver side -------------------------------------------------------------------------

    @abstractmethod
    def store_metadata(self, metadata: CheckpointMetadata) -> str:
        """Atomically store ``_metadata``; returns its location. Completes the checkpoint."""

    @abstractmethod
    def list_checkpoints(self) -> list[int]:
        """Ids of the completed checkpoints of this job (those with ``_metadata``), ascending."""

    @abstractmethod
    def load_metadata(self, checkpoint: int | str, verify: bool = True) -> CheckpointMetadata:
        """Load a checkpoint by id (this job) or by path (any directory / ``_metadata``).

        Raises :class:`CorruptCheckpointError` naming the location and the problem.
        """

    @abstractmethod
    def discard_checkpoint(self, checkpoint_id: int) -> None:
        """Delete checkpoint ``checkpoint_id`` (its ``_metadata`` first). Never ``shared/``."""

    def discard_incomplete_checkpoints(self, before: int, keep: Iterable[int] = ()) -> list[int]:
        """Delete what checkpoints that never completed left, for ids below ``before``
        except ``keep`` (still pending, or kept on purpose); returns their ids. A checkpoint
        is aborted by deleting its files, but a subtask of the failed epoch may still write
        one after that (Spark cancels its tasks asynchronously): the coordinator calls this
        once a later checkpoint completed. Storages without checkpoint directories hold no
        such files."""
        return []

    def max_checkpoint_id_in_use(self) -> int:
        """Highest checkpoint id with any trace in storage (complete or not); 0 if none."""
        return max(self.list_checkpoints(), default=0)

    def checkpoint_location(self, checkpoint_id: int) -> str | None:
        """URL of ``chk-<n>`` if checkpoints of this storage live in a file system."""
        return None

    def latest_valid_checkpoint(self) -> CheckpointMetadata | None:
        """Newest checkpoint whose metadata loads and whose files verify, else ``None``.

        Corrupt or half-written checkpoints are skipped with a warning.
        """
        for cid in reversed(self.list_checkpoints()):
            try:
                return self.load_metadata(cid, verify=True)
            except CorruptCheckpointError as e:
                log.warning("skipping checkpoint %d of job %s: %s", cid, self.job_id, e)
        return None

    def resolve_external_pointer(self, path: str) -> str:
        """See module-level :func:`resolve_external_pointer`."""
        return resolve_external_pointer(path)
