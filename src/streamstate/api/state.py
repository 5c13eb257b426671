"""Keyed state primitives and their descriptors (mirrors ``pyflink.datastream.state``).

The state interfaces (:class:`ValueState`, :class:`ListState`, :class:`MapState`,
:class:`ReducingState`, :class:`AggregatingState`) are what user functions get
back from ``RuntimeContext.get_state(...)`` and friends. They are always scoped
to the key of the element being processed: the runtime sets the current key
before calling the user function.

The descriptors name a state and carry its type information (``None`` means
"any picklable Python value"). They are frozen, hashable, picklable values:
two descriptors are equal when they have the same class, name and type
information (functions are not compared, as in Flink, where the first
registered descriptor of a name wins).

Object reuse: like Flink's heap (``hashmap``) state backend, the state hands
out the live objects it stores. ``ValueState.value()`` returns the stored
object itself, not a copy; if you mutate it, call ``update()`` with it
afterwards, otherwise the change is not part of the next incremental
checkpoint.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, Generic, TypeVar

from streamstate.api.state_ttl_config import StateTtlConfig
from streamstate.common.typeinfo import Types

__all__ = [
    "AggregatingState",
    "AggregatingStateDescriptor",
    "AppendingState",
    "BroadcastState",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "MergingState",
    "OperatorStateStore",
    "ReadOnlyBroadcastState",
    "ReducingState",
    "ReducingStateDescriptor",
    "State",
    "StateDescriptor",
    "StateTtlConfig",
    "ValueState",
    "ValueStateDescriptor",
]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
OUT = TypeVar("OUT")


# --------------------------------------------------------------------------- states


class State(ABC):
    """Interface that every kind of partitioned (keyed) state implements."""

    @abstractmethod
    def clear(self) -> None:
        """Removes the value mapped under the current key."""


class ValueState(State, Generic[T]):
    """Partitioned single-value state. The value can be retrieved or updated."""

    @abstractmethod
    def value(self) -> T:
        """The value for the current key, or ``None`` when it has none.

        Returns the live stored object (no copy).
        """

    @abstractmethod
    def update(self, value: T) -> None:
        """Sets the value for the current key; ``None`` removes the current key's entry."""


class AppendingState(State, Generic[IN, OUT]):
    """Partitioned state that supports adding elements and inspecting the current state."""

    @abstractmethod
    def get(self) -> OUT:
        """Returns the elements (or the aggregate) under the current key."""

    @abstractmethod
    def add(self, value: IN) -> None:
        """Adds ``value`` to the state of the current key."""


class MergingState(AppendingState[IN, OUT]):
    """An :class:`AppendingState` whose instances can be merged (e.g. by merging windows)."""


class ReducingState(MergingState[T, T]):
    """Elements added are combined with the descriptor's reduce function.

    ``get()`` returns ``None`` when the current key has no value.
    """


class AggregatingState(MergingState[IN, OUT]):
    """Elements added are pre-aggregated into an accumulator by an ``AggregateFunction``.

    The state holds the accumulator; ``get()`` returns ``agg_function.get_result(acc)``,
    or ``None`` when the current key has no accumulator.
    """


class ListState(MergingState[T, Iterable[T]]):
    """Partitioned list state: ``get()`` is an iterable (empty when the key has none).

    Adding ``None`` raises ``ValueError``; ``update([])`` clears the current key.
    """

    @abstractmethod
    def update(self, values: list[T]) -> None:
        """Replaces the current key's elements with ``values`` (empty clears)."""

    @abstractmethod
    def add_all(self, values: list[T]) -> None:
        """Appends ``values`` to the current key's elements."""

    def __iter__(self) -> Iterator[T]:
        return iter(self.get())


class MapState(State, Generic[K, V]):
    """Partitioned key-value state: a map per current key."""

    @abstractmethod
    def get(self, key: K) -> V:
        """The value mapped to ``key``, or ``None`` when absent."""

    @abstractmethod
    def put(self, key: K, value: V) -> None:
        """Associates ``value`` with ``key``."""

    @abstractmethod
    def put_all(self, dict_value: dict[K, V]) -> None:
        """Copies all mappings of ``dict_value`` into the state."""

    @abstractmethod
    def remove(self, key: K) -> None:
        """Deletes the mapping of ``key`` (no-op when absent)."""

    @abstractmethod
    def contains(self, key: K) -> bool:
        """Whether ``key`` has a mapping."""

    @abstractmethod
    def items(self) -> Iterable[tuple[K, V]]:
        """All mappings of the current key."""

    @abstractmethod
    def keys(self) -> Iterable[K]:
        """All user keys of the current key."""

    @abstractmethod
    def values(self) -> Iterable[V]:
        """All values of the current key."""

    @abstractmethod
    def is_empty(self) -> bool:
        """True when the current key has no mappings."""

    def __getitem__(self, key: K) -> V:
        return self.get(key)

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        self.remove(key)

    def __contains__(self, key: K) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())


