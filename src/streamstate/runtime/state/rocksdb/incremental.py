"""Incremental checkpoints and local recovery of the RocksDB backend.

**Snapshot** (:func:`snapshot_incremental`): a RocksDB checkpoint (memtables flushed,
live files hard-linked) goes to ``<local_dir>/streamstate-local/<local id>``. Its SST
files are immutable: each is uploaded to the checkpoint directory's ``shared/`` folder
the first time a checkpoint of this database needs it; later checkpoints name the
uploaded copy again. The small metadata files (``CURRENT``, ``MANIFEST-*``) are
packed into one private file in ``chk-<n>/``. The returned
:class:`IncrementalKeyedStateHandle` lists every file with size and CRC32.

The local checkpoint directory is kept (the newest two per subtask scope) as the
*local copy* for local recovery.

**Restore** (:func:`restore_incremental`): the files of a handle are materialised in
a new directory, from the local copy when this worker has it (hard links, nothing
downloaded: ``restore_source = "local"``) or else downloaded and verified
(``"remote"``). A handle covering exactly this backend's key groups becomes the
database itself; otherwise (rescaling) the database is opened aside and the key
ranges of this backend's key groups are copied over, column family by column family.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import struct
import uuid
import zlib
from typing import TYPE_CHECKING, Any

from rocksdict import Checkpoint, Rdict

from streamstate.errors import CorruptCheckpointError
from streamstate.runtime.checkpoint.handles import (
    FileStateHandle,
    StreamStateHandle,
    checksum,
    handle_from_dict,
)
from streamstate.runtime.checkpoint.incremental import (
    FORMAT,
    FORMAT_VERSION,
    IncrementalKeyedStateHandle,
    shared_file_name,
)
from streamstate.runtime.job_end import on_job_end
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.state.rocksdb.columns import NS_CF_SUFFIX
from streamstate.runtime.state.rocksdb.database import open_database

if TYPE_CHECKING:
    from streamstate.runtime.checkpoint.storage import CheckpointStorageAccess, SharedStateTarget
    from streamstate.runtime.state.rocksdb.backend import RocksDBKeyedStateBackend

__all__ = [
    "LOCAL_DIR_NAME",
    "EpochVersionTarget",
    "RESTORE_STATS",
    "pack_files",
    "restore_incremental",
    "snapshot_incremental",
    "unpack_files",
]

log = logging.getLogger("streamstate")

LOCAL_DIR_NAME = "streamstate-local"
#: local copies kept per subtask scope
LOCAL_COPIES_KEPT = 2
#: process-wide counts of the restore paths taken (the task reports per-restore values)
RESTORE_STATS = {"local": 0, "remote": 0}

_PACK_MAGIC = b"SSRP"
_PACK_VERSION = 1
_HDR = struct.Struct(">4sBI")
_ENTRY = struct.Struct(">HQ")


def pack_files(directory: str, names: list[str]) -> bytes:
    """The private file pack: ``SSRP`` v1, count, then (name, bytes) per file."""
    parts = [_HDR.pack(_PACK_MAGIC, _PACK_VERSION, len(names))]
    for name in sorted(names):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        name_bytes = name.encode()
        parts.append(_ENTRY.pack(len(name_bytes), len(data)))
        parts.append(name_bytes)
        parts.append(data)
    return b"".join(parts)


def unpack_files(data: bytes) -> dict[str, bytes]:
    """Inverse of :func:`pack_files` (``CorruptCheckpointError`` on damage)."""
    try:
        magic, version, n = _HDR.unpack_from(data, 0)
        if magic != _PACK_MAGIC or version != _PACK_VERSION:
            raise CorruptCheckpointError(
                f"RocksDB private file pack has magic {magic!r} version {version}, expected "
                f"{_PACK_MAGIC!r} version {_PACK_VERSION}"
            )
        pos = _HDR.size
        out: dict[str, bytes] = {}
        for _ in range(n):
            ln, size = _ENTRY.unpack_from(data, pos)
            pos += _ENTRY.size
            name = data[pos : pos + ln].decode()
            pos += ln
            if pos + size > len(data) or "/" in name or name in ("", ".", ".."):
                raise CorruptCheckpointError(f"RocksDB private file pack entry {name!r} is damaged")
            out[name] = data[pos : pos + size]
            pos += size
        return out
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptCheckpointError(f"RocksDB private file pack is damaged: {e}") from e


# ----------------------------------------------------------------------------- snapshot


#: the local-copy roots this process wrote into (what a job's end cleans)
_LOCAL_ROOTS: set[str] = set()


def _local_root(backend: RocksDBKeyedStateBackend) -> str:
    root = os.path.join(backend.local_dir, LOCAL_DIR_NAME)
    _LOCAL_ROOTS.add(root)
    return root


def remove_job_copies(job_id: str) -> None:
    """The job ended: its local copies (named ``<job id>-...``) serve no restart any more;
    remove them, and a local-copy root left empty."""
    for root in list(_LOCAL_ROOTS):
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            _LOCAL_ROOTS.discard(root)
            continue
        for name in names:
            if name.startswith(f"{job_id}-"):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        with contextlib.suppress(OSError):  # another job's copies are still there
            os.rmdir(root)
            _LOCAL_ROOTS.discard(root)


on_job_end("RocksDB local copies", remove_job_copies)


def snapshot_incremental(
    backend: RocksDBKeyedStateBackend,
    storage: SharedStateTarget,
    checkpoint_id: int,
    scope: str,
    *,
    epoch_version: bool = False,
) -> IncrementalKeyedStateHandle | None:
    """Checkpoint ``backend`` into ``storage`` uploading only new SST files.

    ``scope`` names the subtask (job, operator uid, subtask index) in file names.
    Returns ``None`` when the storage has no shared folder (the caller then takes a
    full snapshot).

    ``epoch_version``: ``storage`` is an :class:`EpochVersionTarget` and ``checkpoint_id``
    the epoch; the version's SST files are tracked apart from the checkpoints' uploads
    (``backend.epoch_uploaded``), since epoch files are deleted when superseded while a
    checkpoint's live on. The handle's meta then also records the checkpoint uploads, so
    a worker that adopts the version uploads no more to the next checkpoint than the
    worker that wrote it would have.
    """
    backend.run_snapshot_cleanups()
    backend.flush_buffers()  # the files must hold every write (buffered.py)
    kind = "e" if epoch_version else "c"
    local_id = f"{scope}-{backend.instance_id}-{kind}{checkpoint_id}"
    root = _local_root(backend)
    target = os.path.join(root, local_id)
    try:
        os.makedirs(root, exist_ok=True)
        if os.path.exists(target):  # a retried epoch: take the checkpoint again
            shutil.rmtree(target)
        Checkpoint(backend.opened_database()).create_checkpoint(target)
    except Exception as e:
        shutil.rmtree(target, ignore_errors=True)
        raise backend.io_error("write a local checkpoint", e, target) from e
    names = sorted(os.listdir(target))
    ssts = [n for n in names if n.endswith(".sst")]
    # OPTIONS-* are not needed to open a database (the backend passes its options) and
    # are ~7 KB: leaving them out keeps a small incremental checkpoint small
    private = [n for n in names if not n.endswith(".sst") and not n.startswith("OPTIONS-")]
    shared = []
    # a savepoint is self-contained: it uploads every file and remembers none
    self_contained = storage.self_contained
    if self_contained:
        uploaded: dict[str, Any] = {}
    else:
        uploaded = backend.epoch_uploaded if epoch_version else backend.uploaded_files
    for name in ssts:
        h = uploaded.get(name)
        if h is None:
            remote = shared_file_name(scope, backend.instance_id, checkpoint_id, name)
            # a target on the same file system hard-links the file instead of copying it
            h = storage.write_shared_file(remote, os.path.join(target, name))
            if h is None:
                shutil.rmtree(target, ignore_errors=True)
                return None
            uploaded[name] = h
            backend.bytes_uploaded += h.size
        shared.append((name, h))
    pack = pack_files(target, private)
    with open(os.path.join(target, "_private.pack"), "wb") as f:
        f.write(pack)
    private_handle = storage.write_state(checkpoint_id, f"{scope}-rocksdb-private", pack)
    backend.bytes_uploaded += len(pack)
    if self_contained:
        shutil.rmtree(target, ignore_errors=True)  # not a local recovery copy
        local_id = ""
    else:
        # files no longer live are not needed by the next checkpoint's upload set
        live = set(ssts)
        for name in [n for n in uploaded if n not in live]:
            del uploaded[name]
        _prune_local_copies(root, scope, kind, keep=local_id)
    backend.clear_changes()
    meta: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "states": [c.meta() for c in backend.columns()],
    }
    if epoch_version:
        meta["epoch_version"] = True
        meta["checkpoint_shared"] = {n: h.to_dict() for n, h in backend.uploaded_files.items()}
    return IncrementalKeyedStateHandle(
        backend.key_group_range, tuple(shared), private_handle, meta, local_id
    )


def _prune_local_copies(root: str, scope: str, kind: str, keep: str) -> None:
    """Keep the newest ``LOCAL_COPIES_KEPT`` local copies of ``scope`` and ``kind``
    (``c``: checkpoints, ``e``: epoch versions), by checkpoint id or epoch."""
    pattern = re.compile(rf"^{re.escape(scope)}-[0-9a-f]{{12}}-{kind}(\d+)$")
    mine = []
    for name in os.listdir(root):
        m = pattern.match(name)
        if m:
            mine.append((int(m.group(1)), name))
    mine.sort()
    for _, name in mine[:-LOCAL_COPIES_KEPT]:
        if name != keep:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


class EpochVersionTarget:
    """Where :func:`snapshot_incremental` writes an epoch's state version: files in the
    job's epoch-state directory, ``<folder>/<tag>-<name>`` (``tag`` = ``a<attempt>-e<epoch>``,
    so a restart's cleanup of failed attempts finds them)."""

    self_contained = False

    def __init__(self, storage: CheckpointStorageAccess, folder: str, tag: str) -> None:
        self.storage, self.folder, self.tag = storage, folder, tag

    def write_shared_file(self, name: str, local_path: str) -> Any:
        return self.storage.write_epoch_state_file(f"{self.folder}/{self.tag}-{name}", local_path)

    def write_shared_state(self, name: str, data: bytes) -> Any:
        return self.storage.write_epoch_state(f"{self.folder}/{self.tag}-{name}", data)

    def write_state(self, checkpoint_id: int, name: str, data: bytes) -> Any:
        return self.storage.write_epoch_state(f"{self.folder}/{self.tag}-{name}", data)


