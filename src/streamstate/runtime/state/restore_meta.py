"""Registering and restoring keyed states against a checkpoint's state meta.

Every backend holds each state in a *store* (the keyed-store contract,
``runtime/state/store.py``: ``name``, ``kind``, ``serializers``, ``restored_meta``),
and every backend reads and writes the canonical checkpoint formats
(:mod:`streamstate.runtime.state.format.keyed`) through it. The rules that do not
depend on where the objects live are here, so every backend applies them alike:

* which serializers a descriptor's state is written with (:func:`serializers_for`);
* a repeated registration returns the first handle or raises
  ``StateDescriptorConflictError`` (:func:`registered_handle`);
* a restored state registered again keeps its kind and a compatible serializer
  (:func:`check_migration`, ``StateMigrationError``);
* a checkpoint's per-state meta resolves to (holder to fill, serializers to read
  with), checking the key serializer as-is (:func:`resolve_states`);
* full handles are read for this backend's key groups only (:func:`restore_handles`)
  and deltas skip other key groups (:func:`apply_delta`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from streamstate.api.state import State, StateDescriptor
from streamstate.errors import (
    CorruptCheckpointError,
    StateAccessError,
    StateDescriptorConflictError,
    StateMigrationError,
)
from streamstate.runtime.checkpoint.changelog import ChangelogStateHandle
from streamstate.runtime.checkpoint.handles import KeyGroupsStateHandle
from streamstate.runtime.keygroups import KeyGroupRange
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.state.format import keyed as fmt
from streamstate.runtime.state.format.namespaces import NamespaceSerializer
from streamstate.runtime.state.format.serializers import (
    STATE_KINDS,
    StateSerializers,
    check_serializer_compatibility,
    restore_serializer,
    serializer_for_type_info,
)

__all__ = [
    "apply_delta",
    "count_covered",
    "check_migration",
    "check_restore_first",
    "read_serializers",
    "registered_handle",
    "resolve_states",
    "restore_handles",
    "serializers_for",
]

#: a state holder: has ``name``, ``kind``, ``serializers`` and ``restored_meta``
H = TypeVar("H")

#: meta field -> attribute of :class:`StateSerializers`
_FIELDS = {
    "key_serializer": "key",
    "namespace_serializer": "namespace",
    "value_serializer": "value",
    "user_key_serializer": "user_key",
}


def serializers_for(
    descriptor: StateDescriptor, key_serializer: TypeSerializer
) -> StateSerializers:
    """The serializers a state of ``descriptor`` is written with (list: element, map:
    value and user key)."""
    kind = descriptor.kind
    if kind == "list":
        value = serializer_for_type_info(descriptor.elem_type_info)  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass
    elif kind == "map":
        value = serializer_for_type_info(descriptor.value_type_info)  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass
    else:
        value = serializer_for_type_info(descriptor.type_info)
    user_key = (
        serializer_for_type_info(descriptor.key_type_info)  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass
        if kind == "map"
        else None
    )
    return StateSerializers(key_serializer, NamespaceSerializer(), value, user_key)


def registered_handle(
    operator_name: str, entry: tuple[StateDescriptor, Any], descriptor: StateDescriptor
) -> State:
    """The handle of a registered ``entry`` (descriptor, handle) for ``descriptor`` of the
    same name: ``StateDescriptorConflictError`` unless the descriptors are compatible."""
    existing, handle = entry
    if existing is descriptor or existing.is_compatible_with(descriptor):
        return handle  # type: ignore[no-any-return]  # the registered handle is the State the caller asked for
    raise StateDescriptorConflictError(
        f"operator {operator_name!r}: state {descriptor.name!r} is already registered as "
        f"{existing!r}; it cannot be registered again as {descriptor!r}. Use another "
        f"state name or the same kind, type information and TTL configuration."
    )


def check_migration(
    operator_name: str, holder: Any, descriptor: StateDescriptor, sers: StateSerializers
) -> list[str]:
    """A restored state registered as ``descriptor`` keeps its kind, and its value (and
    map key) serializer is compatible with the checkpoint's (``StateMigrationError``
    naming the operator, the state, both schemas and the field or reason); returns
    what changed."""
    if holder.kind != descriptor.kind:
        raise StateMigrationError(
            f"operator {operator_name!r}: state {holder.name!r} was restored as "
            f"{holder.kind} state but is now registered as {descriptor.kind} state "
            f"({descriptor!r}). Keep the kind of a state, or give the new state a new name."
        )
    meta = holder.restored_meta
    if meta is None:
        return []
    try:
        changes = check_serializer_compatibility(
            holder.name, "value", sers.value, meta["value_serializer"]
        )
        if sers.user_key is not None and "user_key_serializer" in meta:
            changes += check_serializer_compatibility(
                holder.name, "map key", sers.user_key, meta["user_key_serializer"]
            )
    except StateMigrationError as e:
        raise StateMigrationError(f"operator {operator_name!r}: {e}") from None
    return changes


def check_restore_first(operator_name: str, registered: Collection[str]) -> None:
    """Restore must come before any state is registered."""
    if registered:
        raise StateAccessError(
            f"operator {operator_name!r}: restore() must run before any state is "
            f"registered (registered: {sorted(registered)})"
        )


def read_serializers(holder: Any, name: str, sm: dict[str, Any]) -> StateSerializers:
    """Serializers to read state ``name`` with: the live ``holder``'s where its meta is
    identical to the checkpoint's (``sm``), else restored from ``sm``."""
    live = holder.serializers.to_meta() if holder is not None else {}

    def get(field: str) -> TypeSerializer:
        snap = sm[field]
        if live.get(field) == snap:
            return getattr(holder.serializers, _FIELDS[field])  # type: ignore[no-any-return]  # StateSerializers fields are TypeSerializers
        return restore_serializer(snap, name)

    try:
        user_key = get("user_key_serializer") if sm["kind"] == "map" else None
        return StateSerializers(
            get("key_serializer"),
            get("namespace_serializer"),
            get("value_serializer"),
            user_key,
        )
    except KeyError as e:
        raise CorruptCheckpointError(f"state {name!r}: meta lacks {e}") from e


