"""State time-to-live: backend-agnostic wrappers over any keyed backend's states.

The hook is :func:`create_state`: a keyed backend's ``get_partitioned_state``
calls ``create_state(self, descriptor, create_raw)`` where ``create_raw(d)``
creates the backend's own state for descriptor ``d``. Without TTL that is
``create_raw(descriptor)``. With TTL (Flink's ``TtlStateFactory``) the backend
creates a *raw* state of the same kind and name whose stored form is
:class:`~streamstate.runtime.serializers.ttl.TtlValue` (``TtlTypeInfo``
wrapping the user type: whole values, each list element, each map value), and
the returned wrapper implements the public state interface on top of it:

* a read of an expired value deletes it and returns nothing, or, with
  ``ReturnExpiredIfNotCleanedUp``, returns it this one last time;
* writes stamp values with the clock's current time; with ``OnReadAndWrite``
  reads re-stamp the values they return;
* list elements and map entries carry their own timestamps and expire
  independently; reducing and aggregating state drop an expired aggregate
  before adding to it (``NeverReturnExpired``).

Expired means ``last_access_timestamp + ttl <= now`` (as Flink). ``now`` comes
from ``backend.ttl_time_provider`` (``ttl_clock.py``; its docstring covers
replay). Cleanup strategies (``StateTtlConfig.CleanupStrategies``):

* on read: always;
* full snapshot: expired entries are dropped at the start of every full
  ``snapshot()`` (checkpoints and full state versions) from the backend as well
  as from the snapshot, so local state always equals what a recovery restores;
* incremental (heap; default ``(5, False)`` with cleanup in background): every
  access of the state advances a cursor over its entries by ``cleanup_size``,
  and with ``run_cleanup_for_every_record`` every ``set_current_key`` too;
* RocksDB compaction filter: delegated to
  ``backend.configure_ttl_compaction_filter``; a backend that cannot (heap)
  ignores it with a warning.

Handles returned by TTL states are copies (``ListState.get()``, ``MapState``
views), except ``ValueState.value()``/``ReducingState.get()`` which return the
stored user object as without TTL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from streamstate.api.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    State,
    StateDescriptor,
    StateTtlConfig,
    ValueState,
    ValueStateDescriptor,
)
from streamstate.runtime.serializers.ttl import TtlTypeInfo, TtlValue
from streamstate.runtime.state.kinds import checked_list_values
from streamstate.runtime.state.ttl_cleanup import (
    TtlCleanupWarning,
    expired_entry_filter,
    install_cleanups,
)

if TYPE_CHECKING:
    from streamstate.runtime.state.base import KeyedStateBackend

__all__ = [
    "StoredAggregate",
    "TtlCleanupWarning",
    "create_state",
    "expired_entry_filter",
    "keep_last",
    "stored_form_descriptor",
    "unwrap_stored",
]

#: ``_new(TtlValue, (value, ts))`` builds a TtlValue without NamedTuple's Python-level __new__
_new = tuple.__new__


# ------------------------------------------------------------------------- descriptors


def _raw_descriptor(descriptor: StateDescriptor, reduce_fn: Any, agg_fn: Any) -> StateDescriptor:
    """The same kind and name, no TTL config, values stored as ``TtlValue``."""
    name, kind = descriptor.name, descriptor.kind
    if kind == "value":
        return ValueStateDescriptor(name, TtlTypeInfo(descriptor.type_info))
    if kind == "list":
        return ListStateDescriptor(name, TtlTypeInfo(descriptor.elem_type_info))  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass
    if kind == "map":
        return MapStateDescriptor(
            name,
            descriptor.key_type_info,  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass
            TtlTypeInfo(descriptor.value_type_info),  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass
        )
    if kind == "reducing":
        return ReducingStateDescriptor(name, reduce_fn, TtlTypeInfo(descriptor.type_info))
    if kind == "aggregating":
        return AggregatingStateDescriptor(name, agg_fn, TtlTypeInfo(descriptor.type_info))
    raise TypeError(f"state TTL is not supported for {descriptor!r}")


def keep_last(a: Any, b: Any) -> Any:
    """A reduce function for reading reducing state as stored (the later value wins)."""
    return b


class StoredAggregate:
    """An AggregateFunction whose result is the stored accumulator (for reading state as
    stored: the state reader, queryable-state serving, TTL's stored form)."""

    def create_accumulator(self) -> Any:
        return None

    def add(self, value: Any, accumulator: Any) -> Any:
        return value

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, a: Any, b: Any) -> Any:
        return b


