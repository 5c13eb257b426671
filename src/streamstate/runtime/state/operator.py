"""Operator (non-keyed) state of one operator in one subtask, and its redistribution.

Three kinds, as in Flink (``DefaultOperatorStateBackend``):

* list state (``SPLIT_DISTRIBUTE``): on restore at another parallelism, the
  elements of all old subtasks (in subtask order) are split into ``p`` contiguous,
  even ranges; new subtask ``i`` gets range ``i``;
* union list state (``UNION``): every new subtask gets all elements of all old subtasks;
* broadcast state (``BROADCAST``, a map): every subtask holds the same map; new
  subtask ``i`` restores old subtask ``i``'s copy, or ``i mod p_old``'s when it is new
  (scale-out), so no subtask reads a copy twice as often as another.

Snapshot format (version 1), written at the end of every epoch::

    b"SSOS" u16 version u32 header_len header(JSON) blobs...

The header lists per state: name, mode, serializer snapshots and the lengths of
its blobs (list: one blob of elements; broadcast: keys blob, values blob). Blobs
use the serializers' ``serialize_many``. Restored states that are not
registered again are kept and written to the next snapshot, as in the keyed
backends.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterable, Iterator, Sequence
from enum import Enum
from typing import Any

from streamstate.api.state import (
    BroadcastState,
    ListState,
    ListStateDescriptor,
    MapStateDescriptor,
    OperatorStateStore,
    ReadOnlyBroadcastState,
)
from streamstate.common.serializer import migrate_value
from streamstate.errors import (
    CorruptCheckpointError,
    StateAccessError,
    StateDescriptorConflictError,
    StateMigrationError,
    StateSerializationError,
)
from streamstate.runtime.serializers.base import TypeSerializer, TypeSerializerSnapshot
from streamstate.runtime.serializers.registry import restore_serializer, serializer_for
from streamstate.runtime.state.format.serializers import (
    check_serializer_compatibility,
    describe_schema,
)

log = logging.getLogger("streamstate.migration")

__all__ = [
    "FORMAT_VERSION",
    "DefaultOperatorStateStore",
    "OperatorStateMode",
    "ReadOnlyBroadcastStateView",
    "decode_operator_snapshot",
    "operator_snapshot_modes",
    "operator_snapshot_serializers",
    "redistribute",
]

MAGIC = b"SSOS"
FORMAT_VERSION = 1


class OperatorStateMode(Enum):
    SPLIT_DISTRIBUTE = "split"
    UNION = "union"
    BROADCAST = "broadcast"


_API = {
    OperatorStateMode.SPLIT_DISTRIBUTE: "get_list_state",
    OperatorStateMode.UNION: "get_union_list_state",
    OperatorStateMode.BROADCAST: "get_broadcast_state",
}


class PartitionableListState(ListState):
    """An operator list state: one Python list for the whole subtask."""

    __slots__ = ("name", "values")

    def __init__(self, name: str, values: list[Any] | None = None) -> None:
        self.name = name
        self.values: list[Any] = values if values is not None else []

    def get(self) -> Iterable[Any]:
        return list(self.values)  # a copy: callers may update the state while iterating

    def add(self, value: Any) -> None:
        if value is None:
            raise StateAccessError(f"operator list state {self.name!r}: cannot add None")
        self.values.append(value)

    def add_all(self, values: list[Any]) -> None:
        for v in values:
            self.add(v)

    def update(self, values: list[Any]) -> None:
        self.values = []
        self.add_all(list(values or ()))

    def clear(self) -> None:
        self.values = []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())


class HeapBroadcastState(BroadcastState):
    """Broadcast state: a dict, identical on every subtask of the operator."""

    __slots__ = ("map", "name")

    def __init__(self, name: str, entries: dict[Any, Any] | None = None) -> None:
        self.name = name
        self.map: dict[Any, Any] = entries if entries is not None else {}

    def get(self, key: Any) -> Any:
        return self.map.get(key)

    def contains(self, key: Any) -> bool:
        return key in self.map

    def items(self) -> Iterable[tuple[Any, Any]]:
        return list(self.map.items())

    def keys(self) -> Iterable[Any]:
        return list(self.map.keys())

    def values(self) -> Iterable[Any]:
        return list(self.map.values())

    def is_empty(self) -> bool:
        return not self.map

    def put(self, key: Any, value: Any) -> None:
        self.map[key] = value

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        self.map.update(dict_value)

    def remove(self, key: Any) -> None:
        self.map.pop(key, None)

    def clear(self) -> None:
        self.map.clear()


class ReadOnlyBroadcastStateView(ReadOnlyBroadcastState):
    """The non-broadcast side's view: reads pass through, writes raise StateAccessError."""

    __slots__ = ("_state",)

    def __init__(self, state: HeapBroadcastState) -> None:
        self._state = state

    def get(self, key: Any) -> Any:
        return self._state.get(key)

    def contains(self, key: Any) -> bool:
        return self._state.contains(key)

    # live views, not copies: nothing can change the map while the non-broadcast side
    # iterates (writes through this view raise), and this is read once per record
    def items(self) -> Iterable[tuple[Any, Any]]:
        return self._state.map.items()

    def keys(self) -> Iterable[Any]:
        return self._state.map.keys()

    def values(self) -> Iterable[Any]:
        return self._state.map.values()

    def is_empty(self) -> bool:
        return self._state.is_empty()

    def _read_only(self, *_: Any) -> None:
        raise StateAccessError(
            f"broadcast state {self._state.name!r} is read-only in process_element(): only "
            f"process_broadcast_element() may change it, so that it stays identical on every "
            f"subtask"
        )

    put = put_all = remove = clear = __setitem__ = __delitem__ = _read_only