def resolve_states(
    operator_name: str,
    key_serializer: TypeSerializer,
    states_meta: list[dict[str, Any]],
    holders: Mapping[str, H],
    registered: Collection[str],
    create: Callable[[str, str, StateSerializers], H],
    migrate: Callable[[H, StateSerializers], None] | None = None,
) -> list[tuple[H, StateSerializers]]:
    """Per state id of a checkpoint: (holder to fill, serializers to read with).

    A state without a holder gets one from ``create(name, kind, write_serializers)``
    (which records it in ``holders``), with ``restored_meta`` set to its meta. A
    holder restored with other value serializers (a delta written after a schema
    change, on top of a base written before it) is converted with ``migrate(holder,
    serializers)`` first (a no-op when nothing changed), so a holder always holds
    objects of its serializers. A
    kind differing from a holder's is ``StateMigrationError`` for a ``registered``
    state, else ``CorruptCheckpointError`` (two handles disagree)."""
    out: list[tuple[H, StateSerializers]] = []
    key_checked: set[str] = set()
    for sm in states_meta:
        try:
            name, kind = sm["name"], sm["kind"]
            key_snap = sm["key_serializer"]
        except (KeyError, TypeError) as e:
            raise CorruptCheckpointError(f"keyed state meta is damaged: {e!r}") from e
        if kind not in STATE_KINDS:
            raise CorruptCheckpointError(f"state {name!r} has unknown kind {kind!r}")
        read_sers = read_serializers(holders.get(name), name, sm)
        token = json.dumps(key_snap, sort_keys=True)
        if token not in key_checked:
            check_serializer_compatibility(
                name, "key", key_serializer, key_snap, require_as_is=True
            )
            key_checked.add(token)
        holder: Any = holders.get(name)
        if holder is None:
            write_sers = StateSerializers(
                key_serializer, read_sers.namespace, read_sers.value, read_sers.user_key
            )
            holder = create(name, kind, write_sers)
            holder.restored_meta = sm
        elif holder.kind != kind:
            if name in registered:
                raise StateMigrationError(
                    f"operator {operator_name!r}: state {name!r} is registered as "
                    f"{holder.kind} state but the checkpoint holds {kind} state"
                )
            raise CorruptCheckpointError(
                f"state {name!r} is {holder.kind} state in one handle and {kind} in another"
            )
        elif migrate is not None and name not in registered:
            write_sers = StateSerializers(
                key_serializer, holder.serializers.namespace, read_sers.value, read_sers.user_key
            )
            migrate(holder, write_sers)
            holder.restored_meta = sm
        out.append((holder, read_sers))
    return out


