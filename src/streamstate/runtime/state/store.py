"""The keyed-store contract: what a keyed state backend implements, once per state.

A backend keeps every registered state in a :class:`KeyedStore`: the state's entries for
the key groups of the backend, where an *entry* is what one (key group, key, namespace)
holds: the value of value/reducing/aggregating state, the list of list state, the dict
of map state (the *stored object*). The heap backend keeps stored objects as they are;
the RocksDB backend serializes them into its column families. Above the contract and
shared by every backend:

* the five state kinds and their namespace merging (``runtime/state/kinds.py``), which
  reach the entry of the current key through a :class:`StateAccess`, one per handle;
* the snapshot and delta formats (``runtime/state/format/keyed.py``), which read a
  store's entries per key group (:meth:`KeyedStore.entries`), its changes since the
  last snapshot (:meth:`KeyedStore.changes`), and write restored entries back
  (:meth:`KeyedStore.load`, :meth:`KeyedStore.remove`);
* TTL, which wraps the state kinds (``runtime/state/ttl.py``).

The current key is one :class:`CurrentKey` per backend, shared by the backend and every
access: setting the key is writing two slots, and an access reads them. A state access
is then one call into the backend (``ValueState.value`` *is* the access's ``get``).

Every write through an access records the changed key in the store's ``dirty`` set of
its namespace (``dirty[namespace][key] = key group index``), from which
:meth:`KeyedStore.changes` builds the next delta.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, NoReturn

from streamstate.errors import KeySerializationError, StateAccessError
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.format.serializers import STATE_KINDS, StateSerializers

__all__ = [
    "CurrentKey",
    "KeyedStore",
    "StateAccess",
    "state_not_mergeable_error",
    "state_without_key_error",
    "user_key_error",
]


class CurrentKey:
    """The key every state of one backend is scoped to (HOT PATH: read on every access).

    ``key_group_index`` is the key's group minus the backend's first; it equals the
    number of key groups (out of range) while no key is set. ``key_bytes`` is the
    serialized key a backend storing bytes caches for the current key (``None`` until
    serialized; every key change resets it).
    """

    __slots__ = ("key", "key_group_index", "key_bytes")

    def __init__(self, no_key_index: int) -> None:
        self.key: Any = None
        self.key_group_index = no_key_index
        self.key_bytes: bytes | None = None


class StateAccess(ABC):
    """One state handle's way to the entry of the current key in its current namespace.

    ``get``/``put`` serve value, reducing and aggregating state (and the list of list
    state); ``append`` serves list state; the ``*_item`` methods, ``items`` and
    ``is_empty`` serve map state, whose entry holds one value per user key. Every method
    raises ``StateAccessError`` (:func:`state_without_key_error`) while no key is set.
    Parameter names are those of the public state methods bound to them
    (``ValueState.update(value)``, ``MapState.get(key)``), so keyword calls work.
    """

    #: the namespace this access is scoped to (the void namespace by default)
    namespace: Any = VOID_NAMESPACE

    @abstractmethod
    def set_namespace(self, namespace: Any) -> None:
        """Scope the access to ``namespace``. A backend may rebind its methods here: a
        caller that bound ``get``/``put`` binds them again afterwards."""

    @abstractmethod
    def get(self) -> Any:
        """The stored object of the current key, or ``None``."""

    @abstractmethod
    def put(self, value: Any) -> None:
        """Replace the current key's stored object with ``value``; ``None`` removes the entry."""

    @abstractmethod
    def clear(self) -> None:
        """Remove the current key's entry (map state: every user key)."""

    @abstractmethod
    def append(self, elements: list[Any]) -> None:
        """List state: add ``elements`` (non-empty, no ``None``) at the end of the list."""

    @abstractmethod
    def get_item(self, key: Any) -> Any:
        """Map state: the value of user key ``key``, or ``None``."""

    @abstractmethod
    def put_item(self, key: Any, value: Any) -> None:
        """Map state: set the value of user key ``key``."""

    @abstractmethod
    def put_items(self, items: dict[Any, Any]) -> None:
        """Map state: set every mapping of ``items`` (non-empty)."""

    @abstractmethod
    def remove_item(self, user_key: Any) -> None:
        """Map state: remove ``user_key``; removing the last one removes the entry."""

    @abstractmethod
    def contains_item(self, user_key: Any) -> bool:
        """Map state: whether ``user_key`` has a value."""

    @abstractmethod
    def items(self) -> list[tuple[Any, Any]]:
        """Map state: ``(user key, value)`` pairs, a copy taken at call time."""

    @abstractmethod
    def is_empty(self) -> bool:
        """Map state: whether the entry has no user key."""


