"""Planning a read of a savepoint or checkpoint, on the driver (no state file is read here).

``_metadata`` is loaded and its signature checked; state files are verified where they are
read, by the tasks (size, CRC32 and SHA-256 of every file they open), so the driver never
reads state. A read is described by picklable specs the tasks receive:

* :class:`BackendSpec` - the keyed backend to restore into (name + options);
* :class:`KeyedReadSpec` - one operator's keyed handles, the key serializer, and one
  key-group range per task.

Every problem the metadata alone reveals (unknown operator uid, an operator without keyed
state, a key type that does not match the recorded key serializer) is raised here, before
a Spark job starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamstate.api.state_processor import OperatorIdentifier
from streamstate.errors import ConfigurationError, CorruptCheckpointError
from streamstate.runtime.checkpoint.metadata import CheckpointMetadata, OperatorSubtaskStates
from streamstate.runtime.checkpoint.storage import load_metadata_from_path, resolve_external_pointer
from streamstate.runtime.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.state.format.serializers import (
    check_serializer_compatibility,
    restore_serializer,
)
from streamstate.runtime.state.operator import OperatorStateMode, operator_snapshot_modes
from streamstate.runtime.state.registry import (
    DEFAULT_BACKEND,
    ConfiguredBackend,
    backend_settings,
    create_keyed_backend,
    registered_keyed_backends,
    restoring_backend,
)

__all__ = [
    "BackendSpec",
    "KeyedReadSpec",
    "backend_spec",
    "describe_where",
    "keyed_state_metas",
    "load_savepoint",
    "operator_states",
    "plan_keyed_read",
    "plan_operator_read",
    "split_ranges",
]


@dataclass(frozen=True)
class BackendSpec:
    """How a task builds a keyed backend: its registry name and constructor options."""

    name: str = DEFAULT_BACKEND
    options: dict[str, Any] = field(default_factory=dict)

    def create(
        self, uid: str, key_group_range: KeyGroupRange, max_parallelism: int, key_ser: Any
    ) -> Any:
        return create_keyed_backend(
            self.name,
            operator_name=uid,
            key_group_range=key_group_range,
            max_parallelism=max_parallelism,
            key_serializer=key_ser,
            **self.options,
        )

    def with_name(self, name: str) -> BackendSpec:
        """The same options for backend ``name`` (options of another backend are dropped)."""
        return self if name == self.name else BackendSpec(name)


def backend_spec(backend: Any) -> BackendSpec:
    """A :class:`BackendSpec` of a ``StateBackend`` (``HashMapStateBackend()``,
    ``EmbeddedRocksDBStateBackend()``, ...), a backend name, or ``None`` (heap)."""
    if backend is None:
        return BackendSpec()
    if isinstance(backend, str):
        if backend.lower() not in registered_keyed_backends():
            raise ConfigurationError(
                f"unknown state backend {backend!r}; known: "
                f"{', '.join(registered_keyed_backends())}"
            )
        return BackendSpec(backend.lower())
    if (
        not isinstance(backend, ConfiguredBackend)
        or not isinstance(backend.backend_name, str)
        or not backend.backend_name
    ):
        raise ConfigurationError(
            f"expected a state backend (HashMapStateBackend(), EmbeddedRocksDBStateBackend()) "
            f"or a backend name, got {backend!r}"
        )
    return BackendSpec(*backend_settings(backend))


def load_savepoint(path: str) -> CheckpointMetadata:
    """The ``_metadata`` of a savepoint or retained checkpoint directory (or the file).

    The signature and checksum of ``_metadata`` are verified; state files are verified by
    the tasks that read them. Raises ``CorruptCheckpointError`` for a directory without
    ``_metadata`` (never completed) or a damaged or foreign one."""
    if not isinstance(path, str) or not path:
        raise ConfigurationError(f"a savepoint path must be a non-empty str, got {path!r}")
    return load_metadata_from_path(resolve_external_pointer(path), verify=False)


def describe_where(md: CheckpointMetadata) -> str:
    kind = "savepoint" if md.is_savepoint else "checkpoint"
    return f"{kind} {md.checkpoint_id} of job {md.job_id}"


def operator_states(
    md: CheckpointMetadata, operator: str | OperatorIdentifier
) -> tuple[str, OperatorSubtaskStates]:
    """``(uid, states)`` of ``operator``; ``ConfigurationError`` listing the known uids."""
    uid = OperatorIdentifier.of(operator).identifier
    ops = md.operator_states.get(uid)
    if ops is None:
        known = ", ".join(repr(u) for u in sorted(md.operator_states)) or "none"
        raise ConfigurationError(
            f"{describe_where(md)} has no state for operator uid {uid!r}; operators with "
            f"state: {known}. Use the uid the job set with .uid(...) (or, for a job without "
            f"uids, the generated one listed by `streamstate describe`)"
        )
    return uid, ops


def keyed_state_metas(ops: OperatorSubtaskStates, where: str) -> dict[str, dict[str, Any]]:
    """State name -> its recorded meta (first occurrence) over every keyed handle."""
    out: dict[str, dict[str, Any]] = {}
    for s in ops.subtasks:
        for h in s.keyed:
            states = h.meta.get("states")
            if not isinstance(states, list):
                raise CorruptCheckpointError(f"{where}: a keyed state handle lacks its state meta")
            for sm in states:
                if not isinstance(sm, dict) or "name" not in sm or "key_serializer" not in sm:
                    raise CorruptCheckpointError(f"{where}: damaged keyed state meta {sm!r}")
                out.setdefault(str(sm["name"]), sm)
    return out


@dataclass(frozen=True)
class KeyedReadSpec:
    """What every task of a keyed read needs (picklable)."""

    uid: str
    where: str
    handles: tuple[Any, ...]
    max_parallelism: int
    ranges: tuple[KeyGroupRange, ...]
    key_serializer: TypeSerializer
    backend: BackendSpec
    #: state name -> kind, as recorded
    states: dict[str, str]

    def handles_for(self, index: int) -> list[Any]:
        r = self.ranges[index]
        return [h for h in self.handles if h.intersects(r)]

    def backend_for(self, handles: list[Any]) -> BackendSpec:
        """RocksDB for native (incremental) handles, whatever was asked: only its restore
        path opens RocksDB's own files; the requested backend otherwise."""
        native = restoring_backend(handles)
        return self.backend.with_name(native) if native is not None else self.backend


