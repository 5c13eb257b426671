"""The five keyed state kinds, written once over the keyed-store contract (``store.py``).

Every backend hands its states out as these classes; only the :class:`StateAccess`
under them is the backend's. Reducing and aggregating state are value state with a
fold (as PyFlink's embedded state): ``add`` reads the stored value, folds the new one
in and writes the result back.

The hot methods are the access's own: ``ValueState.value``/``update``,
``ListState.add`` and ``MapState.get``/``put`` are bound to the access's methods
when a handle is made or moves to another namespace, so a call is one call into the
backend with nothing between.

What a read returns is the backend's stored object: the heap backend's live object
(mutating it in place without writing it back is not tracked by deltas), the RocksDB
backend's fresh copy. ``MapState.items()/keys()/values()`` are lists copied at call
time, so the state may change while they are iterated.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, cast, runtime_checkable

from streamstate.api.state import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    StateDescriptor,
    ValueState,
)
from streamstate.runtime.state.store import StateAccess, state_not_mergeable_error

__all__ = [
    "KIND_CLASSES",
    "MERGING_KINDS",
    "AccumulatorState",
    "BulkAddingState",
    "KeyedAggregatingState",
    "KeyedListState",
    "KeyedMapState",
    "KeyedReducingState",
    "KeyedValueState",
    "MergingState",
    "checked_list_values",
    "merging_state",
]

#: the kinds whose handles merge namespaces and add many values at once (Flink's
#: ``InternalMergingState``: what a window's contents may be kept in)
MERGING_KINDS = frozenset({"list", "reducing", "aggregating"})


class MergingState(Protocol):
    """A handle of a :data:`MERGING_KINDS` kind: its namespaces merge (session windows)."""

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None: ...


class BulkAddingState(Protocol):
    """A handle of a :data:`MERGING_KINDS` kind: ``add`` of many values in one access."""

    def add_many(self, values: list[Any]) -> None: ...


@runtime_checkable
class AccumulatorState(Protocol):
    """A reducing or aggregating handle's stored object, as it is (Flink's
    ``InternalAppendingState.getInternal``/``updateInternal``): the reduced value or the
    accumulator of the current key in the current namespace, ``None`` for none. For a
    caller that folds many values itself (the window operator's bulk path) and writes
    the result with one access; ``update_internal(None)`` removes the entry."""

    def get_internal(self) -> Any: ...

    def update_internal(self, stored: Any) -> None: ...


def merging_state(state: Any, descriptor: StateDescriptor) -> MergingState:
    """``state``, the handle of ``descriptor``, as the merging state its kind makes it;
    a kind that cannot merge (value, map) raises ``StateAccessError`` naming the kinds
    that can."""
    if descriptor.kind not in MERGING_KINDS:
        raise state_not_mergeable_error(descriptor.name, descriptor.kind)
    return cast(MergingState, state)


def checked_list_values(values: Any, what: str, state_name: str) -> list[Any]:
    """``values`` for ``ListState.update``/``add_all`` as a list; ``None`` (or a ``None``
    element) raises ``ValueError`` with Flink's message. ``what``: "update" or "add to"."""
    if values is None:
        raise ValueError(f"List of values to {what} ListState {state_name!r} is None.")
    lst = list(values)
    if any(v is None for v in lst):
        raise ValueError(f"You cannot add None to ListState {state_name!r}.")
    return lst


class _KeyedState:
    """A state handle: the descriptor's state over one :class:`StateAccess`."""

    def __init__(self, access: StateAccess, descriptor: StateDescriptor) -> None:
        self._access = access
        self._name = descriptor.name
        self._kind = descriptor.kind
        self._bind()

    def _bind(self) -> None:
        """Bind the hot methods to the access's (again after a namespace change)."""

    def set_current_namespace(self, namespace: Any) -> None:
        """Scope the handle to ``namespace`` (the void namespace by default)."""
        self._access.set_namespace(namespace)
        self._bind()

    def clear(self) -> None:
        self._access.clear()

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Merge the current key's entries in ``sources`` into ``target`` and remove them.

        For list, reducing and aggregating state (Flink's ``InternalMergingState``):
        lists are concatenated, reduced values reduced, accumulators merged with the
        aggregate function's ``merge``. Used when session windows merge. The handle
        stays in its namespace.
        """
        access = self._access
        home = access.namespace
        merged: Any = None
        try:
            for namespace in sources:
                if namespace == target:
                    continue
                access.set_namespace(namespace)
                stored = access.get()
                if stored is None:
                    continue
                access.clear()
                merged = stored if merged is None else self._merge_stored(merged, stored)
            if merged is not None:
                access.set_namespace(target)
                self._merge_into(merged)
        finally:
            access.set_namespace(home)
            self._bind()

    def _merge_into(self, merged: Any) -> None:
        """Fold ``merged`` into the entry of the access's namespace."""
        access = self._access
        current = access.get()
        access.put(merged if current is None else self._merge_stored(current, merged))

    def _merge_stored(self, a: Any, b: Any) -> Any:
        raise state_not_mergeable_error(self._name, self._kind)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"


class KeyedValueState(_KeyedState, ValueState):
    """``value()`` is ``None`` when unset; ``update(None)`` removes the entry."""

    def _bind(self) -> None:
        self.value = self._access.get  # type: ignore[method-assign]  # the access's own method: one call per read
        self.update = self._access.put  # type: ignore[method-assign]  # put(None) removes, as update(None) does

    def value(self) -> Any:
        return self._access.get()

    def update(self, value: Any) -> None:
        self._access.put(value)


class KeyedListState(_KeyedState, ListState):
    """``get()`` is the stored list (empty when unset); ``None`` elements raise."""

    def _merge_into(self, merged: Any) -> None:
        self._access.append(merged)  # concatenation: appended after the target's list

    def _merge_stored(self, a: Any, b: Any) -> Any:
        return [*a, *b]

    def get(self) -> Iterable[Any]:
        stored = self._access.get()
        return [] if stored is None else stored

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"You cannot add None to ListState {self._name!r}.")
        self._access.append([value])

    def update(self, values: list[Any]) -> None:
        elements = checked_list_values(values, "update", self._name)
        if elements:
            self._access.put(elements)
        else:
            self._access.clear()

    def add_all(self, values: list[Any]) -> None:
        elements = checked_list_values(values, "add to", self._name)
        if elements:
            self._access.append(elements)

    def add_many(self, values: list[Any]) -> None:
        """``add(v)`` for each of ``values`` in order, in one append (``add_all``)."""
        self.add_all(values)


class KeyedMapState(_KeyedState, MapState):
    """One value per user key; removing the last mapping removes the key's entry."""

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Map state never merges (as Flink's): ``StateAccessError``."""
        raise state_not_mergeable_error(self._name, self._kind)

    def _bind(self) -> None:
        self.get = self._access.get_item  # type: ignore[method-assign]  # the access's own method: one call per read
        self.put = self._access.put_item  # type: ignore[method-assign]  # the access's own method: one call per write

    def get(self, key: Any) -> Any:
        return self._access.get_item(key)

    def put(self, key: Any, value: Any) -> None:
        self._access.put_item(key, value)

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        if dict_value:
            self._access.put_items(dict_value)

    def remove(self, key: Any) -> None:
        self._access.remove_item(key)

    def contains(self, key: Any) -> bool:
        return self._access.contains_item(key)

    def items(self) -> Iterable[tuple[Any, Any]]:
        return self._access.items()

    def keys(self) -> Iterable[Any]:
        return [k for k, _ in self._access.items()]

    def values(self) -> Iterable[Any]:
        return [v for _, v in self._access.items()]

    def is_empty(self) -> bool:
        return self._access.is_empty()


class KeyedReducingState(_KeyedState, ReducingState):
    """``add(v)`` stores ``reduce(current, v)``; ``add(None)`` clears (as Flink's heap state)."""

    def __init__(self, access: StateAccess, descriptor: StateDescriptor) -> None:
        super().__init__(access, descriptor)
        self._reduce = descriptor.get_reduce_function().reduce  # type: ignore[attr-defined]  # a reducing state's descriptor is a ReducingStateDescriptor

    def _merge_stored(self, a: Any, b: Any) -> Any:
        return self._reduce(a, b)

    def get(self) -> Any:
        return self._access.get()

    def add(self, value: Any) -> None:
        if value is None:
            self._access.clear()
            return
        access = self._access
        current = access.get()
        access.put(value if current is None else self._reduce(current, value))

    def add_many(self, values: list[Any]) -> None:
        """``add(v)`` for each of ``values`` in order, with one read and one write."""
        access = self._access
        current = access.get()
        reduce = self._reduce
        for value in values:
            if value is None:
                current = None
            else:
                current = value if current is None else reduce(current, value)
        access.put(current)

    def get_internal(self) -> Any:
        return self._access.get()

    def update_internal(self, stored: Any) -> None:
        self._access.put(stored)


class KeyedAggregatingState(_KeyedState, AggregatingState):
    """Holds the accumulator; ``get()`` is ``get_result(acc)`` or ``None``; ``add(None)`` clears."""

    def __init__(self, access: StateAccess, descriptor: StateDescriptor) -> None:
        super().__init__(access, descriptor)
        self._agg = descriptor.get_agg_function()  # type: ignore[attr-defined]  # an aggregating state's descriptor is an AggregatingStateDescriptor

    def _merge_stored(self, a: Any, b: Any) -> Any:
        return self._agg.merge(a, b)

    def get(self) -> Any:
        accumulator = self._access.get()
        return None if accumulator is None else self._agg.get_result(accumulator)

    def add(self, value: Any) -> None:
        if value is None:
            self._access.clear()
            return
        access = self._access
        accumulator = access.get()
        if accumulator is None:
            accumulator = self._agg.create_accumulator()
        access.put(self._agg.add(value, accumulator))

    def add_many(self, values: list[Any]) -> None:
        """``add(v)`` for each of ``values`` in order, with one read and one write."""
        access = self._access
        accumulator = access.get()
        agg = self._agg
        for value in values:
            if value is None:
                accumulator = None
                continue
            if accumulator is None:
                accumulator = agg.create_accumulator()
            accumulator = agg.add(value, accumulator)
        access.put(accumulator)

    def get_internal(self) -> Any:
        return self._access.get()

    def update_internal(self, stored: Any) -> None:
        self._access.put(stored)


#: state kind -> handle class
KIND_CLASSES: dict[str, type[_KeyedState]] = {
    "value": KeyedValueState,
    "list": KeyedListState,
    "map": KeyedMapState,
    "reducing": KeyedReducingState,
    "aggregating": KeyedAggregatingState,
}
