"""``env.from_spark_stream(streaming_df)``: a Structured Streaming query feeds a job.

Spark keeps a streaming source's offsets in the query's checkpoint location (its
``offsets/``, ``commits/`` and source logs). This source runs the query one trigger at
a time on the driver (``trigger(availableNow=True)``, ``foreachBatch``), each trigger
starting from a *copy* of the checkpoint location the previous trigger ended with:

* ``discover`` (driver, before an epoch), when every staged row was read: copy the
  current Spark checkpoint version into a new version directory, run one trigger on
  it; ``foreachBatch`` stages each micro-batch's partitions as staged rows files
  (``connectors/staged.py``), one split per partition, and writes the batch's splits as
  a manifest next to them (``<batch id>.splits``, atomically); the driver reads the
  manifests once the trigger ended. A file, not a closure: on Spark Connect the
  ``foreachBatch`` function runs in a Python process of the server, not in the driver;
* the enumerator state, stored in streamstate's checkpoints, names the Spark
  checkpoint version, the staged splits and their read positions, and the Spark
  offsets (``endOffset`` of each source, for people reading ``_metadata``);
* a restore continues reading the checkpointed splits at their positions, then runs
  the next trigger from the checkpointed version: Spark plans the next micro-batch
  from exactly the offsets the checkpoint recorded. Output of triggers after the
  checkpoint was rolled back with the epochs that read it, so nothing is lost or
  duplicated (end to end exactly-once needs an exactly-once sink too).

Versions (and their staged rows) beyond the last ``retained_versions`` are deleted.
"""

from __future__ import annotations

import json
import uuid
from functools import partial
from typing import Any

from streamstate.connectors.base import Source
from streamstate.connectors.staged import advance_staged_splits, read_staged_splits
from streamstate.errors import ConfigurationError

__all__ = ["SparkStreamSource"]

_MANIFEST = ".splits"


def _stage_batch(staged_dir: str, batch_df: Any, batch_id: int) -> None:
    """``foreachBatch``: stage the micro-batch, then write its manifest of splits."""
    from streamstate.runtime.checkpoint.storage import atomic_write
    from streamstate.spark.dataframes import stage_dataframe

    staged = stage_dataframe(batch_df, f"{staged_dir}/{batch_id}")
    fs, p = _fs(staged_dir)
    manifest = [[path, n] for path, n in staged if n > 0]
    atomic_write(fs, f"{p}/{batch_id}{_MANIFEST}", json.dumps(manifest).encode())


def _staged_splits(staged_dir: str) -> list[list[Any]]:
    """The splits of a trigger's micro-batches, in batch order, each ``[path, rows, 0]``."""
    fs, p = _fs(staged_dir)
    if not fs.exists(p):
        return []
    manifests = [f for f in fs.ls(p, detail=False) if f.endswith(_MANIFEST)]
    splits: list[list[Any]] = []
    for f in sorted(manifests, key=lambda f: int(f.rsplit("/", 1)[-1][: -len(_MANIFEST)])):
        with fs.open(f, "rb") as handle:
            splits.extend([path, n, 0] for path, n in json.loads(handle.read()))
    return splits


def _fs(path: str) -> tuple[Any, str]:
    import fsspec

    fs, p = fsspec.core.url_to_fs(path)
    return fs, p


class SparkStreamSource(Source):
    """Reads a streaming DataFrame trigger by trigger (see module doc)."""

    sliced_reads = True
    driver_spark_jobs = "from_spark_stream() runs a Spark job for every trigger"

    def __init__(
        self,
        df: Any,
        checkpoint_location: str,
        bounded: bool = False,
        retained_versions: int = 10,
        query_name: str | None = None,
    ) -> None:
        if not getattr(df, "isStreaming", False):
            raise ConfigurationError(
                "from_spark_stream() takes a streaming DataFrame (spark.readStream...); "
                "use from_dataframe() for a batch DataFrame"
            )
        if retained_versions < 1:
            raise ConfigurationError(f"retained_versions must be >= 1, got {retained_versions}")
        self.df = df
        self.root = checkpoint_location.rstrip("/")
        self.bounded = bounded
        self.retained_versions = retained_versions
        self.query_name = query_name

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "df"}  # driver only

    # -- driver -----------------------------------------------------------------------------
    def create_enumerator_state(self, parallelism: int) -> Any:
        return {"version": None, "versions": [], "splits": [], "offsets": None, "drained": False}

    def restore_enumerator_state(self, state: Any, parallelism: int) -> Any:
        version = state.get("version")
        if version is not None:
            fs, p = _fs(version)
            if not fs.exists(p):
                raise ConfigurationError(
                    f"the checkpoint resumes the Spark stream from {version!r}, which is gone: "
                    f"pass the same checkpoint_location to from_spark_stream() and raise "
                    f"retained_versions (kept: {self.retained_versions}) to restore older "
                    f"checkpoints"
                )
        return {**state, "drained": False}

    def discover(self, state: Any, now_ms: int) -> Any:
        if any(pos < n for _, n, pos in state["splits"]):
            return state  # rows of the last trigger still to read: no new micro-batch yet
        if state.get("drained") and self.bounded:
            return state
        return self._trigger(state)

    def _trigger(self, state: Any) -> Any:
        vid = f"v-{uuid.uuid4().hex[:12]}"
        version = f"{self.root}/{vid}"
        fs, vp = _fs(version)
        if state["version"] is not None:
            _, old = _fs(state["version"])
            fs.copy(old, vp, recursive=True)
        else:
            fs.makedirs(vp, exist_ok=True)
        staged_dir = f"{self.root}/staged/{vid}"
        writer = (
            self.df.writeStream.foreachBatch(partial(_stage_batch, staged_dir))
            .option("checkpointLocation", f"{version}/spark")
            .trigger(availableNow=True)
        )
        if self.query_name:
            writer = writer.queryName(self.query_name)
        query = writer.start()
        query.awaitTermination()
        splits = _staged_splits(staged_dir)
        offsets = state["offsets"]
        progress = query.lastProgress
        if progress:
            offsets = [s.get("endOffset") for s in progress.get("sources", [])]
        versions = [*state["versions"], version]
        for gone in versions[: -self.retained_versions]:
            self._delete_version(gone)
        return {
            "version": version,
            "versions": versions[-self.retained_versions :],
            "splits": splits,
            "offsets": offsets,
            "drained": not splits,
        }

    def _delete_version(self, version: str) -> None:
        fs, p = _fs(version)
        vid = version.rsplit("/", 1)[-1]
        for d in (p, _fs(f"{self.root}/staged/{vid}")[1]):
            if fs.exists(d):
                fs.rm(d, recursive=True)

    def plan_epoch(self, state: Any, parallelism: int) -> list[Any]:
        plans: list[list[Any]] = [[] for _ in range(parallelism)]
        for i, (path, count, pos) in enumerate(state["splits"]):
            if pos < count:
                plans[i % parallelism].append([i, path, pos, count])
        return plans

    def apply_progress(self, state: Any, progress: list[Any]) -> Any:
        splits = [list(s) for s in state["splits"]]
        for reader in progress:
            for i, end in reader or []:
                splits[i][2] = end
        return {**state, "splits": splits}

    def is_finished(self, state: Any) -> bool:
        return bool(
            self.bounded and state.get("drained") and all(pos >= n for _, n, pos in state["splits"])
        )

    # -- worker -----------------------------------------------------------------------------
    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        return read_staged_splits(assignment, budget)

    def advance(self, assignment: Any, progress: Any) -> Any:
        return advance_staged_splits(assignment, progress)
