"""The internal timer service: event- and processing-time timers as keyed state.

One :class:`InternalTimerService` exists per (operator, name), over the
operator's keyed state backend. A timer is ``(key, namespace, timestamp)``;
the key is the backend's current key when the timer is registered, the
namespace scopes it (``VOID_NAMESPACE`` for process-function timers, a window
for window triggers).

Storage (why timers survive failures and rescaling): every timer is one entry
of a ``MapState`` of the owning key, named ``_timer_state/event_<name>`` or
``_timer_state/processing_<name>`` (Flink's names), mapping ``(namespace,
timestamp)`` to ``True``. The map is ordinary keyed state, so it is written by
the backend's full and delta snapshots, restored by key group and split on
rescale by ANY registered backend, with no timer-specific code in the backend.

In memory (why firing is cheap): per time domain, buckets ``timestamp ->
{(key, namespace): key group}`` of the live timers and a binary heap of the
distinct timestamps. A window's timers (one per key, all at the window's end)
share one heap entry. The buckets are rebuilt from the map state when the
service is created (an operator instance is always opened after its backend
was restored), via ``backend.get_keys``. Registering a timer that exists is one
dict lookup; advancing time when nothing is due is one comparison with the
heap's head.

Bulk registrations (:meth:`InternalTimerService.register_event_time_timers`)
reach the map state late: at :meth:`InternalTimerService.flush`, which the
owning operator calls from ``snapshot_state`` (before every snapshot), in
registration order. A timer that fires before the flush never touches the
state (a window that opens and fires within one epoch costs no state write for
its timers). Every per-timer call flushes first, so the state and the queue
agree wherever a per-timer caller can look.

Ordering: timers fire in timestamp order; ties break by key group, then by
registration order (after a restore: by the order the backend lists keys and
map entries in). Timers registered while firing (e.g. by ``on_timer``) whose
timestamp is already due fire within the same advance, as in Flink, because the
returned iterator is lazy: consume it one timer at a time, setting up the user
call for each timer before taking the next.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any, NamedTuple

from streamstate.api.state import MapStateDescriptor
from streamstate.errors import KeySerializationError, StateAccessError
from streamstate.runtime.state.base import KeyedStateBackend

__all__ = [
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "InternalTimer",
    "InternalTimerService",
    "TimeDomain",
]

#: ``Long.MIN_VALUE``: the watermark before any watermark arrived
MIN_WATERMARK = -(1 << 63)
#: ``Long.MAX_VALUE``: the final watermark of a bounded input (fires every event-time timer)
MAX_WATERMARK = (1 << 63) - 1


class TimeDomain:
    """The time domains of timers (names as PyFlink's ``TimeDomain`` members)."""

    EVENT_TIME = "EVENT_TIME"
    PROCESSING_TIME = "PROCESSING_TIME"


class InternalTimer(NamedTuple):
    """A fired (or registered) timer."""

    key: Any
    key_group: int
    namespace: Any
    timestamp: int


#: stale heap entries tolerated before a compaction (lazy deletion keeps deletes O(1))
_COMPACT_SLACK = 1024


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class _TimerQueue:
    """One time domain: the map state (durable) plus timestamp buckets (in memory).

    ``buckets[ts]`` maps ``(key, namespace) -> key group`` of the live timers at
    ``ts`` (insertion ordered); ``heap`` holds the distinct timestamps (lazily:
    a timestamp whose bucket emptied stays until it reaches the head). Timers
    sharing a timestamp (every key's timer of a window) cost one heap entry.
    """

    __slots__ = ("state", "state_name", "heap", "buckets", "size", "fresh", "log")

    def __init__(self, backend: KeyedStateBackend, state_name: str) -> None:
        self.state_name = state_name
        self.state: Any = backend.get_partitioned_state(MapStateDescriptor(state_name))
        self.heap: list[int] = []
        self.buckets: dict[int, dict[tuple[Any, Any], int]] = {}
        #: number of live timers
        self.size = 0
        #: timestamps whose bucket :meth:`add_keys` made since the last :meth:`flush`: none
        #: of their timers is in the state (firing them removes nothing from it)
        self.fresh: set[int] = set()
        #: the bulk registrations not yet in the state, in order: ``(namespace, timestamp,
        #: [(key, key group), ...], bucket)``. While the log is not empty no timer leaves a
        #: bucket alone (every per-timer call flushes first; firing takes whole buckets),
        #: so the timers of an entry whose bucket is still the timestamp's are all live
        self.log: list[tuple[Any, int, list[tuple[Any, int]], dict[Any, int]]] = []
        self._rebuild(backend)

    def _rebuild(self, backend: KeyedStateBackend) -> None:
        keys = list(backend.get_keys(self.state_name))
        if not keys:
            return
        key_group_of = backend.key_group_of
        buckets, state = self.buckets, self.state
        for key in keys:
            kg = key_group_of(key)
            backend.set_current_key(key, kg)
            for ns, ts in state.keys():
                b = buckets.get(ts)
                if b is None:
                    b = buckets[ts] = {}
                b[(key, ns)] = kg
                self.size += 1
        self.heap = list(buckets)
        heapq.heapify(self.heap)

    def add(self, backend: KeyedStateBackend, namespace: Any, timestamp: int) -> None:
        if self.log:
            self.flush(backend)  # the state in registration order, every bucket in it
        key = backend.get_current_key()
        b = self.buckets.get(timestamp)
        try:
            if b is not None and (key, namespace) in b:
                return
        except TypeError:
            raise StateAccessError(
                f"a timer's namespace must be hashable, got {type(namespace).__name__!r}"
            ) from None
        # the state first: it raises (no current key) before the queue is touched
        try:
            self.state.put((namespace, timestamp), True)
        except KeySerializationError:
            raise StateAccessError(
                f"a timer's namespace must be hashable, got {type(namespace).__name__!r}"
            ) from None
        kg = backend.get_current_key_group()
        if b is None:
            self.buckets[timestamp] = {(key, namespace): kg}
            heapq.heappush(self.heap, timestamp)
        else:
            b[(key, namespace)] = kg
        self.size += 1

    def add_keys(
        self,
        backend: KeyedStateBackend,
        namespace: Any,
        timestamp: int,
        keys: list[tuple[Any, int]],
    ) -> None:
        """:meth:`add` for each ``(key, key group)`` of ``keys`` in order, into the queue
        only: the state gets them at :meth:`flush` (unless they fired before)."""
        b = self.buckets.get(timestamp)
        try:
            # one hash of (key, window) per timer (TimeWindow.__hash__ is a Python call):
            # the dict made here hands its hashes to update(); a registered timer keeps its
            # place (its key group is the same)
            new = {(key, namespace): kg for key, kg in keys}
        except TypeError:
            raise StateAccessError(
                f"a timer's namespace must be hashable, got {type(namespace).__name__!r}"
            ) from None
        if not new:
            return
        if b is None:
            b = self.buckets[timestamp] = new
            heapq.heappush(self.heap, timestamp)
            self.fresh.add(timestamp)
            self.size += len(new)
        else:
            before = len(b)
            b.update(new)
            self.size += len(b) - before
        self.log.append((namespace, timestamp, keys, b))

    def flush(self, backend: KeyedStateBackend) -> None:
        """Write the timers of the bulk registrations still registered to the state, in
        registration order (the backend's current key is left as it was)."""
        log, buckets = self.log, self.buckets
        if not log:
            return
        current = backend.current
        saved = (current.key, current.key_group_index, current.key_bytes)
        set_key = backend.set_current_key
        first, n = backend.shuffled_key_slots() or (0, -1)
        put = self.state.put
        try:
            for namespace, timestamp, keys, bucket in log:
                if buckets.get(timestamp) is not bucket:
                    continue  # fired before the flush
                entry = (namespace, timestamp)
                for key, kg in keys:
                    kgi = kg - first
                    if 0 <= kgi < n:
                        current.key = key
                        current.key_group_index = kgi
                        current.key_bytes = None
                    else:
                        set_key(key, kg)
                    try:
                        put(entry, True)
                    except KeySerializationError:
                        raise StateAccessError(
                            f"a timer's namespace must be serializable by the state backend, "
                            f"got {type(namespace).__name__!r}"
                        ) from None
        finally:
            current.key, current.key_group_index, current.key_bytes = saved
        self.log = []
        self.fresh.clear()

    def remove(self, backend: KeyedStateBackend, namespace: Any, timestamp: int) -> None:
        if self.log:
            self.flush(backend)
        b = self.buckets.get(timestamp)
        if b is None:
            return
        if b.pop((backend.get_current_key(), namespace), None) is None:
            return
        self.size -= 1
        self.state.remove((namespace, timestamp))
        if not b:
            # lazy deletion: the heap entry is skipped when it reaches the head
            del self.buckets[timestamp]
            if len(self.heap) > 2 * len(self.buckets) + _COMPACT_SLACK:
                self.compact()

    def compact(self) -> None:
        """Drop timestamps without timers from the heap (amortised: when most are stale)."""
        self.heap = list(self.buckets)
        heapq.heapify(self.heap)

    def fire(self, backend: KeyedStateBackend, until: Callable[[], int]) -> Iterator[InternalTimer]:
        """Yield due timers (timestamp order; ties by key group) while ``head <= until()``."""
        if self.log:
            self.flush(backend)
        buckets = self.buckets
        set_key = backend.set_current_key
        remove = self.state.remove
        # self.heap is re-read every round: a handler's delete may compact (replace) it
        while self.heap and self.heap[0] <= until():
            ts = self.heap[0]
            b = buckets.get(ts)
            if not b:
                heapq.heappop(self.heap)
                buckets.pop(ts, None)
                self.fresh.discard(ts)
                continue
            # a snapshot of the bucket, by key group (stable: registration order within)
            for (key, ns), kg in sorted(b.items(), key=_by_key_group):
                if b.pop((key, ns), None) is None:
                    continue  # deleted by an earlier handler
                self.size -= 1
                set_key(key, kg)
                if ts not in self.fresh:
                    remove((ns, ts))
                yield InternalTimer(key, kg, ns, ts)
                if self.heap and self.heap[0] < ts:
                    break  # a handler registered an earlier due timer: fire that first
            # loop again: handlers may have added timers to this bucket (they are due too)

    def take_due(
        self, backend: KeyedStateBackend, until: int
    ) -> Iterator[tuple[int, list[tuple[Any, int, Any]]]]:
        """The due timers (``timestamp <= until``) a timestamp at a time, in :meth:`fire`'s
        order: ``(timestamp, [(key, key group, namespace), ...])``, each batch unregistered
        (queue and state) before it is yielded. Timers registered meanwhile fire if due,
        after the batch being handled (:meth:`fire` would fire an earlier one first)."""
        buckets = self.buckets
        set_key = backend.set_current_key
        first, n = backend.shuffled_key_slots() or (0, -1)
        current = backend.current
        remove = self.state.remove
        fresh = self.fresh
        heap = self.heap
        while heap and heap[0] <= until:
            ts = heapq.heappop(heap)
            b = buckets.pop(ts, None)
            if not b:
                continue
            due = sorted(b.items(), key=_by_key_group)
            if ts in fresh:  # none of them reached the state
                fresh.discard(ts)
                batch = [(key, kg, ns) for (key, ns), kg in due]
            else:
                batch = []
                for (key, ns), kg in due:
                    kgi = kg - first
                    if 0 <= kgi < n:
                        current.key = key
                        current.key_group_index = kgi
                        current.key_bytes = None
                    else:
                        set_key(key, kg)
                    remove((ns, ts))  # a timer logged but not flushed: removes nothing
                    batch.append((key, kg, ns))
            self.size -= len(batch)
            yield ts, batch
            heap = self.heap  # a compaction may have replaced it

    def drop_stale_head(self) -> None:
        """Pop timestamps without timers off the head so ``peek`` sees a live timer."""
        heap, buckets = self.heap, self.buckets
        while heap and not buckets.get(heap[0]):
            buckets.pop(heapq.heappop(heap), None)

    def sorted_timers(self) -> list[InternalTimer]:
        out: list[InternalTimer] = []
        for ts in sorted(self.buckets):
            for (key, ns), kg in sorted(self.buckets[ts].items(), key=_by_key_group):
                out.append(InternalTimer(key, kg, ns, ts))
        return out


#: the sort key of a bucket's ``((key, namespace), key group)`` items (C: no call per item)
_by_key_group = itemgetter(1)


class InternalTimerService:
    """Event- and processing-time timers of one operator (instance) under one name.

    Create it in the operator's ``open()`` (after the keyed backend was
    restored): the constructor registers the two timer map states and rebuilds
    the in-memory queues from them. ``clock`` (ms) supplies the processing time
    until the first :meth:`advance_processing_time`; the wall clock by default.

    ``register_*``/``delete_*`` act on the backend's current key. When a fired
    timer is yielded, the backend's current key is already set to the timer's
    key (the caller may set it again); the timer is no longer registered, so
    the handler may register it again.
    """

    def __init__(
        self,
        backend: KeyedStateBackend,
        name: str = "user-timers",
        clock: Callable[[], int] | None = None,
    ) -> None:
        if backend is None:
            raise StateAccessError(
                f"timer service {name!r}: timers can only be used on a keyed stream, i.e. "
                f"after key_by() (timers are scoped to a key)"
            )
        self.backend = backend
        self.name = name
        self._event = _TimerQueue(backend, f"_timer_state/event_{name}")
        self._processing = _TimerQueue(backend, f"_timer_state/processing_{name}")
        self._watermark = MIN_WATERMARK
        self._clock = clock or _wall_clock_ms
        self._processing_time: int | None = None

    @classmethod
    def for_operator(cls, ctx: Any, name: str) -> InternalTimerService:
        """The timer service ``name`` of the operator whose ``OperatorContext`` is ``ctx``.

        Created on first use (over ``ctx.keyed_backend``) and cached on ``ctx``, so
        an operator instance has one service per name. Processing time before the
        first advance is ``ctx.processing_time`` (the epoch's driver time) when the
        task set it, else the wall clock; the watermark starts at
        ``ctx.current_watermark`` when the task restored one.
        """
        services = ctx.__dict__.setdefault("_timer_services", {})
        svc: InternalTimerService | None = services.get(name)
        if svc is None:

            def clock() -> int:
                now = getattr(ctx, "processing_time", 0)
                return int(now) if now else _wall_clock_ms()

            svc = cls(ctx.keyed_backend, name, clock=clock)
            wm = getattr(ctx, "current_watermark", MIN_WATERMARK)
            if isinstance(wm, int) and wm > MIN_WATERMARK:
                svc._watermark = wm
            services[name] = svc
        return svc

    # ----------------------------------------------------------------- registration
    def register_event_time_timer(self, namespace: Any, ts: int) -> None:
        """Fire ``(current key, namespace, ts)`` once the watermark reaches ``ts`` (deduplicated)."""
        self._event.add(self.backend, namespace, int(ts))

    def register_event_time_timers(
        self, namespace: Any, ts: int, keys: list[tuple[Any, int]]
    ) -> None:
        """:meth:`register_event_time_timer` for each ``(key, key group)`` of ``keys`` in
        turn as the current key, without touching the backend's current key. The timers
        are written to the state at :meth:`flush` (the list is kept until then: the caller
        does not change it); the operator calling this flushes in its ``snapshot_state``."""
        self._event.add_keys(self.backend, namespace, int(ts), keys)

    def has_event_time_timers_at(self, ts: int) -> bool:
        """Whether any event-time timer is registered at ``ts``."""
        return bool(self._event.buckets.get(int(ts)))

    def event_time_timer_keys(self, namespace: Any, ts: int) -> list[tuple[Any, int]]:
        """``(key, key group)`` of every registered event-time timer ``(key, namespace,
        ts)`` (bulk registrations not flushed yet included), in registration order."""
        b = self._event.buckets.get(int(ts))
        if not b:
            return []
        out = []
        same = None  # a bulk registration's timers share one namespace object: one __eq__
        for (key, ns), kg in b.items():
            if ns is same or ns == namespace:
                same = ns
                out.append((key, kg))
        return out

    def flush(self) -> None:
        """Write the timers of :meth:`register_event_time_timers` that are still
        registered to the keyed state (before a snapshot; per-timer calls do it first)."""
        self._event.flush(self.backend)

    def delete_event_time_timer(self, namespace: Any, ts: int) -> None:
        """Remove the current key's event-time timer ``(namespace, ts)``; no-op if absent."""
        self._event.remove(self.backend, namespace, int(ts))

    def register_processing_time_timer(self, namespace: Any, ts: int) -> None:
        """Fire ``(current key, namespace, ts)`` once processing time reaches ``ts``."""
        self._processing.add(self.backend, namespace, int(ts))

    def delete_processing_time_timer(self, namespace: Any, ts: int) -> None:
        """Remove the current key's processing-time timer ``(namespace, ts)``; no-op if absent."""
        self._processing.remove(self.backend, namespace, int(ts))

    # ----------------------------------------------------------------- time
    def current_watermark(self) -> int:
        """The last watermark passed to :meth:`advance_watermark` (``MIN_WATERMARK`` before)."""
        return self._watermark

    def current_processing_time(self) -> int:
        """The clock's time, but never less than the last :meth:`advance_processing_time`.

        (With ``for_operator`` the clock is the epoch's driver time, which moves on at
        the start of each epoch, after the previous epoch's advance.)
        """
        now = int(self._clock())
        pt = self._processing_time
        return now if pt is None or now > pt else pt

    def advance_watermark(self, watermark: int) -> Iterator[InternalTimer]:
        """Set the watermark (it never goes back) and iterate the event-time timers now due.

        Lazy: each ``next()`` pops one timer; timers registered meanwhile with a
        timestamp ``<=`` the watermark are yielded too.
        """
        if watermark > self._watermark:
            self._watermark = int(watermark)
        q = self._event
        if not q.heap or q.heap[0] > self._watermark:
            return iter(())
        return q.fire(self.backend, self.current_watermark)

    def take_due_event_time_timers(
        self, watermark: int
    ) -> Iterator[tuple[int, list[tuple[Any, int, Any]]]]:
        """:meth:`advance_watermark` a timestamp at a time, for handlers that register no
        timer due before the one they handle: ``(timestamp, [(key, key group,
        namespace), ...])`` in firing order, those timers no longer registered. The
        backend's current key is not set to each timer's key: the handler sets it."""
        if watermark > self._watermark:
            self._watermark = int(watermark)
        q = self._event
        if not q.heap or q.heap[0] > self._watermark:
            return iter(())
        return q.take_due(self.backend, self._watermark)

    def advance_processing_time(self, now: int) -> Iterator[InternalTimer]:
        """Set the processing time (it never goes back) and iterate the timers now due."""
        if self._processing_time is None or now > self._processing_time:
            self._processing_time = int(now)
        q = self._processing
        if not q.heap or q.heap[0] > self._processing_time:
            return iter(())
        return q.fire(self.backend, self.current_processing_time)

    # ----------------------------------------------------------------- inspection
    def num_event_time_timers(self) -> int:
        return self._event.size

    def num_processing_time_timers(self) -> int:
        return self._processing.size

    def next_event_time_timer(self) -> int | None:
        """The smallest registered event-time timestamp (``None`` when there is none)."""
        self._event.drop_stale_head()
        return self._event.heap[0] if self._event.heap else None

    def next_processing_time_timer(self) -> int | None:
        """The smallest registered processing-time timestamp (``None`` when there is none)."""
        self._processing.drop_stale_head()
        return self._processing.heap[0] if self._processing.heap else None

    def event_time_timers(self) -> list[InternalTimer]:
        """All registered event-time timers, in firing order (a copy; for tests and tools)."""
        return self._event.sorted_timers()

    def processing_time_timers(self) -> list[InternalTimer]:
        """All registered processing-time timers, in firing order (a copy)."""
        return self._processing.sorted_timers()

    def __repr__(self) -> str:
        return (
            f"InternalTimerService({self.name!r}, event timers {self.num_event_time_timers()}, "
            f"processing timers {self.num_processing_time_timers()}, "
            f"watermark {self._watermark})"
        )
