"""State handles of the heap backend (the five public state primitives).

Each handle reads the backend's current key (``backend._key``) and key group
index (``backend._kgi``, set by ``set_current_key``) and works on the dict of
that key group in its table. Every mutation records ``dirty[key] = kgi`` for
delta snapshots.

Object reuse (as Flink's heap backend): ``ValueState.value()``,
``ReducingState.get()`` and ``ListState.get()`` return the live stored objects,
not copies. Mutating such an object in place without writing it back through
the state (``update``/``add``) is not tracked by incremental (delta) snapshots.
``MapState.items()/keys()/values()`` return lists copied at call time, so the
state may be modified while iterating them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn

from streamstate.api.state import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    StateDescriptor,
    ValueState,
)
from streamstate.errors import KeySerializationError
from streamstate.runtime.state.base import (
    checked_list_values,
    state_not_mergeable_error,
    state_without_key_error,
)
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.heap.table import StateTable

if TYPE_CHECKING:
    from streamstate.runtime.state.heap.backend import HeapKeyedStateBackend

__all__ = [
    "HeapAggregatingState",
    "HeapListState",
    "HeapMapState",
    "HeapReducingState",
    "HeapValueState",
    "STATE_CLASSES",
]

_MISSING: Any = object()


class _HeapState:
    """Shared plumbing: the table, the current namespace's maps and dirty dict."""

    def __init__(
        self, backend: HeapKeyedStateBackend, table: StateTable, descriptor: StateDescriptor
    ) -> None:
        self._backend = backend
        self._table = table
        self._descriptor = descriptor
        self._namespace: Any = VOID_NAMESPACE
        self._maps = table.maps(VOID_NAMESPACE)
        self._dirty = table.dirty_of(VOID_NAMESPACE)
        table.handles.append(self)

    def set_current_namespace(self, namespace: Any) -> None:
        """Scope the handle to ``namespace`` (the void namespace by default)."""
        self._namespace = namespace
        table = self._table
        maps = table.namespaces.get(namespace)
        if maps is None:
            maps = table.maps(namespace)
        self._maps = maps
        self._dirty = table.dirty[namespace]

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Merge the current key's values in ``sources`` into ``target`` and remove them.

        For list, reducing and aggregating state (Flink's ``InternalMergingState``):
        lists are concatenated, reduced values reduced, accumulators merged with
        the aggregate function's ``merge``. Used when session windows merge.
        """
        b = self._backend
        key, kgi = b._key, b._kgi
        if kgi >= self._table.size:
            self._no_key()
        table = self._table
        merged: Any = _MISSING
        for ns in sources:
            if ns == target:
                continue
            maps = table.namespaces.get(ns)
            if maps is None:
                continue
            v = maps[kgi].pop(key, _MISSING)
            if v is _MISSING:
                continue
            table.dirty_of(ns)[key] = kgi
            merged = v if merged is _MISSING else self._merge_values(merged, v)
        if merged is _MISSING:
            return
        m = table.maps(target)[kgi]
        cur = m.get(key, _MISSING)
        m[key] = merged if cur is _MISSING else self._merge_values(cur, merged)
        table.dirty_of(target)[key] = kgi

    def _merge_values(self, a: Any, b: Any) -> Any:
        raise state_not_mergeable_error(self._table.name, self._table.kind)

    def _no_key(self) -> NoReturn:
        raise state_without_key_error(self._table.name, self._backend.operator_name) from None

    def _map(self) -> dict[Any, Any]:
        """The dict of the current key group."""
        try:
            return self._maps[self._backend._kgi]
        except IndexError:
            self._no_key()

    def clear(self) -> None:
        b = self._backend
        key = b._key
        if self._map().pop(key, _MISSING) is not _MISSING:
            self._dirty[key] = b._kgi

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._table.name!r})"


class HeapValueState(_HeapState, ValueState):
    """``value()`` is ``None`` when unset; ``update(None)`` removes the entry."""

    def value(self) -> Any:
        b = self._backend
        try:
            return self._maps[b._kgi].get(b._key)
        except IndexError:
            self._no_key()

    def update(self, value: Any) -> None:
        b = self._backend
        key = b._key
        try:
            m = self._maps[b._kgi]
        except IndexError:
            self._no_key()
        if value is None:
            m.pop(key, None)
        else:
            m[key] = value
        self._dirty[key] = b._kgi


class HeapListState(_HeapState, ListState):
    """``get()`` is the live list (a new empty list when unset); ``None`` elements raise."""

    def _merge_values(self, a: Any, b: Any) -> Any:
        return [*a, *b]

    def get(self) -> Iterable[Any]:
        lst = self._map().get(self._backend._key)
        return [] if lst is None else lst

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"You cannot add None to ListState {self._table.name!r}.")
        b = self._backend
        m = self._map()
        lst = m.get(b._key)
        if lst is None:
            m[b._key] = [value]
        else:
            lst.append(value)
        self._dirty[b._key] = b._kgi

    def _checked(self, values: Any, what: str) -> list[Any]:
        return checked_list_values(values, what, self._table.name)

    def update(self, values: list[Any]) -> None:
        lst = self._checked(values, "update")
        b = self._backend
        m = self._map()
        if lst:
            m[b._key] = lst
        elif m.pop(b._key, _MISSING) is _MISSING:
            return
        self._dirty[b._key] = b._kgi

    def add_all(self, values: list[Any]) -> None:
        lst = self._checked(values, "add to")
        if not lst:
            return
        b = self._backend
        m = self._map()
        cur = m.get(b._key)
        if cur is None:
            m[b._key] = lst
        else:
            cur.extend(lst)
        self._dirty[b._key] = b._kgi


class HeapMapState(_HeapState, MapState):
    """A dict per current key; removing its last mapping removes the key's entry."""

    def _user_key_error(self, key: Any) -> KeySerializationError:
        return KeySerializationError(
            f"MapState {self._table.name!r}: a user key of type {type(key).__name__!r} is not "
            f"hashable; use a hashable key such as a tuple"
        )

    def get(self, key: Any) -> Any:
        d = self._map().get(self._backend._key)
        if d is None:
            return None
        try:
            return d.get(key)
        except TypeError:
            raise self._user_key_error(key) from None

    def put(self, key: Any, value: Any) -> None:
        b = self._backend
        m = self._map()
        d = m.get(b._key)
        try:
            if d is None:
                m[b._key] = {key: value}
            else:
                d[key] = value
        except TypeError:
            raise self._user_key_error(key) from None
        self._dirty[b._key] = b._kgi

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        if not dict_value:
            return
        b = self._backend
        m = self._map()
        d = m.get(b._key)
        new = d is None
        if d is None:
            d = {}
        for k, v in dict_value.items():
            try:
                d[k] = v
            except TypeError:
                raise self._user_key_error(k) from None
        if new:
            m[b._key] = d
        self._dirty[b._key] = b._kgi

    def remove(self, key: Any) -> None:
        b = self._backend
        m = self._map()
        d = m.get(b._key)
        if d is None:
            return
        try:
            if d.pop(key, _MISSING) is _MISSING:
                return
        except TypeError:
            raise self._user_key_error(key) from None
        if not d:
            del m[b._key]
        self._dirty[b._key] = b._kgi

    def contains(self, key: Any) -> bool:
        d = self._map().get(self._backend._key)
        try:
            return d is not None and key in d
        except TypeError:
            raise self._user_key_error(key) from None

    def items(self) -> Iterable[tuple[Any, Any]]:
        d = self._map().get(self._backend._key)
        return [] if d is None else list(d.items())

    def keys(self) -> Iterable[Any]:
        d = self._map().get(self._backend._key)
        return [] if d is None else list(d)

    def values(self) -> Iterable[Any]:
        d = self._map().get(self._backend._key)
        return [] if d is None else list(d.values())

    def is_empty(self) -> bool:
        return not self._map().get(self._backend._key)


class HeapReducingState(_HeapState, ReducingState):
    """``add(v)`` stores ``reduce(current, v)``; ``add(None)`` clears (as Flink's heap state)."""

    def __init__(
        self, backend: HeapKeyedStateBackend, table: StateTable, descriptor: StateDescriptor
    ) -> None:
        super().__init__(backend, table, descriptor)
        self._reduce = descriptor.get_reduce_function().reduce  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass

    def _merge_values(self, a: Any, b: Any) -> Any:
        return self._reduce(a, b)

    def add_many(self, values: list[Any]) -> None:
        """``add(v)`` for each of ``values`` in order, with one state access (internal)."""
        b = self._backend
        key = b._key
        m = self._map()
        cur = m.get(key)
        red = self._reduce
        for v in values:
            if v is None:
                cur = None
            else:
                cur = v if cur is None else red(cur, v)
        if cur is None:
            m.pop(key, None)
        else:
            m[key] = cur
        self._dirty[key] = b._kgi

    def get(self) -> Any:
        return self._map().get(self._backend._key)

    def add(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        b = self._backend
        key = b._key
        m = self._map()
        cur = m.get(key)
        new = value if cur is None else self._reduce(cur, value)
        if new is None:
            m.pop(key, None)
        else:
            m[key] = new
        self._dirty[key] = b._kgi


class HeapAggregatingState(_HeapState, AggregatingState):
    """Holds the accumulator; ``get()`` is ``get_result(acc)`` or ``None``; ``add(None)`` clears."""

    def __init__(
        self, backend: HeapKeyedStateBackend, table: StateTable, descriptor: StateDescriptor
    ) -> None:
        super().__init__(backend, table, descriptor)
        self._agg = descriptor.get_agg_function()  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass

    def _merge_values(self, a: Any, b: Any) -> Any:
        return self._agg.merge(a, b)

    def add_many(self, values: list[Any]) -> None:
        """``add(v)`` for each of ``values`` in order, with one state access (internal)."""
        b = self._backend
        key = b._key
        m = self._map()
        acc = m.get(key)
        agg = self._agg
        for v in values:
            if v is None:
                acc = None
                continue
            if acc is None:
                acc = agg.create_accumulator()
            acc = agg.add(v, acc)
        if acc is None:
            m.pop(key, None)
        else:
            m[key] = acc
        self._dirty[key] = b._kgi

    def get(self) -> Any:
        acc = self._map().get(self._backend._key)
        return None if acc is None else self._agg.get_result(acc)

    def add(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        b = self._backend
        key = b._key
        m = self._map()
        acc = m.get(key)
        if acc is None:
            acc = self._agg.create_accumulator()
        acc = self._agg.add(value, acc)
        if acc is None:
            m.pop(key, None)
        else:
            m[key] = acc
        self._dirty[key] = b._kgi


#: state kind -> handle class
STATE_CLASSES: dict[str, type[_HeapState]] = {
    "value": HeapValueState,
    "list": HeapListState,
    "map": HeapMapState,
    "reducing": HeapReducingState,
    "aggregating": HeapAggregatingState,
}