class _Entry:
    __slots__ = ("descriptor", "mode", "name", "state")

    def __init__(self, name: str, mode: OperatorStateMode, descriptor: Any, state: Any) -> None:
        self.name = name
        self.mode = mode
        self.descriptor = descriptor
        self.state = state


class DefaultOperatorStateStore(OperatorStateStore):
    """The operator state of one subtask (see the module docstring).

    ``allow_broadcast`` is True only for the broadcast process operators; other
    operators asking for broadcast state get :class:`StateAccessError`.
    """

    def __init__(self, operator_name: str, allow_broadcast: bool = False) -> None:
        self.operator_name = operator_name
        self.allow_broadcast = allow_broadcast
        self._states: dict[str, _Entry] = {}
        #: restored but not (yet) registered: name -> (mode, values or dict, serializer snaps)
        self._restored: dict[str, tuple[OperatorStateMode, Any, list[dict[str, Any]]]] = {}
        self.restored = False
        #: operator state name -> entries migrated to a new schema at restore (job metrics)
        self.migrated_entries: dict[str, int] = {}

    # -- registration -----------------------------------------------------------------
    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState:
        return self._get(state_descriptor, OperatorStateMode.SPLIT_DISTRIBUTE)

    def get_union_list_state(self, state_descriptor: ListStateDescriptor) -> ListState:
        return self._get(state_descriptor, OperatorStateMode.UNION)

    def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> BroadcastState:
        if not self.allow_broadcast:
            raise StateAccessError(
                f"broadcast state {getattr(state_descriptor, 'name', state_descriptor)!r} is only "
                f"available in a BroadcastProcessFunction or KeyedBroadcastProcessFunction "
                f"(operator {self.operator_name!r} is not one): connect() the stream with "
                f"stream.broadcast(descriptor) and process() it"
            )
        return self._get(state_descriptor, OperatorStateMode.BROADCAST)

    def get_registered_state_names(self) -> set[str]:
        return {n for n, e in self._states.items() if e.mode is not OperatorStateMode.BROADCAST}

    def get_registered_broadcast_state_names(self) -> set[str]:
        return {n for n, e in self._states.items() if e.mode is OperatorStateMode.BROADCAST}

    def _get(self, descriptor: Any, mode: OperatorStateMode) -> Any:
        want = MapStateDescriptor if mode is OperatorStateMode.BROADCAST else ListStateDescriptor
        if not isinstance(descriptor, want):
            raise StateAccessError(
                f"{_API[mode]}() takes a {want.__name__}, got {type(descriptor).__name__} "
                f"for state {getattr(descriptor, 'name', descriptor)!r}"
            )
        name = descriptor.name
        entry = self._states.get(name)
        if entry is not None:
            if entry.mode is not mode:
                raise StateDescriptorConflictError(
                    f"operator state {name!r} of {self.operator_name!r} is registered with "
                    f"{_API[entry.mode]}() and now requested with {_API[mode]}(): one name has "
                    f"one mode; use another name"
                )
            if not entry.descriptor.is_compatible_with(descriptor):
                raise StateDescriptorConflictError(
                    f"operator state {name!r} of {self.operator_name!r} is registered with "
                    f"{entry.descriptor!r}, now requested with {descriptor!r}"
                )
            return entry.state
        restored = self._restored.pop(name, None)
        if restored is not None and restored[0] is not mode:
            self._restored[name] = restored
            raise StateDescriptorConflictError(
                f"operator state {name!r} of {self.operator_name!r} was checkpointed as "
                f"{restored[0].value} state ({_API[restored[0]]}()) and is now requested with "
                f"{_API[mode]}(): the mode of a state cannot change"
            )
        data = restored[1] if restored is not None else None
        if restored is not None:
            try:
                sers = self._check_compatible(name, descriptor, mode, restored[2])
                data = self._migrate(name, mode, restored[2], sers, data)
            except StateMigrationError:
                self._restored[name] = restored  # nothing registered: the checkpoint stays
                raise
        if mode is OperatorStateMode.BROADCAST:
            state: Any = HeapBroadcastState(name, data)
        else:
            state = PartitionableListState(name, data)
        self._states[name] = _Entry(name, mode, descriptor, state)
        return state

    def _migrate(
        self,
        name: str,
        mode: OperatorStateMode,
        snaps: list[dict[str, Any]],
        sers: list[TypeSerializer],
        data: Any,
    ) -> Any:
        """Restored ``data`` (decoded with ``snaps``) converted for the new ``sers``."""
        olds = [restore_serializer(TypeSerializerSnapshot.from_dict(s)) for s in snaps]
        if all(o == n for o, n in zip(olds, sers, strict=True)):
            return data
        try:
            if mode is OperatorStateMode.BROADCAST:
                (ok, ov), (nk, nv) = olds, sers
                data = {migrate_value(ok, nk, k): migrate_value(ov, nv, v) for k, v in data.items()}
            else:
                data = [migrate_value(olds[0], sers[0], v) for v in data]
        except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as e:
            raise StateMigrationError(
                f"operator {self.operator_name!r}: operator state {name!r} could not be "
                f"migrated from {[describe_schema(o) for o in olds]} to "
                f"{[describe_schema(n) for n in sers]}: {type(e).__name__}: {e}. Nothing was "
                f"written; the checkpoint is unchanged."
            ) from e
        if [o.snapshot_configuration() for o in olds] != [n.snapshot_configuration() for n in sers]:
            self.migrated_entries[name] = len(data)
            log.info(
                "operator %r: operator state %r migrated, %d entries: %s -> %s",
                self.operator_name,
                name,
                len(data),
                [describe_schema(o) for o in olds],
                [describe_schema(n) for n in sers],
            )
        return data

    def _check_compatible(
        self, name: str, descriptor: Any, mode: OperatorStateMode, snaps: list[dict[str, Any]]
    ) -> list[TypeSerializer]:
        """The descriptor's serializers can take over restored state ``name`` (written with
        ``snaps``): as is or after migration (the restored values are already decoded and
        are re-encoded with the new serializers at the next snapshot)."""
        if mode is OperatorStateMode.BROADCAST:
            roles = ["map key", "value"]
            sers = [
                serializer_for(descriptor.key_type_info),
                serializer_for(descriptor.value_type_info),
            ]
        else:
            roles, sers = ["element"], [serializer_for(descriptor.elem_type_info)]
        if len(snaps) != len(sers):
            raise StateMigrationError(
                f"operator {self.operator_name!r}: operator state {name!r} was checkpointed with "
                f"{len(snaps)} serializer(s), the new descriptor {descriptor!r} has {len(sers)}"
            )
        for role, ser, snap in zip(roles, sers, snaps, strict=True):
            try:
                check_serializer_compatibility(name, role, ser, snap)
            except StateMigrationError as e:
                raise StateMigrationError(f"operator {self.operator_name!r}: {e}") from None
        return sers

    def broadcast_state_read_only(self, descriptor: MapStateDescriptor) -> ReadOnlyBroadcastState:
        """The read-only view of broadcast state ``descriptor`` (non-broadcast side)."""
        state = self.get_broadcast_state(descriptor)
        assert isinstance(state, HeapBroadcastState)
        return ReadOnlyBroadcastStateView(state)

    @property
    def is_empty(self) -> bool:
        return not self._states and not self._restored

    # -- snapshot / restore -----------------------------------------------------------
    def snapshot(self) -> bytes:
        """All states (registered and restored-unregistered) in the format above."""
        header: list[dict[str, Any]] = []
        blobs: list[bytes] = []
        for name, e in self._states.items():
            try:
                header.append(self._write(name, e, blobs))
            except StateAccessError:
                raise
            except Exception as ex:  # name the state and the operator
                raise StateSerializationError(
                    name, self.operator_name, type(ex).__name__, str(ex)
                ) from ex
        for name, (mode, data, snaps) in self._restored.items():
            sers = [restore_serializer(TypeSerializerSnapshot.from_dict(s)) for s in snaps]
            header.append(_write_raw(name, mode, data, sers, blobs))
        return _pack(header, blobs)

    def _write(self, name: str, e: _Entry, blobs: list[bytes]) -> dict[str, Any]:
        d = e.descriptor
        if e.mode is OperatorStateMode.BROADCAST:
            sers = [serializer_for(d.key_type_info), serializer_for(d.value_type_info)]
            return _write_raw(name, e.mode, e.state.map, sers, blobs)
        return _write_raw(name, e.mode, e.state.values, [serializer_for(d.elem_type_info)], blobs)

    def restore(
        self, states: dict[str, tuple[OperatorStateMode, Any, list[dict[str, Any]]]]
    ) -> None:
        """Load redistributed states (see :func:`redistribute`); before any registration."""
        self._restored = dict(states)
        self._states = {}
        self.restored = True


