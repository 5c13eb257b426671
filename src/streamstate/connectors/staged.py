"""Staged row files: how rows cross between Spark and streamstate's workers.

A Spark DataFrame cannot be read inside a streamstate subtask (workers have no
SparkSession), so ``from_dataframe`` and ``from_spark_stream`` first *stage* the
rows: one Spark task per DataFrame partition writes that partition's rows, already
turned into :class:`~streamstate.common.Row` objects, into one file. A
:class:`StagedRowsSource` then reads those files as its splits, one split per
partition, the position of a split being the index of its next row. Reading is a
pure function of (file, position, budget), so a replay from a checkpointed
position reads the same rows.

File format (version 2): the magic ``b"SSROWS2\\n"``, a pickled header ``{"fields":
[names] | None}``, then pickled chunks (lists of at most :data:`CHUNK_ROWS` records).
With field names, the records are tuples of values and a reader turns them into
:class:`Row` objects with those names (one shared name list: unpickling a ``Row`` per
record costs about 8x more); without, the records are stored as they are. Files are
written to a hidden temporary sibling and renamed (atomic).
"""

from __future__ import annotations

import pickle
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from streamstate.common.row import Row, RowKind
from streamstate.connectors.base import SinkCommitter, Source
from streamstate.errors import ConfigurationError, StreamStateError
from streamstate.runtime.operators.base import StreamOperator

__all__ = [
    "MAGIC",
    "StagedFilesCommitter",
    "StagedRowsSinkOperator",
    "StagedRowsSource",
    "StagedSplit",
    "advance_staged_splits",
    "read_staged_rows",
    "read_staged_splits",
    "write_staged_rows",
]

MAGIC = b"SSROWS2\n"
CHUNK_ROWS = 4096

#: a split: [path, number of rows]
StagedSplit = list[Any]


def write_staged_rows(
    path: str,
    rows: Iterable[Any],
    convert: Callable[[Any], Any] | None = None,
    fields: list[str] | None = None,
) -> int:
    """Write ``rows`` (each through ``convert``) to the staged file ``path``; the count.
    With ``fields``, every converted row is a tuple of values with those names."""
    import fsspec

    from streamstate.runtime.checkpoint.storage import atomic_write

    parts = [MAGIC, pickle.dumps({"fields": fields}, protocol=5)]
    chunk: list[Any] = []
    count = 0
    for r in rows:
        chunk.append(convert(r) if convert is not None else r)
        count += 1
        if len(chunk) >= CHUNK_ROWS:
            parts.append(pickle.dumps(chunk, protocol=5))
            chunk = []
    if chunk:
        parts.append(pickle.dumps(chunk, protocol=5))
    fs, p = fsspec.core.url_to_fs(path)
    atomic_write(fs, p, b"".join(parts))
    return count


#: rows of recently read staged files, per worker process (path -> rows)
_CACHE: OrderedDict[str, list[Any]] = OrderedDict()
_CACHE_FILES = 4


def read_staged_rows(path: str) -> list[Any]:
    """Every row of the staged file ``path`` (cached per process: files never change)."""
    rows = _CACHE.get(path)
    if rows is not None:
        _CACHE.move_to_end(path)
        return rows
    import io

    import fsspec

    try:
        with fsspec.open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError as e:
        raise StreamStateError(
            f"staged rows {path!r} are gone: the staging directory of from_dataframe / "
            f"from_spark_stream must stay until the job ends (and, on a cluster, be on a file "
            f"system every worker reads, e.g. staging_path='hdfs://...')"
        ) from e
    if not data.startswith(MAGIC):
        raise StreamStateError(f"{path!r} is not a staged rows file (format version 2)")
    buf = io.BytesIO(data)
    buf.seek(len(MAGIC))
    fields = pickle.load(buf)["fields"]
    rows = []
    while buf.tell() < len(data):
        chunk = pickle.load(buf)
        rows.extend(chunk if fields is None else _named_rows(fields, chunk))
    _CACHE[path] = rows
    while len(_CACHE) > _CACHE_FILES:
        _CACHE.popitem(last=False)
    return rows


def read_staged_splits(assignment: Any, budget: int) -> tuple[list[Any], list[list[int]]]:
    """At most ``budget`` rows of the staged splits ``[index, path, position, count]``, in
    order, and the ``[index, new position]`` of every split read from (a Source's read)."""
    out: list[Any] = []
    progress = []
    for i, path, pos, count in assignment:
        if budget <= 0:
            break
        end = min(count, pos + budget)
        out.extend(read_staged_rows(path)[pos:end])
        budget -= end - pos
        progress.append([i, end])
    return out, progress


def advance_staged_splits(assignment: Any, progress: list[list[int]]) -> list[Any]:
    """The staged splits of ``assignment`` at the positions ``progress`` reached (a Source's
    advance; splits read to the end stay, so the next read reports them again)."""
    ends = {i: end for i, end in progress}
    return [[i, path, ends.get(i, pos), count] for i, path, pos, count in assignment]