class ReadOnlyBroadcastState(State, Generic[K, V]):
    """Broadcast state as the non-broadcast side sees it: reads only.

    Every write method raises :class:`~streamstate.errors.StateAccessError`:
    only the broadcast side may change broadcast state, so that it stays
    identical on every subtask.
    """

    @abstractmethod
    def get(self, key: K) -> V | None: ...

    @abstractmethod
    def contains(self, key: K) -> bool: ...

    @abstractmethod
    def items(self) -> Iterable[tuple[K, V]]: ...

    @abstractmethod
    def keys(self) -> Iterable[K]: ...

    @abstractmethod
    def values(self) -> Iterable[V]: ...

    @abstractmethod
    def is_empty(self) -> bool: ...

    def immutable_entries(self) -> Iterable[tuple[K, V]]:
        """Flink's name for :meth:`items` on read-only broadcast state."""
        return self.items()

    def __getitem__(self, key: K) -> V | None:
        return self.get(key)

    def __contains__(self, key: K) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())


class BroadcastState(ReadOnlyBroadcastState[K, V]):
    """Read-write broadcast state (a map), given to the broadcast side."""

    @abstractmethod
    def put(self, key: K, value: V) -> None: ...

    @abstractmethod
    def put_all(self, dict_value: dict[K, V]) -> None: ...

    @abstractmethod
    def remove(self, key: K) -> None: ...

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        self.remove(key)


class OperatorStateStore(ABC):
    """Operator (non-keyed) state of one subtask (Flink's ``OperatorStateStore``).

    * ``get_list_state``: a list; on restore at another parallelism the
      elements of all subtasks are split evenly (contiguous ranges).
    * ``get_union_list_state``: a list; on restore every subtask gets the
      union of all subtasks' elements.
    * ``get_broadcast_state``: a map, identical on every subtask; only inside
      a (Keyed)BroadcastProcessFunction.

    One name has one mode: registering it again with another mode raises
    :class:`~streamstate.errors.StateDescriptorConflictError`.
    """

    @abstractmethod
    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState: ...

    @abstractmethod
    def get_union_list_state(self, state_descriptor: ListStateDescriptor) -> ListState: ...

    @abstractmethod
    def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> BroadcastState: ...

    @abstractmethod
    def get_registered_state_names(self) -> set[str]: ...

    @abstractmethod
    def get_registered_broadcast_state_names(self) -> set[str]: ...


# ----------------------------------------------------------------------- descriptors