def _write_raw(
    name: str, mode: OperatorStateMode, data: Any, sers: list[Any], blobs: list[bytes]
) -> dict[str, Any]:
    if mode is OperatorStateMode.BROADCAST:
        parts = [
            sers[0].serialize_many(list(data.keys())),
            sers[1].serialize_many(list(data.values())),
        ]
    else:
        parts = [sers[0].serialize_many(list(data))]
    blobs.extend(parts)
    return {
        "name": name,
        "mode": mode.value,
        "serializers": [s.snapshot_configuration().to_dict() for s in sers],
        "lengths": [len(p) for p in parts],
    }


def _pack(header: list[dict[str, Any]], blobs: list[bytes]) -> bytes:
    h = json.dumps({"states": header}, sort_keys=True).encode("utf-8")
    return b"".join([MAGIC, struct.pack(">HI", FORMAT_VERSION, len(h)), h, *blobs])


def _header(data: bytes, where: str) -> tuple[list[dict[str, Any]], int]:
    """The per-state header of a snapshot and the offset of its first blob."""
    if data[:4] != MAGIC or len(data) < 10:
        raise CorruptCheckpointError(f"{where} is not an operator state snapshot")
    version, hlen = struct.unpack(">HI", data[4:10])
    if version > FORMAT_VERSION:
        raise CorruptCheckpointError(
            f"{where} has operator state format version {version}; this streamstate reads "
            f"versions 1..{FORMAT_VERSION}"
        )
    try:
        header = json.loads(data[10 : 10 + hlen].decode("utf-8"))["states"]
    except Exception as e:
        raise CorruptCheckpointError(f"{where} is damaged: {type(e).__name__}: {e}") from e
    if not isinstance(header, list):
        raise CorruptCheckpointError(f"{where} is damaged: its header lists no states")
    return header, 10 + hlen