# ----------------------------------------------------------------------------- restore


def _file_sums(path: str) -> tuple[int, str]:
    """CRC32 and SHA-256 (hex) of the file ``path``, in one pass."""
    crc, sha = 0, hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
            sha.update(chunk)
    return crc & 0xFFFFFFFF, sha.hexdigest()


def _matches(size: int, crc: int, sha: str, handle: StreamStateHandle) -> bool:
    """Whether bytes of ``size``/``crc``/``sha`` are the file ``handle`` names: its SHA-256
    when the signed ``_metadata`` recorded one (a CRC32 can be forged, and SST files may
    hold pickled values), else its size and CRC32."""
    if size != handle.size or crc != handle.crc:
        return False
    return not isinstance(handle, FileStateHandle) or handle.sha256 in (None, sha)


def _local_copy_matches(directory: str, handle: IncrementalKeyedStateHandle) -> bool:
    """Whether the local copy holds exactly the checkpoint's files: the private pack and
    every SST file have the size, CRC32 and SHA-256 the checkpoint recorded. A damaged or
    swapped copy is never opened: the caller downloads the remote one."""
    try:
        with open(os.path.join(directory, "_private.pack"), "rb") as f:
            pack = f.read()
        sums = (len(pack), checksum(pack), hashlib.sha256(pack).hexdigest())
        if not _matches(*sums, handle.private):
            raise ValueError("the private files differ")
        for name, h in handle.shared:
            path = os.path.join(directory, name)
            if not _matches(os.path.getsize(path), *_file_sums(path), h):
                raise ValueError(f"{name} differs from the checkpoint's copy")
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as e:
        log.warning(
            "local RocksDB copy %s does not match its checkpoint (%s): using the remote copy",
            directory,
            e,
        )
        shutil.rmtree(directory, ignore_errors=True)
        return False
    return True