def stored_form_descriptor(descriptor: StateDescriptor) -> StateDescriptor:
    """A descriptor reading ``descriptor``'s state with TTL as stored (``TtlValue`` s).

    Used by the state reader: no expiry is applied; reducing/aggregating state
    read back the stored ``TtlValue`` of the aggregate / accumulator.
    """
    return _raw_descriptor(descriptor, keep_last, StoredAggregate())


def unwrap_stored(descriptor: StateDescriptor, stored: Any) -> Any:
    """The user view of what :func:`stored_form_descriptor`'s state returned for one key."""
    kind = descriptor.kind
    if stored is None:
        return None
    if kind == "list":
        return [e[0] for e in stored]
    if kind == "map":
        return {k: v[0] for k, v in stored.items()}
    if kind == "aggregating":
        return descriptor.get_agg_function().get_result(stored[0])  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass
    return stored[0]


# ----------------------------------------------------------------------------- context


class _TtlContext:
    """What every wrapper of one state shares: ttl, clock, flags, access callback."""

    __slots__ = ("name", "ttl", "now", "update_on_read", "return_expired", "on_access")

    def __init__(self, name: str, cfg: StateTtlConfig, now: Callable[[], int]) -> None:
        self.name = name
        self.ttl = cfg.get_ttl().to_milliseconds()
        self.now = now
        self.update_on_read = cfg.get_update_type() is StateTtlConfig.UpdateType.OnReadAndWrite
        self.return_expired = (
            cfg.get_state_visibility() is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
        )
        #: incremental cleanup run on every access (None: disabled)
        self.on_access: Callable[[], None] | None = None


# ----------------------------------------------------------------------- value state


class _TtlState:
    __slots__ = ("_raw", "_ctx", "_ttl", "_now", "_name")

    def __init__(self, raw: Any, ctx: _TtlContext) -> None:
        self._raw = raw
        self._ctx = ctx
        self._ttl = ctx.ttl
        self._now = ctx.now
        self._name = ctx.name

    def _access(self) -> None:
        cb = self._ctx.on_access
        if cb is not None:
            cb()

    def clear(self) -> None:
        self._raw.clear()
        self._access()

    def set_current_namespace(self, namespace: Any) -> None:
        """Scope the wrapped state to ``namespace`` (per-window state of window functions)."""
        self._raw.set_current_namespace(namespace)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r}, ttl={self._ttl} ms)"


class TtlValueState(_TtlState, ValueState):
    """``value()`` of an expired value: ``None`` (or the value once, ReturnExpired...)."""

    __slots__ = ()

    def value(self) -> Any:
        ctx = self._ctx
        if ctx.on_access is not None:
            ctx.on_access()
        tv = self._raw.value()
        if tv is None:
            return None
        now = self._now()
        if tv[1] + self._ttl > now:
            if ctx.update_on_read:
                self._raw.update(_new(TtlValue, (tv[0], now)))
            return tv[0]
        self._raw.clear()
        return tv[0] if ctx.return_expired else None

    def update(self, value: Any) -> None:
        cb = self._ctx.on_access
        if cb is not None:
            cb()
        if value is None:
            self._raw.clear()
        else:
            self._raw.update(_new(TtlValue, (value, self._now())))


# ------------------------------------------------------------------------ list state


class TtlListState(_TtlState, ListState):
    """Elements expire independently; ``get()`` returns a new list of user values."""

    __slots__ = ()

    def get(self) -> Iterable[Any]:
        self._access()
        stored = self._raw.get()
        if not stored:
            return []
        ctx = self._ctx
        now = self._now()
        ttl = self._ttl
        unexpired = [e for e in stored if e[1] + ttl > now]
        if len(unexpired) != len(stored):
            result = [e[0] for e in (stored if ctx.return_expired else unexpired)]
            if ctx.update_on_read:
                unexpired = [TtlValue(e[0], now) for e in unexpired]
            self._raw.update(unexpired)  # drops the expired elements (all: clears the key)
            return result
        if ctx.update_on_read:
            self._raw.update([TtlValue(e[0], now) for e in stored])
        return [e[0] for e in stored]

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"You cannot add None to ListState {self._name!r}.")
        self._access()
        self._raw.add(TtlValue(value, self._now()))

    def add_all(self, values: list[Any]) -> None:
        lst = checked_list_values(values, "add to", self._name)
        self._access()
        if lst:
            now = self._now()
            self._raw.add_all([TtlValue(v, now) for v in lst])

    def update(self, values: list[Any]) -> None:
        lst = checked_list_values(values, "update", self._name)
        self._access()
        now = self._now()
        self._raw.update([TtlValue(v, now) for v in lst])