class KeyedStore(ABC):
    """One state's entries for the key groups of one backend (see the module docstring).

    ``serializers`` are those the stored objects are written with; ``restored_meta`` is
    the state's meta when it came from a checkpoint (for compatibility checks).
    """

    def __init__(self, name: str, kind: str, size: int, serializers: StateSerializers) -> None:
        if kind not in STATE_KINDS:
            raise ValueError(f"unknown state kind {kind!r}")
        self.name = name
        self.kind = kind
        #: number of key groups (key group indexes are ``0 .. size - 1``)
        self.size = size
        self.serializers = serializers
        self.restored_meta: dict[str, Any] | None = None
        #: namespace -> {key: key group index} of the entries changed since the last
        #: :meth:`clear_changes`
        self.dirty: dict[Any, dict[Any, int]] = {VOID_NAMESPACE: {}}
        #: namespaces a backend created for an access since the last :meth:`clear_changes`:
        #: they held no entry at the last snapshot or delta, so a key absent from one now
        #: needs no tombstone (a window created and purged within one epoch leaves none).
        #: A backend that cannot tell leaves it empty; a restore into one removes it.
        self.born: set[Any] = set()

    def meta(self) -> dict[str, Any]:
        """JSON-compatible description recorded in snapshots: name, kind, serializers."""
        return {"name": self.name, "kind": self.kind, **self.serializers.to_meta()}

    def dirty_of(self, namespace: Any) -> dict[Any, int]:
        """The changed keys of ``namespace`` (created empty on first use)."""
        dirty = self.dirty.get(namespace)
        if dirty is None:
            dirty = self.dirty[namespace] = {}
        return dirty

    def has_changes(self) -> bool:
        return any(self.dirty.values())

    def changes(self) -> Iterator[tuple[Any, int, list[Any], list[Any], list[Any]]]:
        """``(namespace, key group index, put keys, their stored objects, removed keys)``
        of every key changed since the last :meth:`clear_changes`, key groups ascending
        within a namespace (does not clear them)."""
        for namespace, dirty in list(self.dirty.items()):
            if not dirty:
                continue
            born = namespace in self.born
            if born and not self.holds_entries(namespace):
                continue  # created and emptied since the last delta: nothing to write
            by_index: dict[int, list[Any]] = {}
            for key, kgi in dirty.items():
                by_index.setdefault(kgi, []).append(key)
            for kgi in sorted(by_index):
                present, stored, absent = self.lookup(kgi, namespace, by_index[kgi])
                if born:
                    if not present:
                        continue
                    absent = []
                yield namespace, kgi, present, stored, absent

    def holds_entries(self, namespace: Any) -> bool:
        """Whether any key has an entry in ``namespace``; a backend that cannot tell
        cheaply answers True (:meth:`changes` then looks the changed keys up)."""
        return True

    # ---------------------------------------------------------------- what a backend implements
    @abstractmethod
    def access(self) -> StateAccess:
        """A new handle's access to this state (void namespace)."""

    @abstractmethod
    def entries(self, kgi: int) -> Iterator[tuple[Any, list[Any], list[Any]]]:
        """``(namespace, keys, stored objects)`` of key group index ``kgi``, one item per
        namespace with entries (the void namespace first when it has any)."""

    @abstractmethod
    def lookup(
        self, kgi: int, namespace: Any, keys: list[Any]
    ) -> tuple[list[Any], list[Any], list[Any]]:
        """``(keys present, their stored objects, keys absent)`` among ``keys``."""

    @abstractmethod
    def load(self, kgi: int, namespace: Any, keys: list[Any], stored: list[Any]) -> None:
        """Put restored entries (replacing what a key held); not recorded as changes."""

    @abstractmethod
    def remove(self, kgi: int, namespace: Any, keys: list[Any]) -> None:
        """Remove restored tombstones' entries (absent keys are fine); not recorded."""

    @abstractmethod
    def keys(self) -> list[Any]:
        """A copy of the keys with an entry in the void namespace, in key group order."""

    @abstractmethod
    def keys_and_namespaces(self) -> list[tuple[Any, Any]]:
        """A copy of every ``(key, namespace)`` with an entry, in key group order."""

    @abstractmethod
    def clear_changes(self) -> None:
        """Forget the recorded changes (a snapshot or delta captured them)."""


# ------------------------------------------------------------------ the errors every backend raises


def state_without_key_error(state_name: str, operator_name: str) -> StateAccessError:
    """A state handle was used while no key is set."""
    return StateAccessError(
        f"state {state_name!r} of operator {operator_name!r} was "
        f"accessed without a current key: keyed state is only available while processing "
        f"an element of a keyed stream (or in a keyed timer)"
    )


def raise_without_key(state_name: str, operator_name: str) -> NoReturn:
    raise state_without_key_error(state_name, operator_name) from None


def state_not_mergeable_error(state_name: str, kind: str) -> StateAccessError:
    """``merge_namespaces`` on a kind of state that cannot merge (value, map)."""
    return StateAccessError(
        f"state {state_name!r} is {kind} state, which cannot be merged; "
        f"merging windows need list, reducing or aggregating state"
    )


def user_key_error(state_name: str, user_key: Any) -> KeySerializationError:
    """A map state's user key that is not hashable."""
    return KeySerializationError(
        f"MapState {state_name!r}: a user key of type {type(user_key).__name__!r} is not "
        f"hashable; use a hashable key such as a tuple"
    )