def _named_rows(fields: list[str], values: list[tuple[Any, ...]]) -> list[Row]:
    """``Row(**dict(zip(fields, v)))`` for each ``v``, sharing one name list (fast path)."""
    new, insert, out = Row.__new__, RowKind.INSERT, []
    for v in values:
        r = new(Row)
        r._fields, r._values, r._row_kind = fields, list(v), insert
        out.append(r)
    return out


class StagedRowsSource(Source):
    """A bounded source over staged files, one split per file (a DataFrame partition).

    Enumerator state: ``{"positions": [next row of split 0, ...]}``. Split ``i`` is read
    by reader subtask ``i % parallelism``, each reader reading its splits in order. The
    splits (paths and row counts) are part of the source, not of the state: a job
    restored from a retained checkpoint stages the DataFrame again and continues at the
    checkpointed positions, which is exact when the DataFrame is deterministic.
    """

    bounded = True
    sliced_reads = True

    def __init__(self, splits: list[StagedSplit], default_parallelism: int | None = None) -> None:
        self.splits = [[str(p), int(n)] for p, n in splits]
        self.default_parallelism = default_parallelism

    def create_enumerator_state(self, parallelism: int) -> Any:
        return {"positions": [0] * len(self.splits)}

    def restore_enumerator_state(self, state: Any, parallelism: int) -> Any:
        positions = list(state["positions"])
        if len(positions) != len(self.splits):
            raise ConfigurationError(
                f"the checkpoint holds positions of {len(positions)} DataFrame partitions but "
                f"the DataFrame now has {len(self.splits)}: restore with the same DataFrame "
                f"(same partitioning, e.g. df.repartition({len(positions)}))"
            )
        return {"positions": positions}

    def plan_epoch(self, state: Any, parallelism: int) -> list[Any]:
        plans: list[list[Any]] = [[] for _ in range(parallelism)]
        for i, ((path, count), pos) in enumerate(zip(self.splits, state["positions"], strict=True)):
            if pos < count:
                plans[i % parallelism].append([i, path, pos, count])
        return plans

    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        return read_staged_splits(assignment, budget)

    def advance(self, assignment: Any, progress: Any) -> Any:
        return advance_staged_splits(assignment, progress)

    def apply_progress(self, state: Any, progress: list[Any]) -> Any:
        positions = list(state["positions"])
        for reader in progress:
            for i, end in reader or []:
                positions[i] = end
        return {"positions": positions}

    def is_finished(self, state: Any) -> bool:
        return all(
            pos >= count for (_, count), pos in zip(self.splits, state["positions"], strict=True)
        )


class StagedRowsSinkOperator(StreamOperator):
    """Worker half of a sink that Spark writes on the driver (``SparkTableSink``): each
    subtask stages its epoch's records in one file under ``staging_dir`` and reports the
    file's path (named ``<token>-<subtask>-<uuid>.rows``, the token being the sink's, so its
    committer finds what failed epochs left); the driver-side committer turns the staged files of the epochs a
    checkpoint covers into one Spark write."""

    def __init__(self, staging_dir: str, token: str) -> None:
        super().__init__()
        self.staging_dir = staging_dir.rstrip("/")
        self.token = token
        self.buffer: list[Any] = []

    def process_batch(self, batch: list[Any]) -> list[Any]:
        self.buffer.extend(batch)
        return []

    def sink_result(self) -> Any:
        if not self.buffer:
            return None
        import uuid

        assert self.ctx is not None
        rows, self.buffer = self.buffer, []
        path = f"{self.staging_dir}/{self.token}-{self.ctx.subtask_index}-{uuid.uuid4().hex}.rows"
        write_staged_rows(path, rows)
        return path


class StagedFilesCommitter(SinkCommitter):
    """Keeps the staged files of committed epochs (``to_dataframe`` reads them); an epoch
    is kept at most once, files of rolled-back or re-committed epochs are deleted."""

    def __init__(self) -> None:
        self.pending: dict[int, list[str]] = {}
        self.committed: list[str] = []
        self.committed_up_to = 0

    def prepare(self, epoch: int, results: list[Any]) -> None:
        self.pending.setdefault(epoch, []).extend(r for r in results if r)

    def commit(self, up_to_epoch: int) -> None:
        for e in sorted(e for e in self.pending if e <= up_to_epoch):
            files = self.pending.pop(e)
            if e > self.committed_up_to:
                self.committed.extend(files)
            else:
                _remove_files(files)
        self.committed_up_to = max(self.committed_up_to, up_to_epoch)

    def abort(self, after_epoch: int) -> None:
        for e in [e for e in self.pending if e > after_epoch]:
            _remove_files(self.pending.pop(e))


def _remove_files(files: list[str]) -> None:
    import fsspec

    for f in files:
        fs, p = fsspec.core.url_to_fs(f)
        if fs.exists(p):
            fs.rm(p)