def _same_type_info(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    try:
        if a == b:
            return True
    except Exception:  # noqa: BLE001 - pragma: no cover - defensive against odd __eq__
        pass
    return type(a) is type(b) and repr(a) == repr(b)


class StateDescriptor(ABC):
    """Base class of state descriptors: a name plus the type information of the state.

    Descriptors are immutable: attributes cannot be set after construction. The
    one exception is :meth:`enable_time_to_live` (PyFlink's API mutates the
    descriptor): call it before the descriptor is used to get state; a state
    handle keeps the TTL configuration it was created with.
    """

    #: the kind of state this descriptor creates: value, list, map, reducing, aggregating
    kind: ClassVar[str] = ""

    # instance attributes, set once in __init__ through object.__setattr__
    name: str
    _type_info: Any
    _ttl_config: StateTtlConfig | None
    _queryable_name: str | None

    def __init__(self, name: str, type_info: Any = None) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a state name must be a non-empty str, got {name!r}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_type_info", type_info)
        object.__setattr__(self, "_ttl_config", None)
        object.__setattr__(self, "_queryable_name", None)

    def set_queryable(self, queryable_state_name: str) -> None:
        """Make the state queryable under ``queryable_state_name`` (Flink's ``setQueryable``).

        Lookups (``QueryableStateClient.get_kv_state``) then answer the state as of the
        job's last completed epoch or checkpoint. Like :meth:`enable_time_to_live` it
        mutates the descriptor: call it before the descriptor is used to get state."""
        if not isinstance(queryable_state_name, str) or not queryable_state_name:
            raise TypeError(
                f"a queryable state name must be a non-empty str, got {queryable_state_name!r}"
            )
        object.__setattr__(self, "_queryable_name", queryable_state_name)

    def get_queryable_state_name(self) -> str | None:
        """The name given to :meth:`set_queryable` (``None``: not queryable)."""
        return self._queryable_name

    def is_queryable(self) -> bool:
        return self._queryable_name is not None

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        """Configures optional activation of state time-to-live (TTL).

        The state's values expire, become unavailable and are cleaned up
        according to ``ttl_config``. A config whose update type is ``Disabled``
        means no TTL. Restoring state written with TTL into a descriptor without
        it (or the reverse) raises ``StateMigrationError``.
        """
        if not isinstance(ttl_config, StateTtlConfig):
            raise TypeError(
                f"enable_time_to_live() takes a StateTtlConfig (StateTtlConfig.new_builder(ttl)"
                f".build()), got {type(ttl_config).__name__} {ttl_config!r}"
            )
        object.__setattr__(self, "_ttl_config", ttl_config)

    def get_ttl_config(self) -> StateTtlConfig | None:
        """The TTL configuration given to :meth:`enable_time_to_live` (``None`` without)."""
        return self._ttl_config

    def has_ttl(self) -> bool:
        """Whether values of this state expire (TTL enabled and not ``Disabled``)."""
        cfg = self._ttl_config
        return cfg is not None and cfg.is_enabled()

    # immutability --------------------------------------------------------------
    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable (cannot set {attr!r})")

    def __delattr__(self, attr: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable (cannot delete {attr!r})")

    @property
    def type_info(self) -> Any:
        """The type information of the state's value (``None``: any picklable value)."""
        return self._type_info

    def get_name(self) -> str:
        """The name of the state."""
        return self.name

    # value semantics -------------------------------------------------------------
    @abstractmethod
    def _ctor_args(self) -> tuple[Any, ...]:
        """The constructor arguments (used for pickling)."""

    def _type_infos(self) -> tuple[Any, ...]:
        """The type informations compared to detect conflicting registrations."""
        return (self._type_info,)

    def is_compatible_with(self, other: StateDescriptor) -> bool:
        """Same kind, type information and TTL configuration (the condition to share a name)."""
        return (
            type(self) is type(other)
            and self._ttl_config == other._ttl_config
            and len(self._type_infos()) == len(other._type_infos())
            and all(
                _same_type_info(a, b)
                for a, b in zip(self._type_infos(), other._type_infos(), strict=True)
            )
        )

    def __reduce__(self) -> tuple[Any, ...]:
        extra: dict[str, Any] = {}
        if self._ttl_config is not None:
            extra["_ttl_config"] = self._ttl_config
        if self._queryable_name is not None:
            extra["_queryable_name"] = self._queryable_name
        if not extra:
            return (type(self), self._ctor_args())
        return (type(self), self._ctor_args(), extra)

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StateDescriptor):
            return NotImplemented
        return self.name == other.name and self.is_compatible_with(other)

    def __hash__(self) -> int:
        return (type(self).__name__, self.name).__hash__()

    def __repr__(self) -> str:
        infos = ", ".join(repr(t) for t in self._type_infos())
        ttl = "" if self._ttl_config is None else f", ttl={self._ttl_config.get_ttl()!r}"
        return f"{type(self).__name__}({self.name!r}, {infos}{ttl})"


class ValueStateDescriptor(StateDescriptor):
    """Descriptor of a :class:`ValueState`."""

    kind = "value"

    def __init__(self, name: str, value_type_info: Any = None) -> None:
        super().__init__(name, value_type_info)

    @property
    def value_type_info(self) -> Any:
        return self._type_info

    def _ctor_args(self) -> tuple[Any, ...]:
        return (self.name, self._type_info)


class ListStateDescriptor(StateDescriptor):
    """Descriptor of a :class:`ListState` of elements of ``elem_type_info``."""

    kind = "list"

    elem_type_info: Any

    def __init__(self, name: str, elem_type_info: Any = None) -> None:
        super().__init__(name, None)
        object.__setattr__(self, "elem_type_info", elem_type_info)

    @property
    def type_info(self) -> Any:
        """``Types.LIST(elem_type_info)`` as in PyFlink (``None`` without element type)."""
        return _composite("LIST", self.elem_type_info)

    def _type_infos(self) -> tuple[Any, ...]:
        return (self.elem_type_info,)

    def _ctor_args(self) -> tuple[Any, ...]:
        return (self.name, self.elem_type_info)


class MapStateDescriptor(StateDescriptor):
    """Descriptor of a :class:`MapState` from ``key_type_info`` to ``value_type_info``."""

    kind = "map"

    key_type_info: Any
    value_type_info: Any

    def __init__(self, name: str, key_type_info: Any = None, value_type_info: Any = None) -> None:
        super().__init__(name, None)
        object.__setattr__(self, "key_type_info", key_type_info)
        object.__setattr__(self, "value_type_info", value_type_info)

    @property
    def type_info(self) -> Any:
        """``Types.MAP(key_type_info, value_type_info)`` as in PyFlink (``None`` if untyped)."""
        return _composite("MAP", self.key_type_info, self.value_type_info)

    def _type_infos(self) -> tuple[Any, ...]:
        return (self.key_type_info, self.value_type_info)

    def _ctor_args(self) -> tuple[Any, ...]:
        return (self.name, self.key_type_info, self.value_type_info)


class _CallableReduceFunction:
    """Adapts a plain ``f(a, b)`` callable to the ``ReduceFunction.reduce`` shape."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def reduce(self, value1: Any, value2: Any) -> Any:
        return self._fn(value1, value2)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_CallableReduceFunction, (self._fn,))

    def __repr__(self) -> str:
        return f"ReduceFunction({self._fn!r})"


class ReducingStateDescriptor(StateDescriptor):
    """Descriptor of a :class:`ReducingState`.

    ``reduce_function`` is a ``ReduceFunction`` (an object with ``reduce(a, b)``) or a
    plain callable ``f(a, b)``; ``get_reduce_function()`` always returns an object
    with ``reduce``.
    """

    kind = "reducing"

    _reduce_function: Any

    def __init__(self, name: str, reduce_function: Any, type_info: Any = None) -> None:
        super().__init__(name, type_info)
        if callable(getattr(reduce_function, "reduce", None)):
            fn = reduce_function
        elif callable(reduce_function):
            fn = _CallableReduceFunction(reduce_function)
        else:
            raise TypeError("The input must be a ReduceFunction or a callable function!")
        object.__setattr__(self, "_reduce_function", fn)

    def get_reduce_function(self) -> Any:
        return self._reduce_function

    def _ctor_args(self) -> tuple[Any, ...]:
        fn = self._reduce_function
        if isinstance(fn, _CallableReduceFunction):
            fn = fn._fn
        return (self.name, fn, self._type_info)


_AGG_METHODS = ("create_accumulator", "add", "get_result", "merge")


class AggregatingStateDescriptor(StateDescriptor):
    """Descriptor of an :class:`AggregatingState`.

    ``agg_function`` is an ``AggregateFunction``: an object with
    ``create_accumulator()``, ``add(value, accumulator)``, ``get_result(accumulator)``
    and ``merge(acc_a, acc_b)``. ``state_type_info`` is the accumulator's type.
    """

    kind = "aggregating"

    _agg_function: Any

    def __init__(self, name: str, agg_function: Any, state_type_info: Any = None) -> None:
        super().__init__(name, state_type_info)
        missing = [m for m in _AGG_METHODS if not callable(getattr(agg_function, m, None))]
        if missing:
            raise TypeError(
                "The input must be a pyflink.datastream.functions.AggregateFunction! "
                f"{type(agg_function).__name__} lacks {', '.join(missing)}"
            )
        object.__setattr__(self, "_agg_function", agg_function)

    def get_agg_function(self) -> Any:
        return self._agg_function

    def _ctor_args(self) -> tuple[Any, ...]:
        return (self.name, self._agg_function, self._type_info)


def _composite(factory: str, *args: Any) -> Any:
    """``Types.<factory>(*args)`` when every argument is typed, else None (untyped)."""
    if any(a is None for a in args):
        return None
    return getattr(Types, factory)(*args)