# ------------------------------------------------------------------------- map state


class TtlMapState(_TtlState, MapState):
    """Entries expire independently; views (``items/keys/values``) are new lists."""

    __slots__ = ()

    def _read(self, key: Any) -> tuple[bool, Any]:
        """``(visible, user value)`` of ``key``, cleaning up / re-stamping as configured."""
        tv = self._raw.get(key)
        if tv is None:
            return False, None
        ctx = self._ctx
        now = self._now()
        if tv[1] + self._ttl > now:
            if ctx.update_on_read:
                self._raw.put(key, TtlValue(tv[0], now))
            return True, tv[0]
        self._raw.remove(key)
        return ctx.return_expired, (tv[0] if ctx.return_expired else None)

    def get(self, key: Any) -> Any:
        self._access()
        return self._read(key)[1]

    def contains(self, key: Any) -> bool:
        self._access()
        return self._read(key)[0]

    def put(self, key: Any, value: Any) -> None:
        self._access()
        self._raw.put(key, TtlValue(value, self._now()))

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        self._access()
        if dict_value:
            now = self._now()
            self._raw.put_all({k: TtlValue(v, now) for k, v in dict_value.items()})

    def remove(self, key: Any) -> None:
        self._access()
        self._raw.remove(key)

    def items(self) -> Iterable[tuple[Any, Any]]:
        self._access()
        entries = self._raw.items()
        if not entries:
            return []
        ctx = self._ctx
        now = self._now()
        ttl = self._ttl
        out: list[tuple[Any, Any]] = []
        expired: list[Any] = []
        restamped: dict[Any, Any] = {}
        for k, tv in entries:
            if tv[1] + ttl > now:
                out.append((k, tv[0]))
                if ctx.update_on_read:
                    restamped[k] = TtlValue(tv[0], now)
            else:
                expired.append(k)
                if ctx.return_expired:
                    out.append((k, tv[0]))
        for k in expired:
            self._raw.remove(k)
        if restamped:
            self._raw.put_all(restamped)
        return out

    def keys(self) -> Iterable[Any]:
        return [k for k, _ in self.items()]

    def values(self) -> Iterable[Any]:
        return [v for _, v in self.items()]

    def is_empty(self) -> bool:
        return not self.items()


# ----------------------------------------------------------- reducing / aggregating


def _unexpired_user(ctx: _TtlContext, tv: Any, now: int) -> Any:
    """The user value of ``tv`` if visible at ``now`` (else None)."""
    if tv is None or (tv[1] + ctx.ttl <= now and not ctx.return_expired):
        return None
    return tv[0]


class _TtlReduceFunction:
    """Reduces ``TtlValue`` s: an expired side is dropped (``NeverReturnExpired``)."""

    def __init__(self, original: Any, ctx: _TtlContext) -> None:
        self.original = original
        self.ctx = ctx

    def reduce(self, value1: Any, value2: Any) -> Any:
        now = self.ctx.now()
        u1 = _unexpired_user(self.ctx, value1, now)
        u2 = _unexpired_user(self.ctx, value2, now)
        if u1 is not None and u2 is not None:
            r = self.original.reduce(u1, u2)
            return None if r is None else TtlValue(r, now)
        if u1 is not None:
            return TtlValue(u1, now)
        return TtlValue(u2, now) if u2 is not None else None


class TtlReducingState(_TtlState, ReducingState):
    __slots__ = ()

    def get(self) -> Any:
        self._access()
        tv = self._raw.get()
        if tv is None:
            return None
        ctx = self._ctx
        now = self._now()
        if tv[1] + self._ttl > now:
            if ctx.update_on_read:  # re-stamp: an add to an empty state stores the value as is
                self._raw.clear()
                self._raw.add(TtlValue(tv[0], now))
            return tv[0]
        self._raw.clear()
        return tv[0] if ctx.return_expired else None

    def add(self, value: Any) -> None:
        self._access()
        if value is None:
            self._raw.clear()
        else:
            self._raw.add(TtlValue(value, self._now()))


