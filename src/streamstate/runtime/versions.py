"""State versions: how a subtask's state follows it from epoch to epoch and worker to worker.

At the end of every epoch each stateful subtask **commits** version ``n`` of its state
(worker side, :func:`commit_keyed_state` and :func:`commit_operator_state`); the driver
**folds** every committed version into the subtask's lineage (:class:`StateVersions`), and
sends the lineage with the next epoch so that any worker can rebuild version ``n`` from it.

Keyed state, per operator and subtask:

* barrier epoch, heap with ``state.changelog.enabled``: an incremental checkpoint (the last
  materialized base plus the deltas since, ``checkpoint/changelog.py``), also the base;
* barrier epoch: the checkpoint snapshot (``storage.write_state(chk, "<uid>-<i>-keyed")``,
  or RocksDB's incremental handle) is also the new lineage base (FULL). With in-memory
  checkpoint storage the checkpoint bytes live on the driver, so a worker-readable copy is
  written to the epoch-state directory as the base;
* full-version epoch: ``snapshot()`` written to ``epochs/<uid>/<i>/a<a>-e<n>-full`` (FULL);
  for a backend a feature follows between versions (``bridged``: queryable state's serving
  copies, ``runtime/features.py``), here and in a barrier epoch, also the epoch's delta
  (``...-delta``, :attr:`StateVersion.bridge`): the lineage keeps it with the previous
  base and deltas (``Lineage.bridge``, their files kept until the next new base), so a
  copy of the state anywhere in the previous interval applies the rest of those deltas
  and the bridge and is then at the new base, instead of rebuilding;
* a backend with its own versioned files (RocksDB, ``snapshot_epoch_version``): every
  other epoch is a FULL version made of RocksDB's files in ``epochs/<uid>/<i>/``, written
  like an incremental checkpoint: only the SST files new since the previous version (hard
  links on a local directory) and a small private pack; consecutive versions share their
  unchanged SST files, so folding one supersedes only the files the new one dropped;
* otherwise ``snapshot_delta()`` written to ``epochs/<uid>/<i>/a<a>-e<n>-delta`` (DELTA), or
  NONE when no key changed.

Operator state is small (Flink's advice: buffers, offsets, rules), so every version is
FULL: unchanged bytes (same CRC as the version the instance started from or last wrote)
give NONE; a version of at most :data:`INLINE_LIMIT` bytes travels inline in the ack and
back in the next ``EpochSpec``; a larger one goes to ``epochs/<uid>/<i>/a<a>-e<n>-operator``;
in a barrier epoch the checkpoint handle is the version.

Writes are idempotent: a re-executed task writes the same version under the same name
(atomically), so a Spark task retry is harmless.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from streamstate.runtime.checkpoint.changelog import changelog_checkpoint
from streamstate.runtime.checkpoint.handles import (
    ByteStreamStateHandle,
    FileStateHandle,
    KeyGroupsStateHandle,
    StreamStateHandle,
    checksum,
)
from streamstate.runtime.keygroups import compute_key_group_range_for_operator_index
from streamstate.runtime.protocol import (
    UNCHANGED,
    EpochSpec,
    Lineage,
    OperatorStateLineage,
    StateVersion,
    SubtaskAck,
    Token,
    VersionKind,
)
from streamstate.runtime.state.operator import (
    DefaultOperatorStateStore,
    decode_operator_snapshot,
    redistribute,
)
from streamstate.runtime.state.registry import native_snapshots

__all__ = [
    "INLINE_LIMIT",
    "write_savepoint",
    "StateVersions",
    "commit_keyed_state",
    "commit_operator_state",
    "restore_operator_store",
]

#: operator-state versions up to this many bytes travel inline in acks and epoch specs
INLINE_LIMIT = 16 * 1024


# -- worker side ------------------------------------------------------------------------------


def commit_keyed_state(
    storage: Any,
    backends: Mapping[str, Any],
    index: int,
    es: EpochSpec,
    scope_prefix: str,
    bridged: Callable[[Any], bool] = lambda backend: False,
) -> tuple[dict[str, StateVersion], dict[str, Any]]:
    """Write version ``es.epoch`` of every keyed backend: ``(versions, checkpoint handles)``.

    ``scope_prefix`` (the job id) names RocksDB's incremental uploads
    (``<prefix>-<uid>-<subtask>``); ``bridged(backend)``: its full versions also carry the
    changes since the previous version (see the module docstring).
    """
    versions: dict[str, StateVersion] = {}
    checkpoint: dict[str, Any] = {}
    tag = f"a{es.attempt}-e{es.epoch}"
    cid = es.checkpoint_id
    for uid, backend in backends.items():
        own_files = native_snapshots(backend)
        native = None
        if cid is not None and own_files is not None:
            # an incremental native checkpoint (RocksDB) is also the lineage base
            native = own_files.snapshot_incremental(storage, cid, f"{scope_prefix}-{uid}-{index}")
        if native is not None:
            checkpoint[uid] = native
            versions[uid] = StateVersion.full(native)
        elif (
            cid is not None
            and backend.changelog
            and (
                handle := changelog_checkpoint(
                    storage,
                    backend,
                    _lineage_of(es, index, uid),
                    cid,
                    f"{scope_prefix}-{uid}-{index}",
                )
            )
            is not None
        ):
            # heap with state.changelog.enabled: the base named again plus the changes
            checkpoint[uid] = handle
            versions[uid] = StateVersion.full(handle)
        elif cid is None and own_files is not None:
            # RocksDB: its own files, only the new SSTs written (see the module docstring)
            scope = f"{scope_prefix}-{uid}-{index}"
            handle = own_files.snapshot_epoch_version(
                storage, f"{uid}/{index}", tag, es.epoch, scope
            )
            versions[uid] = StateVersion.full(handle)
        elif cid is not None or es.full_version:
            # the epoch's changes too where a feature keeps copies of the state: they move
            # onto the new base by applying them instead of rebuilding (``Lineage.bridge``)
            bridge = None
            if bridged(backend):
                bridge = _bridge_delta(storage, backend, f"{uid}/{index}/{tag}-delta")
            snap = backend.snapshot()
            rng = backend.key_group_range
            if cid is not None:
                stream = storage.write_state(cid, f"{uid}-{index}-keyed", snap.data)
                checkpoint[uid] = KeyGroupsStateHandle(
                    stream, rng, dict(snap.offsets), dict(snap.meta)
                )
                if not isinstance(stream, ByteStreamStateHandle):
                    versions[uid] = StateVersion.full(checkpoint[uid], bridge)
                    continue
                # inline bytes live on the driver: keep a worker-readable copy as the base
            stream = storage.write_epoch_state(f"{uid}/{index}/{tag}-full", snap.data)
            versions[uid] = StateVersion.full(
                KeyGroupsStateHandle(stream, rng, dict(snap.offsets), dict(snap.meta)), bridge
            )
        else:
            delta = backend.snapshot_delta()
            versions[uid] = (
                StateVersion.delta(storage.write_epoch_state(f"{uid}/{index}/{tag}-delta", delta))
                if delta
                else UNCHANGED
            )
    return versions, checkpoint


def _bridge_delta(storage: Any, backend: Any, name: str) -> StreamStateHandle | None:
    """The changes since the previous version, written as a delta, before a full snapshot of
    ``backend``. Not with snapshot cleanups (TTL), which change the state inside
    ``snapshot()`` without a delta recording it."""
    if backend.snapshot_cleanups:
        return None
    delta = backend.snapshot_delta()
    return storage.write_epoch_state(name, delta) if delta else ByteStreamStateHandle.of(b"")


def _lineage_of(es: EpochSpec, index: int, uid: str) -> Lineage | None:
    subtasks = es.subtasks
    return subtasks[index].lineages.get(uid) if index < len(subtasks) else None


def restore_operator_store(
    store: DefaultOperatorStateStore,
    lineage: OperatorStateLineage | None,
    index: int,
    parallelism: int,
) -> int | None:
    """Load ``lineage`` into ``store``; returns the CRC of the version restored as-is."""
    if lineage is None:
        return None
    if lineage.redistribute is not None:
        old = [
            decode_operator_snapshot(h.read(), f"operator state of old subtask {j}")
            if h is not None
            else None
            for j, h in enumerate(lineage.redistribute)
        ]
        store.restore(redistribute(old, index, parallelism))
        return None
    if lineage.handle is not None:
        data = lineage.handle.read()
        store.restore(decode_operator_snapshot(data, f"operator state version {lineage.token}"))
        return checksum(data)
    return None


def commit_operator_state(
    storage: Any,
    stores: Mapping[str, DefaultOperatorStateStore],
    crcs: dict[str, int | None],
    index: int,
    attempt: int,
    epoch: int,
    checkpoint_id: int | None,
    force: bool = False,
) -> tuple[dict[str, StateVersion], dict[str, StreamStateHandle]]:
    """Write this epoch's operator-state versions: ``(versions, checkpoint handles)`` by uid.

    ``crcs`` (uid -> CRC of the last version) is updated in place. ``force`` (a
    full-version epoch) writes a version even when unchanged, so that no lineage keeps
    pointing at the files of a checkpoint that the driver may discard afterwards (an
    aborted one). Operators that never had operator state report nothing.
    """
    versions: dict[str, StateVersion] = {}
    checkpoint: dict[str, StreamStateHandle] = {}
    for uid, store in stores.items():
        if store.is_empty and crcs.get(uid) is None:
            continue  # never had operator state
        data = store.snapshot()
        crc = checksum(data)
        if checkpoint_id is not None:
            h = storage.write_state(checkpoint_id, f"{uid}-{index}-operator", data)
            checkpoint[uid] = h
            versions[uid] = StateVersion.full(h)
        elif crc == crcs.get(uid) and not force:
            versions[uid] = UNCHANGED
        elif len(data) <= INLINE_LIMIT:
            versions[uid] = StateVersion.full(ByteStreamStateHandle.of(data))
        else:
            name = f"{uid}/{index}/a{attempt}-e{epoch}-operator"
            versions[uid] = StateVersion.full(storage.write_epoch_state(name, data))
        crcs[uid] = crc
    return versions, checkpoint


def write_savepoint(
    target: Any,
    backends: Mapping[str, Any],
    stores: Mapping[str, DefaultOperatorStateStore],
    crcs: Mapping[str, int | None],
    index: int,
    savepoint_id: int,
    scope_prefix: str,
) -> tuple[dict[str, Any], dict[str, StreamStateHandle]]:
    """Write this subtask's state into the savepoint ``target``: ``(keyed, operator)``
    handles by uid. Call it after the epoch's versions were committed (a full snapshot
    clears the changes a delta would record).

    Keyed state is a canonical snapshot (the shared heap format: restores on any backend)
    unless ``target.native`` and the backend has its own files (RocksDB: ``snapshot_native``).
    """
    keyed: dict[str, Any] = {}
    for uid, backend in backends.items():
        own_files = native_snapshots(backend)
        handle = None
        if target.native and own_files is not None:
            handle = own_files.snapshot_native(
                target, savepoint_id, f"{scope_prefix}-{uid}-{index}"
            )
        if handle is None:
            snap = backend.snapshot()
            stream = target.write_state(savepoint_id, f"{uid}-{index}-keyed", snap.data)
            handle = KeyGroupsStateHandle(
                stream, backend.key_group_range, dict(snap.offsets), dict(snap.meta)
            )
        keyed[uid] = handle
    operator: dict[str, StreamStateHandle] = {}
    for uid, store in stores.items():
        if store.is_empty and crcs.get(uid) is None:
            continue  # never had operator state
        operator[uid] = target.write_state(
            savepoint_id, f"{uid}-{index}-operator", store.snapshot()
        )
    return keyed, operator


# -- driver side ------------------------------------------------------------------------------


class StateVersions:
    """The driver's record of where every stateful subtask's latest state version is.

    Keys are ``(operator uid, subtask index)``. Keyed operators always have a lineage
    (empty at a fresh start); operator state has one only for operators that have some.
    Not thread-safe: the driver loop owns it.
    """

    def __init__(self) -> None:
        self.keyed: dict[tuple[str, int], Lineage] = {}
        self.operator: dict[tuple[str, int], OperatorStateLineage] = {}

    def reset(self, keyed_subtasks: Iterable[tuple[str, int]], token: Token) -> None:
        """A fresh start: every keyed subtask at an empty version ``token``."""
        self.keyed = {k: Lineage(token) for k in keyed_subtasks}
        self.operator = {}

    def restore_keyed(
        self,
        uid: str,
        handles: list[Any],
        parallelism: int,
        max_parallelism: int,
        token: Token,
    ) -> None:
        """After a restore: subtask ``i``'s base is every handle intersecting its key groups."""
        for i in range(parallelism):
            rng = compute_key_group_range_for_operator_index(max_parallelism, parallelism, i)
            base = tuple(h for h in handles if h.intersects(rng))
            self.keyed[(uid, i)] = Lineage(token, base, ())

    def keep_in_place(self, token: Token) -> None:
        """After a rescale in place: a worker still holding a keyed subtask's instance
        at ``token`` (the rescale's checkpoint) keeps the key groups it still owns and
        reads only the others from the lineage (``Lineage.kept_from``)."""
        for k, lineage in self.keyed.items():
            self.keyed[k] = dataclasses.replace(lineage, kept_from=token)

    def restore_operator(
        self, uid: str, old: tuple[Any, ...], parallelism: int, token: Token
    ) -> None:
        """After a restore: every new subtask redistributes the old subtasks' handles."""
        for i in range(parallelism):
            self.operator[(uid, i)] = OperatorStateLineage(token, None, old)

    def keyed_for(self, uids: Iterable[str], index: int) -> dict[str, Lineage]:
        return {uid: self.keyed[(uid, index)] for uid in uids}

    def operator_for(self, uids: Iterable[str], index: int) -> dict[str, OperatorStateLineage]:
        return {uid: self.operator[(uid, index)] for uid in uids if (uid, index) in self.operator}

    def fold(self, ack: SubtaskAck) -> list[StreamStateHandle]:
        """Fold one subtask's committed versions in; returns the epoch files they superseded.

        FULL replaces the base and clears the deltas, DELTA appends, NONE only advances
        the token. The superseded files are the caller's to delete (they are never a
        checkpoint's files unless the caller says so: see ``discard_epoch_state``).
        """
        superseded: list[StreamStateHandle] = []
        i, token = ack.subtask, ack.token
        for uid, v in ack.versions.items():
            lin = self.keyed[(uid, i)]
            if v.kind is VersionKind.FULL:
                # a RocksDB version shares its unchanged SST files with the one it replaces
                kept = {s.path for s in v.handle.stream_handles() if isinstance(s, FileStateHandle)}
                superseded.extend(
                    s
                    for b in lin.base
                    for s in b.stream_handles()
                    if not (isinstance(s, FileStateHandle) and s.path in kept)
                )
                if lin.bridge is not None:  # the interval before the previous one
                    superseded.extend((*lin.bridge[1], lin.bridge[2]))
                if v.bridge is None:
                    superseded.extend(lin.deltas)
                    self.keyed[(uid, i)] = Lineage(token, (v.handle,), ())
                    continue
                # the previous interval's deltas stay until the next new base: a serving copy
                # anywhere in it catches up by the rest of them and the bridge
                bridge = (lin.base, lin.deltas, v.bridge)
                self.keyed[(uid, i)] = Lineage(token, (v.handle,), (), bridge)
            elif v.kind is VersionKind.DELTA:
                self.keyed[(uid, i)] = Lineage(token, lin.base, (*lin.deltas, v.handle), lin.bridge)
            else:
                self.keyed[(uid, i)] = Lineage(token, lin.base, lin.deltas, lin.bridge)
        for uid, v in ack.op_versions.items():
            old = self.operator.get((uid, i))
            if v.kind is VersionKind.FULL:
                if old is not None and old.handle is not None:
                    superseded.append(old.handle)
                self.operator[(uid, i)] = OperatorStateLineage(token, v.handle)
            elif old is not None:
                self.operator[(uid, i)] = OperatorStateLineage(token, old.handle, old.redistribute)
        return superseded

    def handles(self) -> Iterator[StreamStateHandle]:
        """Every file the current versions are made of (for the cleanup at job end)."""
        for lin in self.keyed.values():
            for b in lin.base:
                yield from b.stream_handles()
            yield from lin.deltas
            if lin.bridge is not None:
                yield from lin.bridge[1]
                yield lin.bridge[2]
        for ol in self.operator.values():
            if ol.handle is not None:
                yield ol.handle