def materialize(
    backend: RocksDBKeyedStateBackend, handle: IncrementalKeyedStateHandle, target: str
) -> str:
    """Put the files of ``handle`` into the new directory ``target``; returns the source."""
    local = os.path.join(_local_root(backend), handle.local_id) if handle.local_id else ""
    os.makedirs(target)
    if local and _local_copy_matches(local, handle):
        with open(os.path.join(local, "_private.pack"), "rb") as f:
            files = unpack_files(f.read())
        for name, _ in handle.shared:
            src, dst = os.path.join(local, name), os.path.join(target, name)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)
        source = "local"
    else:
        files = unpack_files(handle.private.read())
        for name, h in handle.shared:
            data = h.read()  # verifies size and CRC32
            with open(os.path.join(target, name), "wb") as f:
                f.write(data)
            backend.bytes_downloaded += len(data)
        backend.bytes_downloaded += handle.private.size
        source = "remote"
    for name, data in files.items():
        with open(os.path.join(target, name), "wb") as f:
            f.write(data)
    RESTORE_STATS[source] += 1
    return source


def restore_incremental(
    backend: RocksDBKeyedStateBackend,
    handles: list[IncrementalKeyedStateHandle],
    wanted: KeyGroupRange | None = None,
) -> None:
    """Restore ``handles`` into a fresh ``backend`` (see the module docstring), only the
    key groups of ``wanted`` (a part of the backend's range) when given."""
    wanted = backend.key_group_range if wanted is None else wanted
    for h in handles:
        if h.meta.get("format") != FORMAT or h.meta.get("format_version") != FORMAT_VERSION:
            raise CorruptCheckpointError(
                f"incremental RocksDB handle has format {h.meta.get('format')!r} version "
                f"{h.meta.get('format_version')!r}; expected {FORMAT!r} version {FORMAT_VERSION}"
            )
    mine = [h for h in handles if h.intersects(wanted)]
    sources = []
    if (
        len(mine) == 1
        and mine[0].key_group_range == backend.key_group_range == wanted
        and not backend.columns()
    ):
        h = mine[0]
        path = os.path.join(backend.local_dir, f"{os.path.basename(backend.path)}-r")
        try:
            sources.append(materialize(backend, h, path))
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        adopt(backend, path, h)
    else:
        for h in mine:
            aside = os.path.join(backend.local_dir, f"restore-{uuid.uuid4().hex}")
            try:
                sources.append(materialize(backend, h, aside))
                _copy_key_groups(backend, h, aside, wanted)
            finally:
                shutil.rmtree(aside, ignore_errors=True)
    if sources:
        backend.restore_source = "remote" if "remote" in sources else "local"