def split_ranges(max_parallelism: int, n: int) -> tuple[KeyGroupRange, ...]:
    """``n`` contiguous key-group ranges covering ``[0, max_parallelism)`` (Flink's operator
    ranges: with ``n`` = the savepoint's parallelism, exactly its subtasks' ranges)."""
    n = max(1, min(n, max_parallelism))
    return tuple(
        compute_key_group_range_for_operator_index(max_parallelism, n, i) for i in range(n)
    )


def plan_keyed_read(
    md: CheckpointMetadata,
    operator: str | OperatorIdentifier,
    backend: BackendSpec,
    key_serializer: TypeSerializer | None,
    parallelism: int,
) -> KeyedReadSpec:
    """The spec of reading ``operator``'s keyed state in about ``parallelism`` tasks.

    Canonical (heap-format) snapshots are split into ``max(parallelism, the savepoint's
    parallelism)`` ranges, each task reading only its key groups' bytes; native RocksDB
    handles are read one task per original subtask (their range opens without copying).
    ``key_serializer`` (from the reader's ``key_type``) must be the recorded one as is;
    ``None`` reads with the recorded one."""
    where = describe_where(md)
    uid, ops = operator_states(md, operator)
    handles = tuple(h for s in ops.subtasks for h in s.keyed)
    where = f"{where}, operator {uid!r}"
    if not handles:
        kinds = "operator state" if any(s.operator for s in ops.subtasks) else "no state"
        raise ConfigurationError(
            f"{where} has no keyed state (it has {kinds}); read it with read_list_state, "
            f"read_union_state or read_broadcast_state"
        )
    metas = keyed_state_metas(ops, where)
    first = next(iter(metas.values()))
    recorded = restore_serializer(first["key_serializer"], str(first["name"]))
    if key_serializer is None:
        key_serializer = recorded
    else:
        check_serializer_compatibility(
            str(first["name"]), "key", key_serializer, first["key_serializer"], require_as_is=True
        )
    native = restoring_backend(handles) is not None
    n = ops.parallelism if native else max(parallelism, ops.parallelism)
    return KeyedReadSpec(
        uid=uid,
        where=where,
        handles=handles,
        max_parallelism=ops.max_parallelism,
        ranges=split_ranges(ops.max_parallelism, n),
        key_serializer=key_serializer,
        backend=backend,
        states={name: str(sm["kind"]) for name, sm in metas.items()},
    )


def plan_operator_read(
    md: CheckpointMetadata, operator: str | OperatorIdentifier, name: str, mode: OperatorStateMode
) -> tuple[str, list[Any]]:
    """``(where, handles)``: the operator-state snapshots (one per subtask that has one) to
    read operator state ``name`` of ``mode`` from. Only the snapshots' headers are read
    here (operator state is small by design), to name a missing state or a wrong mode."""
    uid, ops = operator_states(md, operator)
    where = f"{describe_where(md)}, operator {uid!r}"
    handles = [h for s in ops.subtasks for h in s.operator]
    modes: dict[str, str] = {}
    for h in handles:
        modes.update(operator_snapshot_modes(h.read(), where))
    found = modes.get(name)
    if found is None:
        known = ", ".join(f"{n!r} ({m})" for n, m in sorted(modes.items())) or "none"
        keyed = (
            " (it has keyed state: use read_keyed_state)"
            if any(s.keyed for s in ops.subtasks)
            else ""
        )
        raise ConfigurationError(
            f"{where} has no operator state named {name!r}{keyed}; its operator states: {known}"
        )
    if found != mode.value:
        readers = {
            "split": "read_list_state",
            "union": "read_union_state",
            "broadcast": "read_broadcast_state",
        }
        raise ConfigurationError(
            f"operator state {name!r} of {where} is {found} state, not {mode.value} state; "
            f"read it with {readers[found]}"
        )
    return where, handles
