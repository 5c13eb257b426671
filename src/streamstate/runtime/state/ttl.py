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

import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from streamstate.datastream.state import (
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

if TYPE_CHECKING:
    from streamstate.runtime.state.base import KeyedStateBackend

__all__ = [
    "TtlCleanupWarning",
    "create_state",
    "expired_entry_filter",
    "stored_form_descriptor",
    "unwrap_stored",
]

_Strategies = StateTtlConfig.CleanupStrategies.Strategies

#: ``_new(TtlValue, (value, ts))`` builds a TtlValue without NamedTuple's Python-level __new__
_new = tuple.__new__


class TtlCleanupWarning(RuntimeWarning):
    """A configured TTL cleanup strategy has no effect on this state backend."""


# ------------------------------------------------------------------------- descriptors


def _raw_descriptor(descriptor: StateDescriptor, reduce_fn: Any, agg_fn: Any) -> StateDescriptor:
    """The same kind and name, no TTL config, values stored as ``TtlValue``."""
    name, kind = descriptor.name, descriptor.kind
    if kind == "value":
        return ValueStateDescriptor(name, TtlTypeInfo(descriptor.type_info))
    if kind == "list":
        return ListStateDescriptor(name, TtlTypeInfo(descriptor.elem_type_info))  # type: ignore[attr-defined]
    if kind == "map":
        return MapStateDescriptor(
            name,
            descriptor.key_type_info,  # type: ignore[attr-defined]
            TtlTypeInfo(descriptor.value_type_info),  # type: ignore[attr-defined]
        )
    if kind == "reducing":
        return ReducingStateDescriptor(name, reduce_fn, TtlTypeInfo(descriptor.type_info))
    if kind == "aggregating":
        return AggregatingStateDescriptor(name, agg_fn, TtlTypeInfo(descriptor.type_info))
    raise TypeError(f"state TTL is not supported for {descriptor!r}")


def _keep_last(a: Any, b: Any) -> Any:
    return b


class _StoredAggregate:
    """An AggregateFunction whose result is the stored accumulator (for reading)."""

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
    return _raw_descriptor(descriptor, _keep_last, _StoredAggregate())


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
        return descriptor.get_agg_function().get_result(stored[0])  # type: ignore[attr-defined]
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


def expired_entry_filter(kind: str, ttl: int, now: int) -> Callable[[Any], Any]:
    """A :class:`StateEntryTransformer` function dropping what expired at ``now``.

    Stored entries are a ``TtlValue`` (value/reducing/aggregating), a list of
    them (list) or a dict of them (map); collections keep their unexpired part.
    """
    if kind == "list":

        def filter_list(lst: Any) -> Any:
            keep = [e for e in lst if e[1] + ttl > now]
            if len(keep) == len(lst):
                return lst
            return keep or None

        return filter_list
    if kind == "map":

        def filter_map(d: Any) -> Any:
            keep = {k: v for k, v in d.items() if v[1] + ttl > now}
            if len(keep) == len(d):
                return d
            return keep or None

        return filter_map

    def filter_value(tv: Any) -> Any:
        return tv if tv[1] + ttl > now else None

    return filter_value


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


def _checked_list(values: Any, name: str, what: str) -> list[Any]:
    if values is None:
        raise ValueError(f"List of values to {what} ListState {name!r} is None.")
    lst = list(values)
    if any(v is None for v in lst):
        raise ValueError(f"You cannot add None to ListState {name!r}.")
    return lst


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
        lst = _checked_list(values, self._name, "add to")
        self._access()
        if lst:
            now = self._now()
            self._raw.add_all([TtlValue(v, now) for v in lst])

    def update(self, values: list[Any]) -> None:
        lst = _checked_list(values, self._name, "update")
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


def _warn(msg: str) -> None:
    warnings.warn(msg, TtlCleanupWarning, stacklevel=4)


class _IncrementalCleanup:
    """Incremental cleanup of one state: ``run()`` checks the next ``size`` entries.

    Shortcut: when the entry cursor completes a round, every stored entry has a
    timestamp >= ``floor`` = min(the round's start time, the oldest unexpired
    timestamp the round visited) (writes stamp the current time, the clock does not
    go back). Until ``floor + ttl`` nothing can have expired, so ``run()`` returns
    at once; in a steady state without expiries that makes the default cleanup
    nearly free. Skipping is unobservable: reads check expiry themselves.
    """

    __slots__ = ("entries", "size", "kind", "ttl", "now", "floor", "round_start", "round_min")

    def __init__(
        self, entries: Any, size: int, kind: str, ttl: int, now: Callable[[], int]
    ) -> None:
        self.entries = entries
        self.size = size
        self.kind = kind
        self.ttl = ttl
        self.now = now
        #: every stored entry's timestamp is >= floor (None: unknown, e.g. restored state)
        self.floor: int | None = None
        self.round_start: int | None = None
        self.round_min: float = float("inf")

    def run(self) -> None:
        t = self.now()
        floor = self.floor
        if floor is not None and t < floor + self.ttl:
            return
        entries = self.entries
        rounds = getattr(entries, "rounds", -1)
        if self.round_start is None:
            self.round_start = t
        seen_min = [float("inf")]
        entries.transform_next(self.size, _min_tracking_filter(self.kind, self.ttl, t, seen_min))
        self.round_min = min(self.round_min, seen_min[0])
        # round r >= 1 ended when round r + 1 began (round 1 begins with the first call)
        if rounds >= 1 and entries.rounds > rounds:
            self.floor = int(min(self.round_min, self.round_start))
            self.round_start = t
            self.round_min = seen_min[0]  # conservative: this call's visits may be in either


def _min_tracking_filter(kind: str, ttl: int, now: int, seen_min: list[float]) -> Any:
    """:func:`expired_entry_filter` that also records the oldest timestamp it keeps."""
    drop = expired_entry_filter(kind, ttl, now)
    if kind == "list":

        def track_list(lst: Any) -> Any:
            out = drop(lst)
            if out is not None and out:
                m = min(e[1] for e in out)
                if m < seen_min[0]:
                    seen_min[0] = m
            return out

        return track_list
    if kind == "map":

        def track_map(d: Any) -> Any:
            out = drop(d)
            if out:
                m = min(v[1] for v in out.values())
                if m < seen_min[0]:
                    seen_min[0] = m
            return out

        return track_map

    def track_value(tv: Any) -> Any:
        ts = tv[1]
        if ts + ttl > now:
            if ts < seen_min[0]:
                seen_min[0] = ts
            return tv
        return None

    return track_value


def _install_cleanups(
    backend: KeyedStateBackend, descriptor: StateDescriptor, cfg: StateTtlConfig, ctx: _TtlContext
) -> None:
    name, kind = descriptor.name, descriptor.kind
    strategies = cfg.get_cleanup_strategies()
    entries = backend.state_entry_transformer(name)
    ttl, now = ctx.ttl, ctx.now
    backend_kind = type(backend).__name__

    if strategies.in_full_snapshot():
        if entries is not None:
            transform_all = entries.transform_all

            def snapshot_cleanup() -> None:
                transform_all(expired_entry_filter(kind, ttl, now()))

            backend.snapshot_cleanups[name] = snapshot_cleanup
        else:
            _warn(
                f"state {name!r}: cleanup_full_snapshot() has no effect on {backend_kind} "
                f"(it cannot rewrite stored entries); expired state is cleaned up on read only"
            )
    else:
        backend.snapshot_cleanups.pop(name, None)

    inc = strategies.get_incremental_cleanup_strategy()
    if inc is not None:
        if entries is not None:
            cleanup = _IncrementalCleanup(entries, inc.get_cleanup_size(), kind, ttl, now)
            ctx.on_access = cleanup.run
            if inc.run_cleanup_for_every_record():
                backend.key_selection_listeners.append(cleanup.run)
        elif strategies.is_explicit(_Strategies.INCREMENTAL_CLEANUP):
            _warn(
                f"state {name!r}: cleanup_incrementally() has no effect on {backend_kind} "
                f"(as in Flink, incremental cleanup is a heap backend strategy)"
            )

    compact = strategies.get_rocksdb_compact_filter_cleanup_strategy()
    if compact is not None:
        installed = backend.configure_ttl_compaction_filter(name, cfg, backend.ttl_time_provider)
        if not installed and strategies.is_explicit(_Strategies.ROCKSDB_COMPACTION_FILTER):
            _warn(
                f"state {name!r}: cleanup_in_rocksdb_compact_filter() has no effect on "
                f"{backend_kind} (only the RocksDB backend compacts); expired state is cleaned "
                f"up on read and by the other configured strategies"
            )


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
        reduce_fn = _TtlReduceFunction(descriptor.get_reduce_function(), ctx)  # type: ignore[attr-defined]
    elif kind == "aggregating":
        agg_fn = _TtlAggregateFunction(descriptor.get_agg_function(), ctx)  # type: ignore[attr-defined]
    raw = create_raw(_raw_descriptor(descriptor, reduce_fn, agg_fn))
    _install_cleanups(backend, descriptor, cfg, ctx)
    if kind == "value":
        return TtlValueState(raw, ctx)
    if kind == "list":
        return TtlListState(raw, ctx)
    if kind == "map":
        return TtlMapState(raw, ctx)
    if kind == "reducing":
        return TtlReducingState(raw, ctx)
    return TtlAggregatingState(raw, ctx, descriptor.get_agg_function())  # type: ignore[attr-defined]
