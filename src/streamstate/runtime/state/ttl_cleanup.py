"""Cleanup strategies of state TTL: full snapshot, incremental, RocksDB compaction filter.

:func:`install_cleanups` wires a TTL state's configured strategies into its
backend (see ``ttl.py`` for the semantics): full-snapshot cleanup as a
``backend.snapshot_cleanups`` entry, incremental cleanup as the wrapper's
per-access callback (and a key selection listener for per-record cleanup),
the compaction filter through ``backend.configure_ttl_compaction_filter``.
Stored entries are rewritten through the backend's
:class:`~streamstate.runtime.state.base.StateEntryTransformer` with the
filters built by :func:`expired_entry_filter`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamstate.api.state import StateDescriptor, StateTtlConfig

if TYPE_CHECKING:
    from streamstate.runtime.state.base import KeyedStateBackend, StateEntryTransformer

__all__ = ["TtlCleanupWarning", "expired_entry_filter", "install_cleanups"]

_Strategies = StateTtlConfig.CleanupStrategies.Strategies


class TtlCleanupWarning(RuntimeWarning):
    """A configured TTL cleanup strategy has no effect on this state backend."""


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


def _warn(msg: str) -> None:
    warnings.warn(msg, TtlCleanupWarning, stacklevel=5)


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
        self,
        entries: StateEntryTransformer,
        size: int,
        kind: str,
        ttl: int,
        now: Callable[[], int],
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
        rounds = entries.rounds
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


def install_cleanups(
    backend: KeyedStateBackend,
    descriptor: StateDescriptor,
    cfg: StateTtlConfig,
    ttl: int,
    now: Callable[[], int],
) -> Callable[[], None] | None:
    """Install the cleanup strategies of ``cfg`` for state ``descriptor`` on ``backend``.

    Returns the callback the state's wrapper runs on every access (incremental cleanup),
    or ``None``. Full-snapshot cleanup goes to ``backend.snapshot_cleanups``, per-record
    incremental cleanup to ``backend.key_selection_listeners``; a strategy the backend
    cannot run is reported with a :class:`TtlCleanupWarning` when it was asked for
    explicitly.
    """
    name, kind = descriptor.name, descriptor.kind
    strategies = cfg.get_cleanup_strategies()
    entries = backend.state_entry_transformer(name)
    on_access: Callable[[], None] | None = None
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
        if entries is not None and entries.supports_incremental:
            cleanup = _IncrementalCleanup(entries, inc.get_cleanup_size(), kind, ttl, now)
            on_access = cleanup.run
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
    return on_access