def operator_snapshot_modes(data: bytes, where: str = "<operator state>") -> dict[str, str]:
    """name -> mode value (``"split"``, ``"union"``, ``"broadcast"``) of one subtask's
    snapshot, from its header alone (no value is deserialized)."""
    header, _ = _header(data, where)
    try:
        return {str(st["name"]): OperatorStateMode(st["mode"]).value for st in header}
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptCheckpointError(f"{where} is damaged: {type(e).__name__}: {e}") from e


def operator_snapshot_serializers(
    data: bytes, where: str = "<operator state>"
) -> dict[str, list[dict[str, Any]]]:
    """name -> recorded serializer snapshots (element; or map key and value) of one
    subtask's snapshot, from its header alone."""
    header, _ = _header(data, where)
    try:
        return {str(st["name"]): list(st["serializers"]) for st in header}
    except (KeyError, TypeError) as e:
        raise CorruptCheckpointError(f"{where} is damaged: {type(e).__name__}: {e}") from e


def decode_operator_snapshot(
    data: bytes, where: str = "<operator state>"
) -> dict[str, tuple[OperatorStateMode, Any, list[dict[str, Any]]]]:
    """name -> (mode, list of elements or dict, serializer snapshots) of one subtask's snapshot."""
    header, pos = _header(data, where)
    try:
        out: dict[str, tuple[OperatorStateMode, Any, list[dict[str, Any]]]] = {}
        for st in header:
            mode = OperatorStateMode(st["mode"])
            sers = [
                restore_serializer(TypeSerializerSnapshot.from_dict(s)) for s in st["serializers"]
            ]
            parts = []
            for n in st["lengths"]:
                parts.append(data[pos : pos + n])
                pos += n
            if mode is OperatorStateMode.BROADCAST:
                keys = sers[0].deserialize_many(parts[0])
                vals = sers[1].deserialize_many(parts[1])
                value: Any = dict(zip(keys, vals, strict=True))
            else:
                value = sers[0].deserialize_many(parts[0])
            out[st["name"]] = (mode, value, st["serializers"])
        return out
    except CorruptCheckpointError:
        raise
    except Exception as e:
        raise CorruptCheckpointError(f"{where} is damaged: {type(e).__name__}: {e}") from e


