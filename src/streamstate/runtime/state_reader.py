"""Read the keyed state of a completed checkpoint or savepoint (Flink's State Processor API).

No job runs: the checkpoint's ``_metadata`` is loaded, the keyed snapshots of one operator
are restored into a fresh heap backend that owns every key group, and the state is read
key by key through the ordinary state handles::

    from streamstate.runtime.state_reader import read_keyed_state
    from streamstate.api.state import ValueStateDescriptor

    counts = read_keyed_state("file:///ckpts/<job>/chk-7", "counter",
                              ValueStateDescriptor("count"))      # {key: value}

A descriptor without type information (pickle) reads state written with any serializer:
values are always decoded with the serializer the checkpoint recorded. Reducing and
aggregating state are returned as stored (the reduced value / the accumulator): pass
:func:`passthrough_descriptor` to read them without the job's functions.

State written with TTL (``enable_time_to_live``) is read with or without TTL on the
given descriptor: values come back unwrapped (no timestamps) and nothing is expired by
the reader, i.e. exactly what the checkpoint holds, expired-but-not-cleaned-up entries
included.

:func:`describe_checkpoint` summarises a checkpoint and :func:`list_checkpoints` walks a
checkpoint directory (``<dir>/<job-id>/chk-<n>/_metadata``); both back the ``streamstate``
CLI. Problems raise :class:`~streamstate.errors.CorruptCheckpointError` (damaged or
incomplete checkpoint) or :class:`~streamstate.errors.ConfigurationError` (unknown
operator uid / state name, wrong state kind), each naming what is known.

No pyspark imports: usable on any machine that can reach the checkpoint storage.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streamstate.api.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from streamstate.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    StateMigrationError,
    StreamStateError,
)
from streamstate.runtime.checkpoint.handles import FileStateHandle, KeyGroupsStateHandle
from streamstate.runtime.checkpoint.metadata import CheckpointMetadata, OperatorSubtaskStates
from streamstate.runtime.checkpoint.storage import (
    METADATA_FILE_NAME,
    load_metadata_from_path,
    resolve_external_pointer,
)
from streamstate.runtime.keygroups import KeyGroupRange, compute_key_group_for_serialized_key
from streamstate.runtime.serializers.ttl import is_ttl_snapshot
from streamstate.runtime.state import ttl
from streamstate.runtime.state.format.serializers import describe_schema, restore_serializer
from streamstate.runtime.state.operator import operator_snapshot_serializers
from streamstate.runtime.state.registry import (
    DEFAULT_BACKEND,
    create_keyed_backend,
    restoring_backend,
)

__all__ = [
    "STATE_KINDS",
    "CheckpointInfo",
    "describe_checkpoint",
    "iter_keyed_state",
    "list_checkpoints",
    "list_keyed_states",
    "load_checkpoint",
    "passthrough_descriptor",
    "read_keyed_state",
    "read_operator_state",
]

#: state kinds readable by :func:`read_keyed_state` (``StateDescriptor.kind`` values)
STATE_KINDS = ("value", "list", "map", "reducing", "aggregating")

_CHK_RE = re.compile(r"^chk-(\d+)$")
_SAVEPOINT_RE = re.compile(r"^savepoint-")


# ---------------------------------------------------------------------------------------------
# Loading


def load_checkpoint(path: str, verify: bool = True) -> CheckpointMetadata:
    """Load a completed checkpoint/savepoint: a ``chk-<n>`` (or savepoint) dir or ``_metadata``.

    ``path`` is a local path or any fsspec URL. With ``verify`` every state file's size and
    CRC are checked. Raises :class:`CorruptCheckpointError` when there is no ``_metadata``
    (never completed, or a wrong path), it cannot be parsed, or a state file is damaged.
    """
    if not isinstance(path, str) or not path:
        raise ConfigurationError(f"a checkpoint path must be a non-empty str, got {path!r}")
    return load_metadata_from_path(resolve_external_pointer(path), verify=verify)


def _metadata_of(path_or_metadata: str | CheckpointMetadata) -> CheckpointMetadata:
    if isinstance(path_or_metadata, CheckpointMetadata):
        return path_or_metadata
    return load_checkpoint(path_or_metadata)


def _where(md: CheckpointMetadata) -> str:
    kind = "savepoint" if md.is_savepoint else "checkpoint"
    return f"{kind} {md.checkpoint_id} of job {md.job_id}"


def _operator(md: CheckpointMetadata, operator_uid: str) -> OperatorSubtaskStates:
    ops = md.operator_states.get(operator_uid)
    if ops is None:
        known = ", ".join(repr(u) for u in sorted(md.operator_states)) or "none"
        raise ConfigurationError(
            f"{_where(md)} has no state for operator uid {operator_uid!r}; operators with "
            f"state: {known}. Use the uid given with .uid(...) in the job"
        )
    return ops


def _keyed_handles(ops: OperatorSubtaskStates) -> list[KeyGroupsStateHandle]:
    return [h for s in ops.subtasks for h in s.keyed]


def _state_metas(handles: list[KeyGroupsStateHandle]) -> dict[str, dict[str, Any]]:
    """State name -> its recorded meta (first occurrence), over every handle."""
    out: dict[str, dict[str, Any]] = {}
    for h in handles:
        states = h.meta.get("states")
        if not isinstance(states, list):
            raise CorruptCheckpointError(
                f"keyed state handle {_handle_name(h)} lacks its 'states' meta"
            )
        for sm in states:
            if not isinstance(sm, dict) or "name" not in sm or "kind" not in sm:
                raise CorruptCheckpointError(
                    f"keyed state handle {_handle_name(h)} has damaged state meta {sm!r}"
                )
            out.setdefault(str(sm["name"]), sm)
    return out


_ROLES = (
    ("key", "key_serializer"),
    ("namespace", "namespace_serializer"),
    ("value", "value_serializer"),
    ("user_key", "user_key_serializer"),
)


def _keyed_schemas(metas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """State name -> role -> {"schema": one line, "snapshot": the recorded snapshot}."""
    return {
        name: {
            role: {"schema": describe_schema(m[field]), "snapshot": m[field]}
            for role, field in _ROLES
            if isinstance(m.get(field), dict)
        }
        for name, m in sorted(metas.items())
    }


def _operator_schemas(ops: OperatorSubtaskStates) -> dict[str, Any]:
    """Operator state name -> [{"schema", "snapshot"}] per serializer, from the first
    subtask that has operator state (every subtask records the same serializers)."""
    out: dict[str, Any] = {}
    for s in ops.subtasks:
        for oh in s.operator:
            for name, snaps in operator_snapshot_serializers(oh.read()).items():
                out.setdefault(
                    name, [{"schema": describe_schema(sn), "snapshot": sn} for sn in snaps]
                )
        if out:
            break
    return dict(sorted(out.items()))


def _handle_name(h: KeyGroupsStateHandle) -> str:
    s = h.stream
    return s.path if isinstance(s, FileStateHandle) else f"<inline {s.size} bytes>"


def list_keyed_states(
    path_or_metadata: str | CheckpointMetadata, operator_uid: str
) -> dict[str, str]:
    """Keyed state names of operator ``operator_uid`` -> their kind (``"value"``, ...)."""
    md = _metadata_of(path_or_metadata)
    metas = _state_metas(_keyed_handles(_operator(md, operator_uid)))
    return {name: str(sm["kind"]) for name, sm in sorted(metas.items())}


# ---------------------------------------------------------------------------------------------
# Reading keyed state


def passthrough_descriptor(name: str, kind: str) -> StateDescriptor:
    """A descriptor of kind ``kind`` that reads state ``name`` as stored, whatever its type.

    No type information (pickle on the reading side is compatible with every recorded
    serializer); reducing state gets a no-op reduce function and aggregating state an
    aggregate function whose result is the accumulator.
    """
    if kind == "value":
        return ValueStateDescriptor(name)
    if kind == "list":
        return ListStateDescriptor(name)
    if kind == "map":
        return MapStateDescriptor(name)
    if kind == "reducing":
        return ReducingStateDescriptor(name, ttl.keep_last)
    if kind == "aggregating":
        return AggregatingStateDescriptor(name, ttl.StoredAggregate())
    raise ConfigurationError(f"unknown state kind {kind!r}; accepted: {', '.join(STATE_KINDS)}")


def _read_one(state: Any, kind: str) -> Any:
    if kind == "value":
        return state.value()
    if kind == "list":
        return list(state.get())
    if kind == "map":
        return dict(state.items())
    return state.get()  # reducing / aggregating


def iter_keyed_state(
    path_or_metadata: str | CheckpointMetadata,
    operator_uid: str,
    descriptor: StateDescriptor,
) -> Iterator[tuple[Any, Any]]:
    """Yield ``(key, value)`` of ``descriptor``'s state of operator ``operator_uid``.

    See :func:`read_keyed_state`; this is its lazy form (the backend is restored when the
    iteration starts and released when it ends).
    """
    md = _metadata_of(path_or_metadata)
    ops = _operator(md, operator_uid)
    if not isinstance(descriptor, StateDescriptor):
        raise ConfigurationError(
            f"read_keyed_state() takes a state descriptor (e.g. ValueStateDescriptor('count')), "
            f"got {type(descriptor).__name__}"
        )
    kind = descriptor.kind
    if kind not in STATE_KINDS:
        raise ConfigurationError(
            f"cannot read {descriptor!r}: supported kinds are {', '.join(STATE_KINDS)}"
        )
    handles = _keyed_handles(ops)
    metas = _state_metas(handles)
    name = descriptor.get_name()
    sm = metas.get(name)
    if sm is None:
        if not handles:  # an operator that never held keyed state: nothing to read
            return
        known = ", ".join(f"{n!r} ({m['kind']})" for n, m in sorted(metas.items())) or "none"
        raise ConfigurationError(
            f"operator {operator_uid!r} in {_where(md)} has no keyed state named {name!r}; "
            f"its keyed states: {known}"
        )
    if sm["kind"] != kind:
        raise ConfigurationError(
            f"state {name!r} of operator {operator_uid!r} is {sm['kind']} state, but a "
            f"{kind} state descriptor was given; read it as {sm['kind']} state"
        )
    if "key_serializer" not in sm:
        raise CorruptCheckpointError(f"state {name!r}: meta lacks its key serializer")
    # State written with TTL is read as stored (TtlValues, no expiry applied) and unwrapped;
    # the descriptor's own TTL configuration plays no part in reading.
    with_ttl = is_ttl_snapshot(sm.get("value_serializer", {}))
    read_descriptor = ttl.stored_form_descriptor(descriptor) if with_ttl else descriptor
    key_serializer = restore_serializer(sm["key_serializer"], name)
    max_p = ops.max_parallelism
    # a backend's own files (incremental RocksDB checkpoints) are read by that backend,
    # canonical snapshots by the default one
    backend = create_keyed_backend(
        restoring_backend(handles) or DEFAULT_BACKEND,
        operator_name=operator_uid,
        key_group_range=KeyGroupRange(0, max_p - 1),
        max_parallelism=max_p,
        key_serializer=key_serializer,
    )
    try:
        try:
            backend.restore(handles)
        except (CorruptCheckpointError, StateMigrationError) as e:
            raise type(e)(f"{_where(md)}, operator {operator_uid!r}: {e}") from e
        state = backend.get_partitioned_state(read_descriptor)
        for key in backend.get_keys(name):
            kg = compute_key_group_for_serialized_key(key_serializer.serialize(key), max_p)
            backend.set_current_key(key, kg)
            value = _read_one(state, kind)
            if with_ttl:
                value = ttl.unwrap_stored(descriptor, value)
            if value is None and kind in ("value", "reducing", "aggregating"):
                raise CorruptCheckpointError(
                    f"{_where(md)}, operator {operator_uid!r}, state {name!r}: key {key!r} is "
                    f"stored outside its key group {kg} (the key serializer recorded in the "
                    f"checkpoint does not reproduce the job's key groups)"
                )
            yield key, value
    finally:
        backend.dispose()


def read_keyed_state(
    path_or_metadata: str | CheckpointMetadata,
    operator_uid: str,
    descriptor: StateDescriptor,
) -> dict[Any, Any]:
    """Keyed state ``descriptor.name`` of operator ``operator_uid``: ``{key: value}``.

    ``path_or_metadata`` is a checkpoint/savepoint directory, its ``_metadata`` file, or
    loaded :class:`CheckpointMetadata`. Values per kind: ValueState ``value()``, ListState a
    list, MapState a dict, Reducing/AggregatingState ``get()``. Keys with no value are
    absent. Raises ``ConfigurationError`` for an unknown operator uid (listing the known
    ones), an unknown state name (listing the operator's states) or a descriptor of the
    wrong kind; ``CorruptCheckpointError`` for damaged state; ``StateMigrationError`` when
    the descriptor's type information cannot read the recorded state.
    """
    return dict(iter_keyed_state(path_or_metadata, operator_uid, descriptor))


# ---------------------------------------------------------------------------------------------
# Describing and listing


def _iso(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000.0, tz=UTC).isoformat(timespec="milliseconds")


def describe_checkpoint(path_or_metadata: str | CheckpointMetadata) -> dict[str, Any]:
    """A JSON-compatible summary of a checkpoint or savepoint.

    ``{"path", "checkpoint_id", "job_id", "job_name", "timestamp_ms", "timestamp" (ISO, UTC),
    "is_savepoint", "format_version", "epoch", "operators": {uid: {"parallelism",
    "max_parallelism", "key_groups_with_state", "state_bytes", "keyed_states": {name: kind},
    "ttl_states" (names of keyed states written with TTL),
    "operator_state_handles", "serializers": {state: {role: {"schema", "snapshot"}}} (role:
    key, namespace, value, user_key), "operator_serializers": {state: [{"schema",
    "snapshot"}]}}}, "source_offsets", "sinks", "properties"}``. Keyed state files are not
    read (the metadata is enough); operator state serializers come from the header of one
    subtask's operator state files, so this stays cheap.
    """
    if isinstance(path_or_metadata, CheckpointMetadata):
        md, path = path_or_metadata, None
    else:
        path = resolve_external_pointer(path_or_metadata)
        md = load_metadata_from_path(path, verify=False)
    operators: dict[str, Any] = {}
    for uid, ops in sorted(md.operator_states.items()):
        handles = _keyed_handles(ops)
        kgs: set[int] = set()
        seen: set[Any] = set()
        size = 0
        for h in handles:
            kgs.update(kg for kg in h.offsets if kg in h.key_group_range)
            for stream in h.stream_handles():  # incremental handles: shared files too
                key = stream.path if isinstance(stream, FileStateHandle) else id(stream)
                if key not in seen:
                    seen.add(key)
                    size += stream.size
        n_op = 0
        for s in ops.subtasks:
            for oh in s.operator:
                n_op += 1
                key = oh.path if isinstance(oh, FileStateHandle) else id(oh)
                if key not in seen:
                    seen.add(key)
                    size += oh.size
        operators[uid] = {
            "parallelism": ops.parallelism,
            "max_parallelism": ops.max_parallelism,
            "key_groups_with_state": len(kgs),
            "state_bytes": size,
            "keyed_states": {n: str(m["kind"]) for n, m in sorted(_state_metas(handles).items())},
            "ttl_states": sorted(
                n
                for n, m in _state_metas(handles).items()
                if is_ttl_snapshot(m.get("value_serializer", {}))
            ),
            "operator_state_handles": n_op,
            "serializers": _keyed_schemas(_state_metas(handles)),
            "operator_serializers": _operator_schemas(ops),
        }
    return {
        "path": path.rsplit("/", 1)[0] if path else None,
        "checkpoint_id": md.checkpoint_id,
        "job_id": md.job_id,
        "job_name": md.properties.get("job_name"),
        "timestamp_ms": md.timestamp_ms,
        "timestamp": _iso(md.timestamp_ms),
        "is_savepoint": md.is_savepoint,
        "format_version": md.format_version,
        "epoch": md.properties.get("epoch"),
        "operators": operators,
        "source_offsets": md.source_offsets,
        "sinks": sorted(md.sink_state),
        "properties": md.properties,
    }


@dataclass(frozen=True)
class CheckpointInfo:
    """One entry of :func:`list_checkpoints`.

    ``status`` is ``"valid"`` (metadata loads and every state file verifies), ``"corrupt"``
    (``error`` says why) or ``"incomplete"`` (a ``chk-<n>`` dir without ``_metadata``:
    the checkpoint never completed; only listed with ``include_incomplete``).
    """

    job_id: str
    checkpoint_id: int
    path: str
    status: str
    timestamp_ms: int | None = None
    is_savepoint: bool = False
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.status == "valid"

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "checkpoint_id": self.checkpoint_id,
            "path": self.path,
            "status": self.status,
            "timestamp_ms": self.timestamp_ms,
            "timestamp": _iso(self.timestamp_ms) if self.timestamp_ms is not None else None,
            "is_savepoint": self.is_savepoint,
            "error": self.error,
        }


def _ls_dirs(fs: Any, path: str) -> list[str]:
    try:
        entries = fs.ls(path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(e["name"].rstrip("/") for e in entries if e.get("type") == "directory")


def _inspect(
    fs: Any, d: str, job_id: str, checkpoint_id: int, verify: bool, include_incomplete: bool
) -> CheckpointInfo | None:
    url = fs.unstrip_protocol(d)
    meta = f"{d}/{METADATA_FILE_NAME}"
    if not fs.exists(meta):
        if not include_incomplete:
            return None
        return CheckpointInfo(job_id, checkpoint_id, url, "incomplete")
    try:
        md = load_metadata_from_path(url, verify=verify)
    except StreamStateError as e:
        return CheckpointInfo(job_id, checkpoint_id, url, "corrupt", error=str(e))
    return CheckpointInfo(
        md.job_id, md.checkpoint_id, url, "valid", md.timestamp_ms, md.is_savepoint
    )


def list_checkpoints(
    directory: str,
    job_id: str | None = None,
    *,
    verify: bool = True,
    include_incomplete: bool = False,
) -> list[CheckpointInfo]:
    """Checkpoints under a checkpoint directory, by job then checkpoint id.

    Walks ``<directory>/<job-id>/chk-<n>/_metadata`` (also accepts a job's own directory,
    and lists ``savepoint-*`` directories found directly under ``directory``). ``job_id``
    restricts the listing to one job. With ``verify`` each checkpoint's state files are
    read and CRC-checked, so damaged ones show as ``"corrupt"``.
    Raises ``ConfigurationError`` when ``directory`` does not exist.
    """
    from streamstate.runtime.stores import explained, url_to_fs

    fs, root = url_to_fs(directory)
    with explained(fs, directory):
        return _list_checkpoints(fs, root, directory, job_id, verify, include_incomplete)


def _list_checkpoints(
    fs: Any, root: str, directory: str, job_id: str | None, verify: bool, include_incomplete: bool
) -> list[CheckpointInfo]:
    if not fs.exists(root) or not fs.isdir(root):
        raise ConfigurationError(f"checkpoint directory {directory!r} does not exist")
    out: list[CheckpointInfo] = []

    def scan_job(job_dir: str, jid: str) -> None:
        found = []
        for d in _ls_dirs(fs, job_dir):
            m = _CHK_RE.match(d.rsplit("/", 1)[-1])
            if m:
                found.append((int(m.group(1)), d))
        for cid, d in sorted(found):
            info = _inspect(fs, d, jid, cid, verify, include_incomplete)
            if info is not None:
                out.append(info)

    children = _ls_dirs(fs, root)
    if any(_CHK_RE.match(c.rsplit("/", 1)[-1]) for c in children):
        # ``directory`` is one job's directory
        jid = root.rsplit("/", 1)[-1]
        if job_id is None or job_id == jid:
            scan_job(root, jid)
        return out
    for child in children:
        name = child.rsplit("/", 1)[-1]
        if _SAVEPOINT_RE.match(name):
            info = _inspect(fs, child, "?", -1, verify, include_incomplete=False)
            if info is not None and (job_id is None or info.job_id == job_id):
                out.append(info)
            continue
        if job_id is not None and name != job_id:
            continue
        scan_job(child, name)
    out.sort(key=lambda i: (i.job_id, i.checkpoint_id))
    return out


def read_operator_state(
    path_or_metadata: str | CheckpointMetadata, operator_uid: str
) -> dict[str, dict[str, Any]]:
    """Operator state of ``operator_uid``: ``{name: {"mode", "subtasks": [value per subtask]}}``.

    ``mode`` is ``"split"`` (list state), ``"union"`` (union list state) or
    ``"broadcast"``; a subtask's value is its list (list modes) or its map (broadcast).
    A subtask without that state has ``None``.
    """
    from streamstate.runtime.state.operator import decode_operator_snapshot

    md = _metadata_of(path_or_metadata)
    ops = _operator(md, operator_uid)
    out: dict[str, dict[str, Any]] = {}
    for i, s in enumerate(ops.subtasks):
        for h in s.operator:
            name = h.path if isinstance(h, FileStateHandle) else f"<inline {h.size} bytes>"
            for state, (mode, value, _sers) in decode_operator_snapshot(h.read(), name).items():
                entry = out.setdefault(
                    state, {"mode": mode.value, "subtasks": [None] * ops.parallelism}
                )
                entry["subtasks"][i] = value
    return out
