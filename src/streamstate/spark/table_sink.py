"""Driver half of ``SparkTableSink``: each checkpoint's epochs become one committed batch.

Workers stage their records (``StagedRowsSinkOperator``) under
``<path>/_streamstate/staging/``. When a checkpoint covering epochs ``..n`` completes,
:class:`SparkTableCommitter` writes the staged rows of those epochs as one batch with
id ``<committer uid>-<n>``, in steps that may each be repeated after a crash:

1. ``<path>/_streamstate/batches/<id>`` exists: the batch is committed, nothing to do;
2. unless ``<path>/_streamstate/out/<id>/_SUCCESS`` exists, Spark writes the batch
   there (``mode("overwrite")``, the table's format and options);
3. every data file of that directory is renamed into ``<path>`` as
   ``batch-<id>-<name>`` (a file already moved is skipped);
4. the marker ``batches/<id>`` is written (atomic), then the staged files and the
   batch's out directory are removed.

The pending batch of a checkpoint (id and staged files) is the committer's
``snapshot``, stored in ``_metadata``; after a restore it is committed again through
the same steps, so a crash anywhere (also between ``_metadata`` and the commit)
neither loses nor duplicates a batch. Spark readers skip ``_``-prefixed paths, so
only committed data is visible (file by file: a reader listing the table during
step 3 may see part of a batch).
"""

from __future__ import annotations

import enum
import uuid
from typing import Any

from streamstate.connectors.base import SinkCommitter
from streamstate.errors import ConfigurationError
from streamstate.spark.dataframes import active_spark, staged_files_dataframe

__all__ = ["SaveMode", "SparkTableCommitter"]

META = "_streamstate"


class SaveMode(enum.Enum):
    """What a job does with data already in the table (Spark's save modes)."""

    APPEND = "append"
    OVERWRITE = "overwrite"
    ERROR = "error"

    @staticmethod
    def parse(mode: Any) -> SaveMode:
        raw = mode.value if isinstance(mode, SaveMode) else str(mode).lower()
        raw = {"errorifexists": "error"}.get(raw, raw)
        try:
            return SaveMode(raw)
        except ValueError:
            raise ConfigurationError(
                f"SparkTableSink mode must be 'append', 'overwrite' or 'error', got {mode!r}"
            ) from None


def _fs(path: str) -> tuple[Any, str]:
    import fsspec

    fs, p = fsspec.core.url_to_fs(path)
    return fs, p


def _visible(fs: Any, path: str) -> list[str]:
    """The table's data files and directories (what Spark readers see)."""
    if not fs.exists(path):
        return []
    return [
        p
        for p in fs.ls(path, detail=False)
        if not p.rstrip("/").rsplit("/", 1)[-1].startswith(("_", "."))
    ]