class _Replace:
    """Marks an ``add`` that replaces the stored accumulator (re-stamping on read)."""

    __slots__ = ("stored",)

    def __init__(self, stored: Any) -> None:
        self.stored = stored


class _TtlAggregateFunction:
    """Aggregates into ``TtlValue(accumulator, ts)``; ``get_result`` returns it as stored."""

    def __init__(self, original: Any, ctx: _TtlContext) -> None:
        self.original = original
        self.ctx = ctx

    def create_accumulator(self) -> Any:
        return TtlValue(self.original.create_accumulator(), self.ctx.now())

    def add(self, value: Any, accumulator: Any) -> Any:
        if type(value) is _Replace:
            return value.stored
        now = self.ctx.now()
        acc = _unexpired_user(self.ctx, accumulator, now)
        if acc is None:
            acc = self.original.create_accumulator()
        r = self.original.add(value, acc)
        return None if r is None else TtlValue(r, now)

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, a: Any, b: Any) -> Any:
        now = self.ctx.now()
        ua = _unexpired_user(self.ctx, a, now)
        ub = _unexpired_user(self.ctx, b, now)
        if ua is not None and ub is not None:
            return TtlValue(self.original.merge(ua, ub), now)
        if ua is not None:
            return TtlValue(ua, now)
        return TtlValue(ub, now) if ub is not None else None


class TtlAggregatingState(_TtlState, AggregatingState):
    __slots__ = ("_agg",)

    def __init__(self, raw: Any, ctx: _TtlContext, agg: Any) -> None:
        super().__init__(raw, ctx)
        self._agg = agg

    def get(self) -> Any:
        self._access()
        tv = self._raw.get()
        if tv is None:
            return None
        ctx = self._ctx
        now = self._now()
        if tv[1] + self._ttl > now:
            if ctx.update_on_read:
                self._raw.clear()
                self._raw.add(_Replace(TtlValue(tv[0], now)))
            return self._agg.get_result(tv[0])
        self._raw.clear()
        return self._agg.get_result(tv[0]) if ctx.return_expired else None

    def add(self, value: Any) -> None:
        self._access()
        if value is None:
            self._raw.clear()
        else:
            self._raw.add(value)


# ------------------------------------------------------------------------------ hook


def create_state(
    backend: KeyedStateBackend,
    descriptor: StateDescriptor,
    create_raw: Callable[[StateDescriptor], State],
) -> State:
    """The state for ``descriptor``: ``create_raw(descriptor)``, or a TTL wrapper over a raw state.

    ``create_raw(d)`` is the backend's own creation of state ``d.name`` (kind
    ``d.kind``, the serializers of ``d``'s type information, registration and
    restore compatibility checks included). Call once per registration.
    """
    if not descriptor.has_ttl():
        return create_raw(descriptor)
    cfg = descriptor.get_ttl_config()
    assert cfg is not None
    ctx = _TtlContext(descriptor.name, cfg, backend.ttl_time_provider.current_timestamp)
    kind = descriptor.kind
    reduce_fn = agg_fn = None
    if kind == "reducing":
        reduce_fn = _TtlReduceFunction(descriptor.get_reduce_function(), ctx)  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass
    elif kind == "aggregating":
        agg_fn = _TtlAggregateFunction(descriptor.get_agg_function(), ctx)  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass
    raw = create_raw(_raw_descriptor(descriptor, reduce_fn, agg_fn))
    ctx.on_access = install_cleanups(backend, descriptor, cfg, ctx.ttl, ctx.now)
    if kind == "value":
        return TtlValueState(raw, ctx)
    if kind == "list":
        return TtlListState(raw, ctx)
    if kind == "map":
        return TtlMapState(raw, ctx)
    if kind == "reducing":
        return TtlReducingState(raw, ctx)
    return TtlAggregatingState(raw, ctx, descriptor.get_agg_function())  # type: ignore[attr-defined]  # the state kind checked above fixes the descriptor subclass