def count_covered(handles: Iterable[Any], wanted: KeyGroupRange) -> int:
    """How many key groups of ``wanted`` the ``handles`` hold: what a restore of them
    reads from storage."""
    covered: set[int] = set()
    for handle in handles:
        covered.update(handle.key_group_range.intersection(wanted))
    return len(covered)


def restore_handles(
    handles: Iterable[KeyGroupsStateHandle],
    key_group_range: KeyGroupRange,
    resolve: Callable[[list[dict[str, Any]]], list[tuple[Any, StateSerializers]]],
    wanted: KeyGroupRange | None = None,
) -> None:
    """Read the key groups of ``key_group_range`` (only those of ``wanted``, a part of it,
    when given) from full (heap-format) ``handles``, reading only their byte ranges;
    ``resolve`` is the backend's :func:`resolve_states`."""
    wanted = key_group_range if wanted is None else wanted
    for handle in handles:
        if isinstance(handle, ChangelogStateHandle):  # its full base, then its deltas
            base, deltas = handle.expand()
            restore_handles([base], key_group_range, resolve, wanted)
            if base.intersects(wanted):
                for d in deltas:
                    fmt.read_delta(d.read(), resolve, _kg_index(key_group_range, wanted))
            continue
        _restore_full(handle, key_group_range, resolve, wanted)


def _restore_full(
    handle: KeyGroupsStateHandle,
    key_group_range: KeyGroupRange,
    resolve: Callable[[list[dict[str, Any]]], list[tuple[Any, StateSerializers]]],
    wanted: KeyGroupRange,
) -> None:
    start = key_group_range.start
    inter = handle.key_group_range.intersection(wanted)
    if not len(inter):
        return
    fmt.check_meta(handle.meta)
    resolved = resolve(handle.meta["states"])
    kgs = sorted(kg for kg in handle.offsets if kg in inter)
    if not kgs:
        return
    blob, base = _read_span(handle, kgs)
    view = memoryview(blob)

    def by_id(sid: int, _r: list[tuple[Any, StateSerializers]] = resolved) -> Any:
        if sid >= len(_r):
            raise CorruptCheckpointError(f"keyed state refers to unknown state id {sid}")
        return _r[sid]

    for kg in kgs:
        off, ln = handle.offsets[kg]
        section = view[off - base : off - base + ln]
        if len(section) != ln:
            raise CorruptCheckpointError(
                f"keyed state of key group {kg} lies outside its state file"
            )
        fmt.read_section(section, kg, by_id, kg - start)


def _read_span(handle: KeyGroupsStateHandle, kgs: list[int]) -> tuple[bytes, int]:
    """The bytes holding key groups ``kgs`` (only those) and the offset they start at."""
    if len(kgs) == len(handle.offsets):
        return handle.stream.read(), 0
    first = min(handle.offsets[kg][0] for kg in kgs)
    end = max(handle.offsets[kg][0] + handle.offsets[kg][1] for kg in kgs)
    return handle.stream.read_range(first, end - first), first


def _kg_index(
    key_group_range: KeyGroupRange, wanted: KeyGroupRange | None = None
) -> Callable[[int], int | None]:
    """Key group -> its index in ``key_group_range`` (``None``: another subtask's, or one
    outside ``wanted`` when given)."""
    start, n = key_group_range.start, len(key_group_range)
    if wanted is not None and wanted != key_group_range:
        lo, hi = wanted.start - start, wanted.end - start

        def wanted_index(kg: int) -> int | None:
            kgi = kg - start
            return kgi if lo <= kgi <= hi else None

        return wanted_index

    def kg_index(kg: int) -> int | None:
        kgi = kg - start
        return kgi if 0 <= kgi < n else None

    return kg_index


def apply_delta(
    data: bytes,
    key_group_range: KeyGroupRange,
    resolve: Callable[[list[dict[str, Any]]], list[tuple[Any, StateSerializers]]],
) -> None:
    """Apply a delta (heap delta format) to the key groups of ``key_group_range``."""
    fmt.read_delta(data, resolve, _kg_index(key_group_range))


def apply_delta_blocks(
    blocks: Sequence[bytes],
    key_group_range: KeyGroupRange,
    resolved: list[tuple[Any, StateSerializers]],
) -> None:
    """Apply blocks of a delta whose states were resolved already (see
    ``KeyedStateBackend.apply_delta_blocks``) to the key groups of ``key_group_range``."""
    fmt.apply_delta_blocks(blocks, resolved, _kg_index(key_group_range))