class SparkTableCommitter(SinkCommitter):
    """Commits staged epochs as one Spark batch write per checkpoint (see module doc)."""

    driver_spark_jobs = "SparkTableSink writes every committed batch with a Spark job"

    def __init__(
        self,
        path: str,
        fmt: str,
        mode: SaveMode,
        options: dict[str, str],
        type_info: Any,
        exactly_once: bool,
        token: str = "",
    ) -> None:
        self.path = path.rstrip("/")
        self.fmt = fmt
        self.mode = mode
        self.options = dict(options)
        self.type_info = type_info
        self.exactly_once = exactly_once
        self.token = token
        #: the first run of this job's restore chain (the token of its fresh start)
        self.lineage = token
        self.uid = uuid.uuid4().hex[:12]
        self.pending: dict[int, list[str]] = {}
        self.committed_up_to = 0
        self.started = False
        self.batches_written = 0

    @staticmethod
    def staging_dir(path: str) -> str:
        return f"{path.rstrip('/')}/{META}/staging"

    # -- the SinkCommitter protocol ------------------------------------------------------
    def prepare(self, epoch: int, results: list[Any]) -> None:
        files = [r for r in results if r]
        self.pending.setdefault(epoch, []).extend(files)
        if not self.exactly_once:
            self.commit(epoch)

    def commit(self, up_to_epoch: int) -> None:
        epochs = sorted(e for e in self.pending if e <= up_to_epoch)
        files = [f for e in epochs for f in self.pending.pop(e)]
        if up_to_epoch <= self.committed_up_to:
            _remove(files)  # replayed after a fallback to an older checkpoint: written already
            return
        self.committed_up_to = up_to_epoch
        self._write_batch(f"{self.uid}-{up_to_epoch}", files)

    def abort(self, after_epoch: int) -> None:
        for e in [e for e in self.pending if e > after_epoch]:
            _remove(self.pending.pop(e))
        if after_epoch == 0 and not self.started:
            self._start()
            self._register()
        self._remove_orphans()

    def snapshot(self, up_to_epoch: int) -> Any:
        files = [f for e, fs in sorted(self.pending.items()) if e <= up_to_epoch for f in fs]
        return {"batch": f"{self.uid}-{up_to_epoch}", "files": files, "lineage": self.lineage}

    def restore(self, state: Any) -> None:
        self.started = True  # a restored job keeps what the table holds
        if state:
            self.lineage = state.get("lineage") or self.token
            self._write_batch(state["batch"], state["files"])
        self._register()
        self._remove_dead_runs()

    def finish(self) -> None:
        self._remove_orphans()
        if self.token:  # nothing of this run is left to clean
            fs, p = _fs(f"{self._runs_dir()}/{self.token}")
            if fs.exists(p):
                fs.rm(p)

    def _runs_dir(self) -> str:
        return f"{self.path}/{META}/runs"

    def _register(self) -> None:
        """Record this run's token under its lineage (so a later restore of the same
        lineage finds the staged files this run may leave when it dies)."""
        if not self.token:
            return
        from streamstate.runtime.checkpoint.storage import atomic_write

        fs, p = _fs(f"{self._runs_dir()}/{self.token}")
        atomic_write(fs, p, self.lineage.encode())

    def _remove_dead_runs(self) -> None:
        """After a restore: delete the staged files of earlier runs of this lineage (runs
        that died after the restored checkpoint; their epochs are replayed)."""
        fs, p = _fs(self._runs_dir())
        if not fs.exists(p):
            return
        dead = set()
        for f in fs.ls(p, detail=False):
            token = f.rsplit("/", 1)[-1]
            if token != self.token and fs.cat_file(f).decode() == self.lineage:
                dead.add(token)
        staging_fs, sp = _fs(self.staging_dir(self.path))
        if staging_fs.exists(sp):
            for f in staging_fs.ls(sp, detail=False):
                if f.rsplit("/", 1)[-1].split("-", 1)[0] in dead:
                    staging_fs.rm(f)
        for token in dead:
            fs.rm(f"{p}/{token}")

    def _remove_orphans(self) -> None:
        """Delete the staged files of this sink's failed epochs (whose acks never came)."""
        if not self.token:
            return
        fs, p = _fs(self.staging_dir(self.path))
        if not fs.exists(p):
            return
        keep = {_fs(f)[1] for fs_ in self.pending.values() for f in fs_}
        for f in fs.ls(p, detail=False):
            name = f.rsplit("/", 1)[-1]
            if name.startswith(f"{self.token}-") and f not in keep:
                fs.rm(f)

    # -- batches ---------------------------------------------------------------------------
    def _start(self) -> None:
        """A fresh start: apply the save mode to what the table holds."""
        self.started = True
        fs, p = _fs(self.path)
        existing = _visible(fs, p)
        if self.mode is SaveMode.ERROR and existing:
            raise ConfigurationError(
                f"SparkTableSink: {self.path} already holds data ({len(existing)} entries) and "
                f"mode is 'error'; use mode='append' or 'overwrite', or another path"
            )
        if self.mode is SaveMode.OVERWRITE:
            for e in existing:
                fs.rm(e, recursive=True)

    def _write_batch(self, batch: str, files: list[str]) -> None:
        fs, p = _fs(self.path)
        marker = f"{p}/{META}/batches/{batch}"
        if fs.exists(marker):
            _remove(files)
            return
        out = f"{p}/{META}/out/{batch}"
        if files and not fs.exists(f"{out}/_SUCCESS"):
            self._spark_write(files, self._url(out))
        if fs.exists(out):
            for src in _visible(fs, out):
                name = src.rstrip("/").rsplit("/", 1)[-1]
                self._publish(fs, src, f"{p}/batch-{batch}-{name}")
        from streamstate.runtime.checkpoint.storage import atomic_write

        atomic_write(fs, marker, b"committed\n")
        self.batches_written += 1
        _remove(files)
        if fs.exists(out):
            fs.rm(out, recursive=True)

    @staticmethod
    def _publish(fs: Any, src: str, dest: str) -> None:
        """Step 3 for one data file: rename it into the table (visible from now on)."""
        fs.mv(src, dest)

    def _url(self, local: str) -> str:
        """``local`` (a path of the table's file system) as the URL Spark writes to."""
        scheme = self.path.split("://", 1)[0] if "://" in self.path else None
        return local if scheme is None or scheme == "file" else f"{scheme}://{local}"

    def _spark_write(self, files: list[str], out: str) -> None:
        df = staged_files_dataframe(active_spark(), files, self.type_info)
        writer = df.write.format(self.fmt).mode("overwrite")
        for k, v in self.options.items():
            writer = writer.option(k, v)
        writer.save(out)


def _remove(files: list[str]) -> None:
    for f in files:
        fs, p = _fs(f)
        if fs.exists(p):
            fs.rm(p)