def _copy_key_groups(
    backend: RocksDBKeyedStateBackend,
    handle: IncrementalKeyedStateHandle,
    path: str,
    wanted: KeyGroupRange,
) -> None:
    """Copy the ``wanted`` key groups of every state of the database at ``path``."""
    inter = handle.key_group_range.intersection(wanted)
    lo = struct.pack(">H", inter.start)
    hi = struct.pack(">H", inter.end + 1) if inter.end < 0xFFFF else None
    states = handle.meta.get("states", [])
    resolved = backend.resolve_states(states)
    names = [sm["name"] for sm in states]
    present = set(Rdict.list_cf(path))
    # (column family in the checkpoint, its column, whether it holds the non-void namespaces)
    cfs = [(n, col, False) for n, (col, _) in zip(names, resolved, strict=True)]
    cfs += [(n + NS_CF_SUFFIX, col, True) for n, col, _ in cfs if n + NS_CF_SUFFIX in present]
    opts = backend.options
    db = Rdict(path, opts, column_families={n: opts for n, _, _ in cfs})
    try:
        for name, col, namespaced in cfs:
            src = db.get_column_family(name)
            dst = col.namespaced_cf() if namespaced else col.cf
            batch = []
            it = src.iter()
            it.seek(lo)
            while it.valid():
                k = it.key()
                if hi is not None and k >= hi:
                    break
                batch.append((k, it.value()))
                if len(batch) >= 10_000:
                    col.apply(batch, dst)
                    batch = []
                it.next()
            del it
            col.apply(batch, dst)
            del src, dst
    finally:
        with contextlib.suppress(Exception):
            db.close()


def adopt(
    backend: RocksDBKeyedStateBackend, path: str, handle: IncrementalKeyedStateHandle
) -> None:
    """Make the checkpoint materialised at ``path`` this backend's database."""
    states = handle.meta.get("states", [])
    names = [sm["name"] for sm in states]
    present = set(Rdict.list_cf(path))
    names += [n + NS_CF_SUFFIX for n in names if n + NS_CF_SUFFIX in present]
    if backend.db is not None:
        backend.db.close()
    shutil.rmtree(backend.path, ignore_errors=True)
    os.rename(path, backend.path)
    backend.db = open_database(backend, backend.path, {n: backend.options for n in names})
    backend.cf_names = set(names)
    backend.resolve_states(states)
    if handle.meta.get("epoch_version"):
        backend.epoch_uploaded = dict(handle.shared)
        backend.uploaded_files = {
            n: handle_from_dict(d) for n, d in handle.meta.get("checkpoint_shared", {}).items()
        }
    else:
        backend.uploaded_files = dict(handle.shared)
        backend.epoch_uploaded = {}