def redistribute(
    old: Sequence[dict[str, tuple[OperatorStateMode, Any, list[dict[str, Any]]]] | None],
    index: int,
    parallelism: int,
) -> dict[str, tuple[OperatorStateMode, Any, list[dict[str, Any]]]]:
    """The states new subtask ``index`` of ``parallelism`` restores from the old subtasks'.

    ``old[j]`` is old subtask ``j``'s decoded snapshot (None: it had none). With equal
    parallelism this returns subtask ``index``'s own states (plus the union of union
    states, which is what every subtask had before the union anyway).
    """
    out: dict[str, tuple[OperatorStateMode, Any, list[dict[str, Any]]]] = {}
    old_p = len(old)
    names: dict[str, tuple[OperatorStateMode, list[dict[str, Any]]]] = {}
    for snap in old:
        for name, (mode, _v, sers) in (snap or {}).items():
            names.setdefault(name, (mode, sers))
    for name, (mode, sers) in names.items():
        if mode is OperatorStateMode.BROADCAST:
            src = old[index] if index < old_p else old[index % old_p]
            data = (src or {}).get(name)
            if data is None:  # that subtask had none: any copy is the same
                data = next(s[name] for s in old if s and name in s)
            out[name] = (mode, dict(data[1]), sers)
            continue
        if mode is OperatorStateMode.SPLIT_DISTRIBUTE and old_p == parallelism:
            own = (old[index] or {}).get(name)
            out[name] = (mode, list(own[1]) if own else [], sers)
            continue
        every: list[Any] = []
        for snap in old:
            if snap and name in snap:
                every.extend(snap[name][1])
        if mode is OperatorStateMode.UNION:
            out[name] = (mode, every, sers)
        else:
            n = len(every)
            lo, hi = n * index // parallelism, n * (index + 1) // parallelism
            out[name] = (mode, every[lo:hi], sers)
    return out
